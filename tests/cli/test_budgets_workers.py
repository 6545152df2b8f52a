"""A budget across a killed process (LMDB and PostgreSQL): a `journal worker` SIGKILLed while a
step has reported its usage and not yet ended loses and doubles nothing; the invocation waits on
`budget:SCOPE` once the budget is spent, `journal resolve` lets it finish, and the usage charged
equals the sum of its steps' reports."""

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


@pytest.fixture(params=["lmdb", "postgres"])
def db(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "db")


def journal(*args: str, db: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=120, env=env)


def worker(db: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db,
                                 "--handler", f"budgeted={AGENTS}:budgeted"], stdout=out, stderr=subprocess.STDOUT,
                                env=env)


def show(db: str, env: dict[str, str]) -> dict:
    done = journal("show", "r", "--json", db=db, env=env)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def used(db: str, env: dict[str, str]) -> int:
    [view] = json.loads(journal("budget", "ls", "--json", db=db, env=env).stdout)
    return view["used_tokens"]


def test_a_worker_killed_after_a_step_reported_its_usage_loses_and_doubles_nothing(db, tmp_path):
    log = tmp_path / "reports"
    env = {**os.environ, "BUDGET_LOG": str(log)}
    assert journal("budget", "set", "handler:budgeted", "--tokens", "150", "--per", "run", db=db,
                   env=env).returncode == 0
    started = journal("start", "budgeted", "--input", "5", "--id", "r", db=db, env=env)
    assert started.returncode == 0, started.stderr
    first = worker(db, {**env, "BUDGET_BLOCK": "call-2"}, tmp_path / "w1.log")
    try:
        # call-2 has reported 40 tokens and not ended: killed there, its usage was never charged.
        wait_until(lambda: log.exists() and f"{first.pid} call-2" in log.read_text(), "call-2 to report its usage")
        assert used(db, env) == 80
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = worker(db, env, tmp_path / "w2.log")
        try:
            # 40 a step: after call-3 the run has used 160 of its 150, and call-4 waits to be allowed.
            wait_until(lambda: show(db, env).get("status") == "suspended", "the run to wait on its budget",
                       timeout=120)
            assert show(db, env)["waiting"] == "budget:handler:budgeted"
            assert used(db, env) == 160
            resolved = journal("resolve", "r", "budget:handler:budgeted", '{"tokens": 100}', db=db, env=env)
            assert resolved.returncode == 0, resolved.stderr
            wait_until(lambda: show(db, env).get("status") == "completed", "the run to complete", timeout=120)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    reports = log.read_text().split()
    assert reports[1::2] == ["call-0", "call-1", "call-2", "call-2", "call-3", "call-4"]  # call-2 ran again
    assert show(db, env)["result"] == 200
    assert used(db, env) == 200  # the five journaled steps' reports: the killed attempt's is not counted
    checked = journal("check", db=db, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
