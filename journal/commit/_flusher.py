"""Runs a committer's fsyncs: on the event loop's thread when that is quicker, otherwise on
a thread of its own that wakes the loop when done.

Handing an fsync to a thread and being woken when it is done costs a round trip: about
100 µs for a no-op on a small VM (`python -m bench.breakdown`), as much as a quick fsync
itself, and a lone invocation making one step after another pays it on every step. So
an fsync that nothing else on the loop could work beside (a batch of one, or a batch that
every runnable task has joined: an agent's parallel tool calls), while recent fsyncs took
under a millisecond, runs where the caller is: the loop would only have slept through
it, and what comes in meanwhile (a socket, a timer, a step thread's result) waits for the fsync,
which lately took under that millisecond (the first slow one still holds the loop). A batch
while other tasks are ready, or a disk that has been slow lately, goes to the thread, so
the loop keeps working for the other invocations while the disk flushes.

The thread is fed through a queue and replies with one thread-safe call into the loop
(`anyio.to_thread.run_sync` measured about 40 µs slower). anyio's own way back into a
loop from a thread measured slower too, on W1 `sync` with every fsync handed to the
thread (500 steps, median of five, three alternations): 186.6 / 189.7 / 186.0 µs a step
with `call_soon_threadsafe` (or trio's token), 213.4 / 234.5 / 233.5 with
`anyio.from_thread.run_sync(..., token=anyio.lowlevel.current_token())`, which holds the
thread until the loop has run the reply, and 205.4 / 194.3 / 202.2 with the token's
non-blocking `backend_class.run_sync_soon` (anyio 4.16), which copies a context for each
reply. It exits after a second without work and is started again on demand, so an idle
or forgotten committer holds no thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

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

    @property
    def inline(self) -> bool:
        """Whether `run(alone=True)` runs the fsync on the caller's thread, without waiting."""
        return self.recent < _INLINE_BELOW

    async def run(self, *, alone: bool = False, deferred: list[BaseException] | None = None) -> None:
        """Run one fsync. `alone`: nothing else on the loop could run meanwhile, so it may run inline."""
        if alone and self.inline:
            self._timed()
            return
        await self.call(self._timed, deferred)

    async def call(self, fn: Callable[[], Any], deferred: list[BaseException] | None = None) -> Any:
        """Run `fn` on the thread and return its result: for a store whose commit waits on the
        network (PostgreSQL), the whole transaction runs here, never on the loop. With
        `deferred`, a native asyncio cancellation meanwhile is kept there, for the caller
        to raise, and the wait goes on: the thread's work runs to its end anyway."""
        wake = _threadsafe_caller()
        if wake is None:  # an event loop we cannot call into from a thread: the portable path
            return await anyio.to_thread.run_sync(fn)
        outcome: list[Any] = []
        done = anyio.Event()
        with self._lock:
            # Under the lock, an idle thread cannot decide to exit between this check and the
            # put. `is_alive` also catches a thread that failed to start, or that a fork left behind.
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._work, name="journal-fsync", daemon=True)
                thread.start()  # may raise (no more threads): nothing is queued then
                self._thread = thread
            self._queue.put((outcome, lambda: wake(done.set), fn))
        if deferred is None:
            await done.wait()
        else:
            await deferring(done.wait, deferred)
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
            except RuntimeError:  # the loop closed while the fsync ran: nobody is waiting
                pass


def _threadsafe_caller() -> Callable[[Callable[[], Any]], Any] | None:
    """A function that schedules a callback on the running event loop from any thread."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio
        pass
    try:
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    except (ImportError, RuntimeError):
        return None


async def deferring(wait: Callable[[], Awaitable[Any]], deferred: list[BaseException]) -> None:
    """`await wait()`, and again after a native asyncio cancellation, which is kept in
    `deferred` for the caller to raise once its work is done. (Inside an anyio shield
    nothing else cancels: anyio does not cancel a shielded task, and trio's only
    cancellation is anyio's.)"""
    while True:
        try:
            await wait()
            return
        except asyncio.CancelledError as exc:
            deferred.append(exc)
