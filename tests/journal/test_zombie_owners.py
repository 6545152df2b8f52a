"""A process that has died but is not reaped yet (a zombie: its parent has not waited for it)
is dead to the store: `kill(pid, 0)` still finds it, but it runs nothing, so its leases and
its units of limits on this host go at once, as a reaped process's do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from journal import HOST
from journal._records import Lease
from journal.kv._rules import lease_is_live, pid_alive
from journal.limits import Blocked, Granted, LimitRule, Request

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="telling a zombie apart needs /proc")

_HOLD = """
import sys
from journal import open_store
from journal.limits import Request
store = open_store(sys.argv[1])
answer = store.limits().acquire(Request("theirs", ("db",), "them", sys.argv[2], __import__("os").getpid()))
print(type(answer).__name__, flush=True)
sys.stdin.read()
"""


def _zombie(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` and wait until it has died, without reaping it (it stays a zombie)."""
    proc.send_signal(signal.SIGKILL)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


_WAIT = [sys.executable, "-c", "import sys; sys.stdin.read()"]


def test_a_zombie_is_not_alive_and_a_running_process_is():
    with subprocess.Popen(_WAIT, stdin=subprocess.PIPE) as proc:
        assert pid_alive(proc.pid)
        _zombie(proc)
        os.kill(proc.pid, 0)  # (still there for the kernel: what the check used to go by)
        assert not pid_alive(proc.pid)
    assert not pid_alive(proc.pid)  # (reaped)
    assert pid_alive(os.getpid())


def test_the_lease_of_a_zombie_worker_is_not_live():
    far = time.time_ns() // 1000 + 3600 * 10**6
    with subprocess.Popen(_WAIT, stdin=subprocess.PIPE) as proc:
        lease = Lease(1, "worker", HOST, proc.pid, far)
        assert lease_is_live(lease, time.time_ns() // 1000)
        _zombie(proc)
        assert not lease_is_live(lease, time.time_ns() // 1000)


def test_the_unit_a_zombie_held_on_lmdb_goes_to_the_next_asker(tmp_path):
    from journal import open_store

    path = str(tmp_path / "db")
    store = open_store(path)
    table = store.limits()
    table.set("db", LimitRule(concurrency=1))
    try:
        with subprocess.Popen([sys.executable, "-c", _HOLD, path, HOST], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "Granted"
            mine = Request("mine", ("db",), "us", HOST, os.getpid())
            assert isinstance(table.acquire(mine), Blocked)  # held by a live process: in line
            _zombie(proc)
            assert isinstance(table.acquire(mine), Granted)
    finally:
        store.close()
