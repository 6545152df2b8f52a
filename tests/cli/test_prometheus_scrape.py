"""A real Prometheus (Debian's package) scrapes a real `journal serve`, and every query of
the Grafana dashboard in docs/ answers from what it scraped. With CI=true it runs, never
skips: .ci/run installs prometheus."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from .serving import Server, wait_for
from .test_metrics import AGENTS, HANDLERS

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
PROMETHEUS = shutil.which("prometheus")

if PROMETHEUS is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("the metrics test needs Debian's prometheus: apt-get install -y prometheus")
    pytest.skip("prometheus is not installed (apt-get install -y prometheus); CI runs this", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_panel_of_the_dashboard_answers_from_a_real_scrape(tmp_path):
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log", handlers=HANDLERS, agents=AGENTS)
    port = _free_port()
    target = server.url.split("//")[1]
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: journal, static_configs: [{{targets: ['{target}']}}]}}]\n")
    with open(tmp_path / "prometheus.log", "wb") as log:
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}/api/v1/query"
    try:
        for n in range(6):
            server.client.post("/invocations", json={"handler": "ok", "input": n, "id": f"ok-{n}"})
        for n in range(2):
            server.client.post("/invocations", json={"handler": "bad", "input": n, "id": f"bad-{n}"})
        server.wait_status("ok-5", "completed")
        server.wait_status("bad-1", "failed")

        def answer(expr: str) -> list | None:
            try:
                doc = httpx.get(api, params={"query": expr}, timeout=10).json()
            except httpx.TransportError:
                return None
            assert doc["status"] == "success", (expr, doc)
            return doc["data"]["result"] or None

        # Every counter has been scraped twice after the workload: rates have what they need.
        wait_for(lambda: answer('max(journal_invocations{status="completed",handler="ok"}) == 6'), timeout=60,
                 what="Prometheus to scrape the finished workload")
        panels = json.loads(DASHBOARD.read_text())["panels"]
        exprs = [t["expr"].replace("$__rate_interval", "1m") for p in panels for t in p["targets"]]
        assert len(exprs) >= 8
        for expr in exprs:
            wait_for(lambda e=expr: answer(e), timeout=60, what=f"an answer to {expr}")
        by_status = {r["metric"]["status"]: float(r["value"][1])
                     for r in answer("max by (status) (journal_invocations)") or []}
        assert by_status["completed"] == 6 and by_status["failed"] == 2 and by_status["pending"] == 0
        failed = answer('sum by (handler) (increase(journal_invocations_finished_total{status="failed"}[1m]))')
        assert [r["metric"]["handler"] for r in failed or []] == ["bad"]
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        server.stop()
