"""Limits held by several `journal worker` processes at once: on LMDB (processes of one host)
and PostgreSQL (as many hosts would), the count of steps running at once, recorded by the
step functions themselves, never exceeds the limit; a worker SIGKILLed while it holds units
gives them back, and every run completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..waiting import wait_until

HERE = Path(__file__).parent
AGENTS = HERE / "limit_agents.py"
RUNS = 12


@pytest.fixture(params=["lmdb", "postgres"])
def db(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "db")


def journal(*args: str, db: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=120, env=env)


def worker(db: str, env: dict[str, str], log: Path, concurrency: int = 8, handler: str = "three_steps",
           ) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--concurrency", str(concurrency),
                                 "--handler", f"steps={AGENTS}:{handler}"], stdout=out, stderr=subprocess.STDOUT,
                                env=env)


def statuses(db: str, env: dict[str, str]) -> list[str]:
    done = journal("ls", "--json", db=db, env=env)
    return [i["status"] for i in json.loads(done.stdout or "[]")]


@pytest.mark.parametrize("kill", [False, True], ids=["two-workers", "one-killed"])
def test_concurrency_holds_across_worker_processes_and_a_killed_holder_gives_its_units_back(db, tmp_path, kill):
    gauge = tmp_path / "gauge"
    env = {**os.environ, "LIMIT_GAUGE": str(gauge)}
    assert journal("limit", "set", "db", "--concurrency", "3", db=db, env=env).returncode == 0
    for n in range(RUNS):
        started = journal("start", "steps", "--input", str(n), "--id", f"r{n}", db=db, env=env)
        assert started.returncode == 0, started.stderr
    workers = [worker(db, env, tmp_path / f"w{i}.log") for i in range(2)]
    try:
        if kill:
            runs = Path(str(gauge) + ".runs")
            # Once the first worker has run steps, it holds units (or is about to): killed mid-run.
            wait_until(lambda: runs.exists() and str(workers[0].pid) in runs.read_text(),
                       "the first worker to run a step")
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait()
        wait_until(lambda: statuses(db, env).count("completed") == RUNS, "every run to complete", timeout=120)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                w.wait(timeout=60)
    most, *running = gauge.read_text().split("\n")
    assert int(most) <= 3, f"{most} steps ran at once under --concurrency 3"
    if not kill:
        assert running == [] and int(most) == 3
    listed = json.loads(journal("limit", "ls", "--json", db=db, env=env).stdout)
    assert [(v["name"], v["in_use"], v["waiting"]) for v in listed] == [("db", 0, 0)]


def test_steps_on_shares_keep_the_concurrency_across_worker_processes(db, tmp_path):
    """Short steps one after another in each invocation, eight invocations at once for six units:
    a worker's steps go on its process's share whenever the limit has plenty of room
    (`journal/limits/_shares.py`; here a few times, as the runs start and end), and in line when it has
    not. Never more than six run at once, and no unit is left held once the workers stop."""
    gauge = tmp_path / "gauge"
    env = {**os.environ, "LIMIT_GAUGE": str(gauge)}
    assert journal("limit", "set", "db", "--concurrency", "6", db=db, env=env).returncode == 0
    for n in range(10):
        started = journal("start", "steps", "--input", str(n), "--id", f"r{n}", db=db, env=env)
        assert started.returncode == 0, started.stderr
    workers = [worker(db, env, tmp_path / f"w{i}.log", 4, "many_steps") for i in range(2)]
    try:
        wait_until(lambda: statuses(db, env).count("completed") == 10, "every run to complete", timeout=120)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
            w.wait(timeout=60)
    most, *running = gauge.read_text().split("\n")
    assert 1 <= int(most) <= 6 and running == [], f"{most} steps ran at once under --concurrency 6"
    listed = json.loads(journal("limit", "ls", "--json", db=db, env=env).stdout)
    assert [(v["name"], v["in_use"], v["waiting"]) for v in listed] == [("db", 0, 0)]
