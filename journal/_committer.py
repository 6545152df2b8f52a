"""The append path: commits operations for many concurrent invocations, with group commit.

Durability (DESIGN.md, semantics 4):
  sync   each operation is committed, then fsynced before `submit` returns. Operations
         that arrive while an fsync is in flight wait together, are committed in one
         transaction and share the next fsync, so durable throughput grows with
         concurrency.
  async  committed before `submit` returns; the store flushes to disk in the background
         within 100 ms.
  exit   handled by the runtime (it buffers entries); what reaches here is committed as
         `sync`.

The commit itself runs on the caller's thread: an LMDB commit without fsync takes a few
microseconds, less than the cost of handing it to another thread, and the writer lock is
never held across a disk flush. Only the fsync goes to a worker thread, so the event loop
keeps serving other invocations while the disk works.
"""

from __future__ import annotations

import enum
from typing import Any

import anyio
import anyio.to_thread

from ._store import Op, Store


class Durability(str, enum.Enum):
    SYNC = "sync"
    ASYNC = "async"
    EXIT = "exit"

    def __str__(self) -> str:
        return self.value


class _Waiter:
    __slots__ = ("op", "event", "result", "lead")

    def __init__(self, op: Op) -> None:
        self.op = op
        self.event = anyio.Event()
        self.result: Any = None
        self.lead = False


class Committer:
    """Submits store operations from async code; one per store per event loop."""

    def __init__(self, store: Store, durability: Durability | str = Durability.SYNC) -> None:
        self.store = store
        self.durability = Durability(durability)
        self._queue: list[_Waiter] = []
        self._leading = False
        self._limiter = anyio.CapacityLimiter(1)
        if self.durability is Durability.ASYNC and hasattr(store, "start_background_sync"):
            store.start_background_sync(0.1)
        self.batches = 0  # how many transactions+fsyncs the sync path made (for benchmarks)

    async def submit(self, op: Op, *, durable: bool | None = None) -> Any:
        """Commit `op`; return its result or raise its error. Durable per the mode unless `durable` says."""
        if durable is None:
            durable = self.durability is not Durability.ASYNC
        if not durable:
            return _unwrap(self.store.apply([op])[0])
        waiter = _Waiter(op)
        self._queue.append(waiter)
        if self._leading:
            await waiter.event.wait()
            if not waiter.lead:
                return _unwrap(waiter.result)
        await self._lead()
        return _unwrap(waiter.result)

    async def flush(self) -> None:
        """Make everything committed so far durable (no-op for `async`, whose flusher runs anyway)."""
        if self.durability is not Durability.ASYNC:
            await anyio.to_thread.run_sync(self.store.sync, limiter=self._limiter)

    async def _lead(self) -> None:
        self._leading = True
        batch, self._queue = self._queue, []
        try:
            # The batch must finish even if the leader is cancelled: the others wait on it.
            with anyio.CancelScope(shield=True):
                try:
                    results = self.store.apply([w.op for w in batch])
                    await anyio.to_thread.run_sync(self.store.sync, limiter=self._limiter)
                    self.batches += 1
                except Exception as exc:  # a failed commit or fsync fails every op in it
                    results = [exc] * len(batch)
            for waiter, result in zip(batch, results):
                waiter.result = result
                waiter.event.set()
        finally:
            if self._queue:
                nxt = self._queue[0]
                nxt.lead = True
                nxt.event.set()
            else:
                self._leading = False


def _unwrap(result: Any) -> Any:
    if isinstance(result, BaseException):
        raise result
    return result
