"""`journal schedule`: exactly one invocation per tick with several worker processes, one of
them SIGKILLed and restarted (LMDB and PostgreSQL), and the commands a user types."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys

import pytest

from journal import Status, open_store

from ..waiting import wait_until
from .conftest import target

TICKS = 10  # every second: about ten seconds of firing


def _worker(db: str, log_dir, n: int, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_DB"}
    with open(log_dir / f"worker-{n}.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--lease-ttl", "2", *extra],
                                stdout=log, stderr=subprocess.STDOUT, env=env)


def _ticks(db: str) -> list[str]:
    store = open_store(db)
    try:
        return sorted(i for status in Status for i in store.ids(status) if i.startswith("every-second@"))
    finally:
        store.close()


def _exactly_once_with_workers_killed(db: str, tmp_path, journal_args: list[str], worker_args: tuple[str, ...],
                                      schedule_target: str) -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "schedule", "add", "every-second", schedule_target,
                           "--every", "1s", "--overlap", "allow-all", "--input", '"tick"', "--db", db, *journal_args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    workers = [_worker(db, tmp_path, n, *worker_args) for n in range(3)]
    try:
        for victim, seen in ((0, 3), (1, 6)):
            wait_until(lambda seen=seen: len(_ticks(db)) >= seen, f"{seen} ticks to fire")
            workers[victim].send_signal(signal.SIGKILL)  # mid-firing or mid-run: no goodbye
            workers[victim].wait(timeout=30)
            workers[victim] = _worker(db, tmp_path, 10 + victim, *worker_args)
        wait_until(lambda: len(_ticks(db)) >= TICKS, f"{TICKS} ticks to fire")
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    ids = _ticks(db)
    ticks = [datetime.datetime.fromisoformat(i.partition("@")[2]) for i in ids]
    # One invocation per tick (the id is the tick), and no tick missing between the first and
    # the last: every second of the window has its invocation.
    assert len(set(ids)) == len(ids)
    span = int((ticks[-1] - ticks[0]).total_seconds())
    assert len(ticks) == span + 1, ids
    shown = json.loads(subprocess.run([sys.executable, "-m", "cli", "schedule", "show", "every-second", "--json",
                                       "--db", db, *journal_args], capture_output=True, text=True,
                                      timeout=60).stdout)
    assert shown["skipped"] == 0


def test_every_tick_starts_once_with_three_lmdb_workers_one_killed_and_restarted(tmp_path):
    db = str(tmp_path / "db")
    _exactly_once_with_workers_killed(db, tmp_path, [], (), target("greet"))


def test_every_tick_starts_once_with_three_postgres_workers_one_killed_and_restarted(tmp_path, postgres_url):
    handler = f"greet={target('greet')}"
    _exactly_once_with_workers_killed(postgres_url, tmp_path, [], ("--handler", handler), "greet")


def test_schedule_commands_add_show_pause_resume_trigger_backfill_rm(journal):
    added = journal("schedule", "add", "nightly", target("greet"), "--cron", "30 2 * * *", "--tz", "Europe/Paris",
                    "--input", '"night"', "--overlap", "buffer-one", "--catch-up", "10m", "--json")
    assert added.exit_code == 0, added.stderr
    doc = json.loads(added.stdout)
    assert doc["cron"] == "30 2 * * *" and doc["tz"] == "Europe/Paris" and doc["overlap"] == "buffer-one"
    assert doc["catch_up"] == 600 and doc["next_run"] is not None and doc["last_run"] is None
    assert journal("schedule", "pause", "nightly", "--note", "provider outage").exit_code == 0
    doc = json.loads(journal("schedule", "show", "nightly", "--json").stdout)
    assert doc["paused"] and doc["note"] == "provider outage" and doc["next_run"] is None
    assert journal("schedule", "resume", "nightly").exit_code == 0
    triggered = journal("schedule", "trigger", "nightly")
    assert triggered.exit_code == 0 and triggered.stdout.startswith("nightly@")
    doc = json.loads(journal("schedule", "show", "nightly", "--json").stdout)
    assert doc["last_run"] == {"at": doc["recent"][0]["at"], "id": triggered.stdout.strip(), "status": "pending"}
    listed = json.loads(journal("ls", "--json").stdout)
    assert listed[0]["tags"] == {"schedule": "nightly"}
    for _ in range(2):
        back = journal("schedule", "backfill", "nightly", "--from", "2026-05-01T00:00:00Z", "--to",
                       "2026-05-03T00:00:00Z", "--json")
        assert back.exit_code == 0, back.stderr
    assert json.loads(back.stdout) == [{"id": "nightly@2026-05-01T00:30:00Z", "started": False},
                                       {"id": "nightly@2026-05-02T00:30:00Z", "started": False}]
    assert len(json.loads(journal("ls", "--json").stdout)) == 3
    assert [s["name"] for s in json.loads(journal("schedule", "ls", "--json").stdout)] == ["nightly"]
    assert journal("schedule", "rm", "nightly").exit_code == 0
    missing = journal("schedule", "show", "nightly")
    assert missing.exit_code == 2 and "no schedule 'nightly'" in missing.stderr


@pytest.mark.parametrize(("args", "said"), [
    (["--cron", "every day"], "is not valid"),
    (["--every", "1m", "--cron", "@daily"], "one of them"),
    (["--every", "soon"], "not a duration"),
    (["--every", "1m", "--tz", "Mars/Olympus"], "not known"),
    (["--every", "1m", "--start-at", "noon"], "not an ISO 8601 time"),
])
def test_bad_schedules_exit_2_and_add_nothing(journal, args, said):
    done = journal("schedule", "add", "bad", target("greet"), *args)
    assert done.exit_code == 2 and said in done.stderr, done.stderr
    assert json.loads(journal("schedule", "ls", "--json").stdout) == []


@pytest.fixture
def server(tmp_path):
    from .serving import Server

    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--workers", "1")
    yield s
    s.stop()


def test_http_schedules_put_get_pause_resume_trigger_backfill_delete_and_serve_fires_them(server):
    c = server.client
    added = c.put("/schedules/ping", json={"target": "echo", "every": 1, "input": "pong", "overlap": "allow-all"})
    assert added.status_code == 201, added.text
    assert added.json()["every"] == 1 and added.json()["next_run"] is not None
    # journal serve's workers fire it: a tick's invocation appears and completes.
    fired = wait_until(lambda: c.get("/schedules/ping").json()["last_run"], "serve to fire a tick")
    assert fired["id"].startswith("ping@")
    server.wait_status(fired["id"], "completed")
    assert c.get(f"/invocations/{fired['id']}").json()["tags"] == {"schedule": "ping"}
    paused = c.post("/schedules/ping/pause", json={"note": "maintenance"})
    assert paused.status_code == 200 and paused.json()["paused"] and paused.json()["note"] == "maintenance"
    assert c.post("/schedules/ping/resume").json()["paused"] is False
    triggered = c.post("/schedules/ping/trigger")
    assert triggered.status_code == 202 and triggered.json()["id"].startswith("ping@")
    back = c.post("/schedules/ping/backfill", json={"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:03Z"})
    assert back.status_code == 202, back.text
    assert [t["started"] for t in back.json()["ticks"]] == [True, True, True]
    again = c.post("/schedules/ping/backfill", json={"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:03Z"})
    assert [t["started"] for t in again.json()["ticks"]] == [False, False, False]
    assert [s["name"] for s in c.get("/schedules").json()["schedules"]] == ["ping"]
    bad = c.put("/schedules/bad", json={"target": "echo", "cron": "sometimes"})
    assert bad.status_code == 422 and "not valid" in bad.json()["error"]["message"]
    assert c.delete("/schedules/ping").status_code == 204
    assert c.get("/schedules/ping").status_code == 404
