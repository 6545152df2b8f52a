"""Prometheus metrics, read with prometheus_client's own parser after a known workload: what
`journal serve` answers at /metrics and `journal worker --metrics` serves, number by number.
A process's counters count what it did (the server after a SIGKILL replays the killed run's
steps); the store's gauges are the same from every process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .serving import Server, wait_for

AGENTS = Path(__file__).parent / "metrics_agents.py"
HANDLERS = ("ok=ok", "bad=bad", "long=long")
N_OK, N_BAD, K_REPLAYED = 5, 2, 3


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_a_known_workload_and_a_sigkill_count_every_number(tmp_path):
    db = str(tmp_path / "db")
    entered, gate = tmp_path / "entered", tmp_path / "gate"
    first = Server(db, tmp_path / "first.log", handlers=HANDLERS, agents=AGENTS)
    first.client.post("/invocations", json={"handler": "long", "id": "long-1", "input": {
        "steps": K_REPLAYED, "entered": str(entered), "gate": str(gate)}})
    wait_for(entered.exists, what="the long run to reach its wait")
    first.proc.send_signal(signal.SIGKILL)  # mid-run: its K steps are journaled, it holds the lease
    first.proc.wait()
    first.client.close()
    gate.write_text("open")

    server = Server(db, tmp_path / "second.log", handlers=HANDLERS, agents=AGENTS)
    try:
        for n in range(N_OK):
            assert server.client.post("/invocations", json={"handler": "ok", "input": n, "id": f"ok-{n}"}).status_code == 201
        for n in range(N_BAD):
            assert server.client.post("/invocations", json={"handler": "bad", "input": n, "id": f"bad-{n}"}).status_code == 201
        for n in range(N_OK):
            server.wait_status(f"ok-{n}", "completed")
        for n in range(N_BAD):
            server.wait_status(f"bad-{n}", "failed")
        server.wait_status("long-1", "completed")  # taken over from the killed server, replayed, finished

        response = server.client.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        # A run's status is its committed outcome; the server counts it finished just after.
        finished = (("ok", "completed", N_OK), ("bad", "failed", N_BAD), ("long", "completed", 1))
        found = wait_for(lambda: (f := samples(server.client.get("/metrics").text)) and all(
            value(f, "journal_invocations_finished_total", handler=h, status=s) >= n for h, s, n in finished) and f,
            what="every finished run to be counted")
    finally:
        server.stop()

    # This process's counters: what the second server did.
    assert value(found, "journal_invocations_started_total") == N_OK + N_BAD
    assert value(found, "journal_invocations_finished_total", handler="ok", status="completed") == N_OK
    assert value(found, "journal_invocations_finished_total", handler="bad", status="failed") == N_BAD
    assert value(found, "journal_invocations_finished_total", handler="long", status="completed") == 1
    assert value(found, "journal_steps_total", handler="long", replayed="true") == K_REPLAYED
    assert value(found, "journal_steps_total", handler="long", replayed="false") == 1  # its last step
    assert value(found, "journal_steps_total", handler="ok", replayed="false") == N_OK
    assert value(found, "journal_steps_total", handler="bad", replayed="false") == N_BAD
    assert value(found, "journal_steps_total", handler="ok", replayed="true") == 0
    assert value(found, "journal_step_seconds_count", handler="ok") == N_OK
    assert value(found, "journal_step_seconds_count", handler="long") == 1
    # long-1 was left running under the killed server's lease: the one takeover; the runs
    # this server started and leased itself are none.
    assert value(found, "journal_lease_takeovers_total") == 1
    assert value(found, "journal_store_commit_seconds_count") >= N_OK + N_BAD  # each run's end, at least, grouped
    assert value(found, "journal_store_commit_seconds_sum") > 0
    assert value(found, "journal_store_reconnects_total") == 0  # LMDB: no server to lose
    # The store's gauges: every invocation, the one the killed server started included.
    for handler, status, count in (("ok", "completed", N_OK), ("bad", "failed", N_BAD), ("long", "completed", 1)):
        assert value(found, "journal_invocations", handler=handler, status=status) == count
        assert sum(value(found, "journal_invocations", handler=handler, status=s) for s in
                   ("pending", "running", "suspended", "diverged", "completed", "failed", "cancelled")) == count
        assert value(found, "journal_queue_depth", handler=handler) == 0
        assert value(found, "journal_queue_oldest_seconds", handler=handler) == 0
    # Step names are never labels.
    assert not [key for key in found if any(name in ("name", "step") for name, _ in key[1])]


def test_a_worker_serves_the_same_store_gauges_and_keeps_the_token_and_host_rules(tmp_path):
    db = str(tmp_path / "db")
    for n in range(3):
        done = subprocess.run([sys.executable, "-m", "cli", "start", f"{AGENTS}:ok", "--input", str(n), "--id",
                               f"w-{n}", "--db", db], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    refused = subprocess.run([sys.executable, "-m", "cli", "worker", "--db", db, "--metrics", "0.0.0.0:0"],
                             capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if k != "JOURNAL_TOKEN"})
    assert refused.returncode == 2 and "without a token" in refused.stderr
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--metrics", "127.0.0.1:0"],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "JOURNAL_TOKEN": "s3cret"})
    try:
        url = wait_for(lambda: (m := re.search(r"metrics on (http://\S+)", log.read_text())) and m.group(1),
                       what="the worker to say where its metrics are")

        def scrape() -> dict:
            response = httpx.get(url, headers={"Authorization": "Bearer s3cret"})
            assert response.status_code == 200, response.text
            return samples(response.text)

        handler = f"{AGENTS}:ok"
        # The store's gauge counts an invocation completed once its outcome is committed, and
        # the worker's own counter a moment later: a scrape can fall between the two.
        found = wait_for(lambda: (f := scrape()) and value(
            f, "journal_invocations", handler=handler, status="completed") == 3 and value(
            f, "journal_invocations_finished_total", handler=handler, status="completed") == 3 and f,
            what="the worker to run the three invocations and count them finished")
        assert value(found, "journal_queue_depth", handler=handler) == 0
        assert value(found, "journal_invocations_started_total") == 0  # `journal start` created them, not the worker
        assert httpx.get(url).status_code == 401
        host = url.split("/")[2]
        assert httpx.get(url, headers={"Authorization": "Bearer s3cret",
                                       "Host": "evil.example:" + host.split(":")[1]}).status_code == 421
        assert httpx.get(url.replace("/metrics", "/other"), headers={"Authorization": "Bearer s3cret"}).status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
