"""`journal cancel` on PostgreSQL behaves as on LMDB: it waits for the run in another process
to end cancelled, and never exits 0 while the invocation is still unfinished without saying
what happens to it."""

import json
import subprocess

import pytest

from ..waiting import DEADLINE, wait_until, wait_while_alive
from .conftest import target


@pytest.fixture
def db(postgres_url):
    return postgres_url


def _status(sh, invocation_id: str) -> str:
    return json.loads(sh("show", invocation_id, "--json").stdout)["status"]


def test_cancel_waits_for_the_worker_running_it_elsewhere(sh, log):
    started = sh("start", "sleeper", "--input", json.dumps({"log": log.path}), "--id", "s1")
    assert started.returncode == 0, started.stderr
    worker = sh.popen("worker", "--handler", f"sleeper={target('sleeps_inline')}")
    wait_while_alive(worker, lambda: log.lines() == ["started"], "the worker to start the handler's sleep")
    cancelled = sh("cancel", "s1", timeout=DEADLINE)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == "cancelled s1"
    assert _status(sh, "s1") == "cancelled"  # ended when the command did, not later


def test_cancel_of_a_waiting_invocation_waits_for_a_worker_that_has_its_handler(sh, log, tmp_path):
    assert sh("start", "approver", "--input", json.dumps({"log": log.path}), "--id", "c1").returncode == 0
    handler = ["--handler", f"approver={target('cancellable')}"]
    assert sh("worker", "--until-idle", *handler).returncode == 0
    assert _status(sh, "c1") == "suspended" and log.lines() == ["reserve"]  # waits on promise 'go'
    canceller = subprocess.Popen(sh.argv("cancel", "c1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=tmp_path, env=sh.env)
    try:
        said = canceller.stderr.readline()
        assert "waiting for a worker that has handler 'approver'" in said, said
        assert "journal cancel c1 --handler approver=path/to/file.py:function" in said
        assert canceller.poll() is None and _status(sh, "c1") == "pending"  # it has not given up
        sh.popen("worker", *handler)
        out, err = canceller.communicate(timeout=DEADLINE)
    finally:
        if canceller.poll() is None:
            canceller.kill()
            canceller.communicate()
    assert canceller.returncode == 0, err
    assert out.strip() == "cancelled c1"
    assert _status(sh, "c1") == "cancelled"
    assert log.lines() == ["reserve", "release"]  # its compensating step ran in the worker


def test_cancel_with_the_handler_runs_it_here(sh, log):
    assert sh("start", "approver", "--input", json.dumps({"log": log.path}), "--id", "c2").returncode == 0
    done = sh("cancel", "c2", "--handler", f"approver={target('cancellable')}", timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert _status(sh, "c2") == "cancelled" and log.lines() == []  # cancelled at its first step


def test_cancel_no_wait_says_what_happens_next(sh, log):
    assert sh("start", "approver", "--input", json.dumps({"log": log.path}), "--id", "c3").returncode == 0
    done = sh("cancel", "c3", "--no-wait")
    assert done.returncode == 0
    assert "requested; it is pending" in done.stdout and "its next run receives it" in done.stderr
    wait_until(lambda: _status(sh, "c3") == "pending", "the request to leave it pending")
