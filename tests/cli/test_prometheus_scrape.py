"""A real Prometheus (Debian's package) scrapes a real `journal serve`, and every query of
the Grafana dashboard in docs/ answers from what it scraped. With CI=true it runs, never
skips: .ci/run installs prometheus."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .dashboard_drawing import dashboard_page
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


# docs/img/dashboard.png is the drawing `_draw` screenshots; JOURNAL_UPDATE_SCREENSHOT=1 writes it again.
DOCS_SCREENSHOT = Path(__file__).parents[2] / "docs" / "img" / "dashboard.png"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _draw(tmp_path: Path, port: int, began: float) -> None:
    """Every panel drawn from Prometheus's answers over the run (`query_range`), in Chromium:
    each has a line to draw."""
    if not os.path.exists(CHROMIUM) and os.environ.get("CI") != "true":
        return  # (the browser tests say so; CI has it)
    from playwright.sync_api import sync_playwright

    dashboard = json.loads(DASHBOARD.read_text())
    answers = {}
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            doc = httpx.get(f"http://127.0.0.1:{port}/api/v1/query_range", timeout=10, params={
                "query": target["expr"].replace("$__rate_interval", "1m"), "start": began - 5, "end": time.time(),
                "step": 1}).json()
            assert doc["status"] == "success", (target["expr"], doc)
            answers[target["expr"]] = doc["data"]["result"]
    shot = DOCS_SCREENSHOT if os.environ.get("JOURNAL_UPDATE_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.set_content(dashboard_page(dashboard, answers))
            drawn = page.eval_on_selector_all(".panel", "ps => ps.map(p => p.querySelectorAll('path.series').length)")
            assert len(drawn) == len(dashboard["panels"]) and all(drawn), "; ".join(f"{t}: {n}" for t, n in zip(
                [p["title"] for p in dashboard["panels"]], drawn, strict=False))
            assert page.screenshot(path=str(shot), full_page=True).startswith(b"\x89PNG")
        finally:
            browser.close()


def test_every_panel_of_the_dashboard_answers_from_a_real_scrape(tmp_path):
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log", handlers=(*HANDLERS, "llm=llm"), agents=AGENTS)
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
    began = time.time()
    try:
        def answer(expr: str) -> list | None:
            try:
                response = httpx.get(api, params={"query": expr}, timeout=10)
            except httpx.TransportError:
                return None
            if response.status_code == 503:  # starting up: not ready to answer queries yet
                return None
            doc = response.json()
            assert doc["status"] == "success", (expr, doc)
            return doc["data"]["result"] or None

        # In three waves, each seen by a scrape before the next: the counters move between
        # scrapes, so that rates and quantiles have something to show.
        wait_for(lambda: answer('up{job="journal"} == 1'), timeout=60, what="Prometheus to scrape the server")
        # A limit the `llm` handler's steps take a unit of and report tokens to (the limit panels).
        assert server.client.put("/limits/llm", json={"concurrency": 2, "tokens": "100000/m"}).status_code == 200
        for wave in range(3):
            for n in (2 * wave, 2 * wave + 1):
                server.client.post("/invocations", json={"handler": "ok", "input": n, "id": f"ok-{n}"})
                server.wait_status(f"ok-{n}", "completed")
            server.client.post("/invocations", json={"handler": "llm", "input": wave, "id": f"llm-{wave}"})
            server.wait_status(f"llm-{wave}", "completed")
            if wave < 2:
                server.client.post("/invocations", json={"handler": "bad", "input": wave, "id": f"bad-{wave}"})
                server.wait_status(f"bad-{wave}", "failed")
            wait_for(lambda w=wave: answer(f'max(journal_invocations{{status="completed",handler="ok"}}) == {2 * w + 2}'),
                     timeout=60, what=f"Prometheus to scrape wave {wave}")

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
        tokens = answer('max by (limit) (journal_limit_tokens_total)') or []
        assert [(r["metric"]["limit"], float(r["value"][1])) for r in tokens] == [("llm", 100 + 101 + 102)]
        failed = answer('sum by (handler) (increase(journal_invocations_finished_total{status="failed"}[1m]))')
        assert [r["metric"]["handler"] for r in failed or []] == ["bad"]
        _draw(tmp_path, port, began)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        server.stop()
