"""Bounds on a hung test run that hold where pytest-timeout's cannot.

pytest-timeout's `thread` method is a Python thread: it cannot run while another thread
holds the GIL in C, and no timer is armed between tests. A run that hangs there waits
for CI's own limit and prints nothing. So:

- each test also arms faulthandler's timer, a C thread that needs no GIL, a second before
  the test's own timeout: it writes every thread's stack to the terminal and ends the
  test process (xdist then reports the test as crashed and replaces its worker). It goes
  first because pytest-timeout's report, written by a test process under xdist, is never
  shown;
- every test process dumps every thread's stack on SIGUSR1, GIL or not;
- the process that reports results watches for progress: when no test has finished for
  `_IDLE` seconds, it prints the process tree, has every test process print its stacks,
  kills them and ends the run with a failure, so a hang costs minutes and says where.
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

import pytest

# Past the longest timeout a test marks (1800 s), so the watch only ends a run that no
# per-test bound could.
_IDLE = float(os.environ.get("JOURNAL_TEST_IDLE", 2400))

_terminal: object = None  # a copy of the terminal's stderr, taken before capturing starts
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
    faulthandler.register(signal.SIGUSR1, file=_terminal, all_threads=True)
    # Not with timeouts turned off (`--timeout 0`: a debugger, a long property run).
    if not hasattr(config, "workerinput") and getattr(config, "_env_timeout", None):
        threading.Thread(target=_watch, name="test-run watchdog", daemon=True).start()


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


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _watch() -> None:
    while True:
        time.sleep(30)
        idle = time.monotonic() - _last_progress
        if idle < _IDLE:
            continue
        out = _terminal
        print(f"\n\nwatchdog: no test has finished for {idle:.0f} s; the processes under this run:", file=out)
        below: list[int] = []
        try:  # (what it can tell; the kill below happens whatever fails here)
            below = _descendants(os.getpid())
            pids = ",".join(str(pid) for pid in [os.getpid(), *below])
            print(subprocess.run(["ps", "-ww", "--forest", "-o", "pid,ppid,stat,wchan:32,etime,args", "-p", pids],
                                 capture_output=True, text=True, timeout=30).stdout, file=out)
        except Exception as exc:  # noqa: BLE001
            print(f"watchdog: cannot list them: {exc!r}", file=out)
        for pid in below:
            try:
                os.kill(pid, signal.SIGUSR1)  # test processes print their stacks; others ignore or die
            except OSError:
                pass
        time.sleep(5)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        print("watchdog: ended the run", file=out, flush=True)
        os._exit(3)
