"""Batches: `retry --check` over 500 failed runs, 100 of them recorded by code the fix
changed; a `journal serve` SIGKILLed in the middle of the batch finishes it after a restart,
and every run is retried once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from journal import Status, batches, open_store
from runtime import Engine

from . import batch_agents
from .serving import Server, wait_for

AGENTS = Path(__file__).parent / "batch_agents.py"
FAILED, CHANGED = 500, 100


def _record_failures(db: str, count: int = FAILED) -> None:
    """Runs of the code before the fix, in this process: all fail at `pay`."""
    assert not batch_agents.FIXED

    async def main() -> None:
        async with Engine.open(db, handlers={"charge": batch_agents.charge}, durability="async") as engine:
            limit = anyio.Semaphore(32)

            async def one(n: int) -> None:
                async with limit:
                    outcome = await engine.run("charge", n, id=f"order-{n:03d}")
                    assert outcome.status == Status.FAILED

            async with anyio.create_task_group() as tg:
                for n in range(count):
                    tg.start_soon(one, n)

    anyio.run(main)


@pytest.fixture
def failed_store(tmp_path):
    db = str(tmp_path / "db")
    _record_failures(db)
    return db


def test_retry_check_retries_the_clean_ones_lists_the_diverging_and_survives_a_sigkill(failed_store, tmp_path):
    env = {"CHARGE_FIXED": "1"}
    first = Server(failed_store, tmp_path / "first.log", handlers=("charge=charge",), agents=AGENTS, env=env)
    dry = first.client.post("/batches", json={"action": "retry", "filter": {"status": "failed", "handler": "charge"},
                                              "check": True, "dry_run": True})
    assert dry.status_code == 202 and dry.json()["matched"] == FAILED
    counted = wait_for(lambda: (b := first.client.get(f"/batches/{dry.json()['id']}").json())["finished"] and b,
                       timeout=120, what="the dry run to finish")
    assert counted["done"] == FAILED - CHANGED and len(counted["diverging"]) == CHANGED
    assert first.client.get("/invocations", params={"status": "pending"}).json()["invocations"] == []

    made = first.client.post("/batches", json={"action": "retry", "filter": {"status": "failed"}, "check": True})
    assert made.status_code == 202
    batch_id = made.json()["id"]
    wait_for(lambda: first.client.get(f"/batches/{batch_id}").json()["done"] >= 50, timeout=120,
             what="the batch to be under way")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    first.client.close()
    with open_store(failed_store) as store:  # killed in the middle: the record says how far it got
        stopped = batches.load(store, batch_id)
    assert stopped is not None and not stopped.finished and 50 <= stopped.next < FAILED

    server = Server(failed_store, tmp_path / "second.log", handlers=("charge=charge",), agents=AGENTS, env=env)
    try:
        done = wait_for(lambda: (b := server.client.get(f"/batches/{batch_id}").json())["finished"] and b,
                        timeout=180, what="the restarted server to finish the batch")
        assert done["matched"] == FAILED and done["done"] == FAILED - CHANGED and done["errors"] == []
        assert sorted(done["diverging"]) == [f"order-{n:03d}" for n in range(0, FAILED, 5)]
        first_difference = done["first_differences"]["order-005"]
        assert "audit" in first_difference and "pay" in first_difference
        # Every clean one was retried once, and its retry ran the fixed code to the end.
        listed = []
        query = {"limit": 1000}
        while True:
            page = server.client.get("/invocations", params=query).json()
            listed += page["invocations"]
            if page["next_cursor"] is None:
                break
            query["cursor"] = page["next_cursor"]
        retries = [doc for doc in listed if "-retry-" in doc["id"]]
        assert sorted(doc["id"].split("-retry-")[0] for doc in retries) == [
            f"order-{n:03d}" for n in range(FAILED) if n % 5]
        for doc in retries:
            server.wait_status(doc["id"], "completed", timeout=120)
    finally:
        server.stop()


def _journal(*args: str, db: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_the_command_line_checks_first_dry_runs_and_acts_on_a_filter(tmp_path):
    db = str(tmp_path / "db")
    _record_failures(db, 30)
    fixed = {"CHARGE_FIXED": "1"}
    code = f"charge={AGENTS}:charge"
    dry = _journal("retry", "--where", "--status", "failed", "--handler", code, "--check", "--dry-run", db=db,
                   env=fixed)
    assert dry.returncode == 0, dry.stderr
    assert "would be retried: 24 of 30" in dry.stdout and "would diverge, left alone: 6" in dry.stdout
    assert "order-005" in dry.stdout
    assert json.loads(_journal("ls", "--status", "pending", "--json", db=db).stdout) == []
    done = _journal("retry", "--where", "--handler", code, "--check", "--json", db=db, env=fixed)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["matched"], report["done"], len(report["diverging"])) == (30, 24, 6)
    pending = {d["id"].split("-retry-")[0] for d in json.loads(_journal("ls", "--status", "pending", "--json",
                                                                        db=db).stdout)}
    assert pending == {f"order-{n:03d}" for n in range(30) if n % 5}
    # The ids `journal retry` gives (their steps keep the retried steps' idempotency keys), and
    # each failed run is retried once: neither a second batch nor `journal retry` retries it again.
    made = {d["id"] for d in json.loads(_journal("ls", "--status", "pending", "--json", db=db).stdout)}
    assert made == {f"order-{n:03d}-retry-1" for n in range(30) if n % 5}
    again = _journal("retry", "--where", "--handler", code, "--check", "--json", db=db, env=fixed)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert (second["matched"], second["done"], second["skipped"], len(second["diverging"])) == (30, 0, 24, 6)
    refused = _journal("retry", "order-001", "--no-run", db=db)
    assert refused.returncode == 2 and "already retried as 'order-001-retry-1'" in refused.stderr
    cancelled = _journal("cancel", "--where", "--status", "pending", "--dry-run", db=db)
    assert cancelled.returncode == 0 and "would be cancelled: 24 of 24" in cancelled.stdout
    both = _journal("retry", "order-001", "--where", db=db)
    assert both.returncode == 2 and "not both" in both.stderr
    alone = _journal("cancel", "--where", db=db)
    assert alone.returncode == 2 and "needs a filter" in alone.stderr
