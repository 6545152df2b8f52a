"""The thread that runs a store's fsyncs for a committer, and wakes the event loop when done.

A round trip through `anyio.to_thread.run_sync` measured about 145 µs for a no-op on a
small VM, about as much as the fsync it hands over. A committer only ever has one fsync
in flight, so one thread of its own, fed through a queue and replying with a single
thread-safe call into the loop, is enough; its round trip measured about 105 µs
(`python -m bench.breakdown`). The thread
exits after a second without work and is started again on demand, so an idle or
forgotten committer holds no thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable

import anyio
import anyio.to_thread

_IDLE_EXIT = 1.0  # seconds without work before the thread exits


class Flusher:
    """Runs `fsync` on a thread of its own; `await flusher.run()` waits for one call."""

    def __init__(self, fsync: Callable[[], None]) -> None:
        self._fsync = fsync
        self._queue: queue.SimpleQueue[tuple[list[BaseException | None], Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    async def run(self) -> None:
        wake = _threadsafe_caller()
        if wake is None:  # an event loop we cannot call into from a thread: the portable path
            await anyio.to_thread.run_sync(self._fsync)
            return
        outcome: list[BaseException | None] = []
        done = anyio.Event()
        with self._lock:
            # Under the lock, an idle thread cannot decide to exit between this check and the
            # put. `is_alive` also catches a thread that failed to start, or that a fork left behind.
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._work, name="journal-fsync", daemon=True)
                thread.start()  # may raise (no more threads): nothing is queued then
                self._thread = thread
            self._queue.put((outcome, lambda: wake(done.set)))
        await done.wait()
        if outcome[0] is not None:
            raise outcome[0]

    def _work(self) -> None:
        while True:
            try:
                outcome, reply = self._queue.get(timeout=_IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                continue
            try:
                self._fsync()
                outcome.append(None)
            except BaseException as exc:  # handed to the waiting task, which raises it
                outcome.append(exc)
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
