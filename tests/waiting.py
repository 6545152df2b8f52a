"""Waiting for a condition, never for a duration.

A test that sleeps "long enough" for another process or task to get somewhere fails on
a loaded machine, where nothing is long enough, and wastes time on an idle one. These
helpers wait for something a test can observe (a status in the store, a file, a line
on a pipe) and fail with what they waited for once a generous deadline passes. The
deadline only bounds a hang; a passing test never reaches it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import anyio

DEADLINE = 60.0
"""Seconds before a wait gives up: long enough for a machine whose cores are all busy."""

_CHECK_EVERY = 0.005


def wait_until(predicate: Callable[[], object], what: str, *, timeout: float = DEADLINE) -> Any:
    """Block until `predicate()` is true and return its value; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(_CHECK_EVERY)
    return value


def wait_while_alive(proc: subprocess.Popen, predicate: Callable[[], object], what: str, *,
                     timeout: float = DEADLINE) -> None:
    """`wait_until`, failing at once if `proc` exits first: it will never get there then."""

    def reached() -> bool:
        if predicate():
            return True
        if proc.poll() is not None:
            raise AssertionError(f"the process exited with {proc.returncode} before {what}")
        return False

    wait_until(reached, what, timeout=timeout)


async def until(predicate: Callable[[], object], what: str, *, timeout: float = DEADLINE) -> None:
    """`wait_until` for async tests: checks between turns of the event loop."""
    deadline = anyio.current_time() + timeout
    while not predicate():
        if anyio.current_time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await anyio.sleep(_CHECK_EVERY)


async def leases_lapsed(store) -> None:
    """Wait until every lease left in `store` (by a crashed owner, say) has expired.

    A lease held by a live process of this host (the test's own) lapses only at its
    recorded expiry, so the condition is the clock passing the latest of those instants."""
    leases = [store.lease(record.id) for record in store.list()]
    last = max((lease.expires_at for lease in leases if lease is not None), default=0)
    await until(lambda: time.time_ns() // 1000 > last, "the crashed owner's leases to expire")


class Lines:
    """Every line a process writes to one pipe, read on a thread of its own.

    `wait_for` returns as soon as a line containing some text has arrived; `text` returns
    everything once the pipe is closed. Reading on a thread lets a test wait with a
    deadline without blocking on a pipe that may never speak."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, text: str, *, timeout: float = DEADLINE) -> str:
        """The first line containing `text`; fails if the pipe closes or the deadline passes first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self._lines if text in line), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    why = "the pipe closed" if self._closed else f"{timeout:g} s passed"
                    raise AssertionError(f"{why} before a line with {text!r}; got {''.join(self._lines)!r}")
                self._changed.wait(left)

    def text(self, *, timeout: float = DEADLINE) -> str:
        """Everything written, once the writer has closed the pipe."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the pipe stayed open for {timeout:g} s"
        return "".join(self._lines)
