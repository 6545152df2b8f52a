"""Bounds on a hung test run that hold where pytest-timeout's cannot.

pytest-timeout's `thread` method is a Python thread: it cannot run while another thread
holds the GIL in C, and no timer is armed between tests. A run that hangs there waits
for CI's own limit and prints nothing. So:

- each test also arms faulthandler's timer, a C thread that needs no GIL, a second before
  the test's own timeout: it writes every thread's stack to the terminal and ends the
  test process (xdist then reports the test as crashed and replaces its worker). It goes
  first because pytest-timeout's report, written by a test process under xdist, is never
  shown;
- the process that reports results watches for progress: when no test has finished for
  `_IDLE` seconds, it prints the process tree and its own stacks, has every test process
  print its stacks as it ends (SIGABRT, which faulthandler reports, GIL or not), kills
  what is left and ends the run with a failure, so a hang costs minutes and says where.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.pgserver import pid_running

from .waiting import wait_until

# Past the longest timeout a test marks (1800 s), so the watch only ends a run that no
# per-test bound could.
_IDLE = float(os.environ.get("JOURNAL_TEST_IDLE", 2400))

_terminal: Any = None  # a copy of the terminal's stderr, taken before capturing starts
_last_progress = time.monotonic()


def _test_timeout(item: pytest.Item) -> float:
    """The item's timeout as pytest-timeout reckons it (marker, command line, environment, ini)."""
    try:
        import pytest_timeout

        return float(pytest_timeout._get_item_settings(item).timeout or 0)
    except (ImportError, AttributeError):  # (a pytest-timeout without that helper: its marker or ini)
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args:
            return float(marker.args[0])
        return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(trylast=True)  # after pytest-timeout's, which reads the timeout set for the run
def pytest_configure(config: pytest.Config) -> None:
    global _terminal
    _terminal = os.fdopen(os.dup(sys.__stderr__.fileno()), "w", buffering=1)
    faulthandler.enable(file=_terminal, all_threads=True)  # (a fatal signal prints the stacks here)
    # Not with timeouts turned off (`--timeout 0`: a debugger, a long property run).
    if not hasattr(config, "workerinput") and getattr(config, "_env_timeout", None):
        workers = bool(getattr(config.option, "numprocesses", None))  # (xdist: the children are test processes)
        threading.Thread(target=_watch, args=(workers,), name="test-run watchdog", daemon=True).start()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.disable()
    if _terminal is not None:
        _terminal.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    seconds = _test_timeout(item)
    if seconds > 0:
        faulthandler.dump_traceback_later(max(seconds - 1, seconds * 0.9), exit=True, file=_terminal)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _last_progress
    _last_progress = time.monotonic()


def _children() -> dict[int, list[int]]:
    """Every process's children, by its pid."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def _watch(xdist: bool) -> None:
    while (idle := time.monotonic() - _last_progress) < _IDLE:
        time.sleep(_IDLE - idle)  # (a timer: until the run would count as hung, unless a test ends)
    out = _terminal
    print(f"\n\nwatchdog: no test has finished for {idle:.0f} s; the processes under this run:", file=out)
    workers: list[int] = []
    below: list[int] = []
    try:  # (what it can tell; the kill below happens whatever fails here)
        children = _children()
        workers = children.get(os.getpid(), []) if xdist else []
        below = _below(children, os.getpid())
        pids = ",".join(str(pid) for pid in [os.getpid(), *below])
        print(subprocess.run(["ps", "-ww", "--forest", "-o", "pid,ppid,stat,wchan:32,etime,args", "-p", pids],
                             capture_output=True, text=True, timeout=30).stdout, file=out)
    except Exception as exc:  # noqa: BLE001
        print(f"watchdog: cannot list them: {exc!r}", file=out)
    faulthandler.dump_traceback(file=out, all_threads=True)  # this process's own (with `-n 0`, the tests')
    for pid in workers:  # xdist's test processes: each prints its stacks and ends
        _signal(pid, signal.SIGABRT)
    try:
        wait_until(lambda: not any(pid_running(pid) for pid in workers), "the test processes to end", timeout=30)
    except AssertionError:
        pass
    for pid in below:
        _signal(pid, signal.SIGKILL)
    print("watchdog: ended the run", file=out, flush=True)
    os._exit(3)


def _below(children: dict[int, list[int]], pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass
