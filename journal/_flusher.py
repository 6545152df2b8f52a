"""Runs a committer's fsyncs: on the event loop's thread when that is quicker, otherwise on
a thread of its own that wakes the loop when done.

Handing an fsync to a thread and being woken when it is done costs a round trip: about
100 µs for a no-op on a small VM (`python -m bench.breakdown`), as much as a quick fsync
itself, and a lone invocation making one step after another pays it on every step. So
an fsync that only its own caller waits for (a batch of one), while recent fsyncs took
under a millisecond, runs where the caller is: it holds the loop for no longer than the
round trip would have. A larger batch, or a disk that has been slow lately,
goes to the thread, so the loop keeps working for the other invocations while the disk
flushes.

The thread is fed through a queue and replies through anyio's token for the loop
(`anyio.lowlevel.current_token`, `anyio.from_thread.run_sync(..., token=)`), on asyncio
and trio alike (`anyio.to_thread.run_sync` measured about 40 µs slower). The reply blocks
the thread until the loop has run it, which costs nothing here: the next batch reaches
the thread only after the loop has run that reply. It exits after a second without work
and is started again on demand, so an idle or forgotten committer holds no thread.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

_IDLE_EXIT = 1.0  # seconds without work before the thread exits
# An fsync of a batch of one runs on the loop while recent fsyncs took less than this.
_INLINE_BELOW = 0.001


class Flusher:
    """Runs `fsync` inline or on a thread of its own; `await flusher.run()` waits for one call."""

    def __init__(self, fsync: Callable[[], None]) -> None:
        self._fsync = fsync
        self._queue: queue.SimpleQueue[tuple[list[Any], Callable[[], None], Callable[[], Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Seconds a recent fsync took: a slow one counts in full at once, and quick ones
        # bring it down a tenth of the way each, so a disk must be quick for a while again
        # before the loop waits on it.
        self.recent = 0.0

    def _timed(self) -> None:
        started = time.perf_counter()
        try:
            self._fsync()
        finally:
            took = time.perf_counter() - started
            self.recent = max(took, 0.9 * self.recent + 0.1 * took)

    async def run(self, *, alone: bool = False) -> None:
        """Run one fsync. `alone`: nobody but the caller waits for it, so it may run inline."""
        if alone and self.recent < _INLINE_BELOW:
            self._timed()
            return
        await self.call(self._timed)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the thread and return its result: for a store whose commit waits on the
        network (PostgreSQL), the whole transaction runs here, never on the loop."""
        token = anyio.lowlevel.current_token()
        outcome: list[Any] = []
        done = anyio.Event()
        with self._lock:
            # Under the lock, an idle thread cannot decide to exit between this check and the
            # put. `is_alive` also catches a thread that failed to start, or that a fork left behind.
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._work, name="journal-fsync", daemon=True)
                thread.start()  # may raise (no more threads): nothing is queued then
                self._thread = thread
            self._queue.put((outcome, functools.partial(anyio.from_thread.run_sync, done.set, token=token), fn))
        await done.wait()
        failed, value = outcome
        if failed:
            raise value
        return value

    def _work(self) -> None:
        while True:
            try:
                outcome, reply, fn = self._queue.get(timeout=_IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                continue
            try:
                outcome += [False, fn()]
            except BaseException as exc:  # handed to the waiting task, which raises it
                outcome += [True, exc]
            try:
                reply()
            except RuntimeError:  # the loop closed while the fsync ran (RunFinishedError): nobody is waiting
                pass
