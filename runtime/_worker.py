"""The worker loop: find what is runnable, run it under a concurrency limit, wait for more.

`Engine.serve` (`journal worker`, `journal serve`) and `Engine.recover` are this. Runnable
means pending, running with a dead owner (its lease no longer protects a live process), or
suspended on a timer that is due; a worker given `handlers` takes only invocations it has
the handler for, and leaves the others for a worker that has theirs.
"""

from __future__ import annotations

from typing import Any

import anyio

from journal import Capability, Status
from journal.errors import InvocationBusy, LeaseLost

from ._clock import now_us
from ._executor import Executor
from ._first_of import first_of
from ._outcome import Outcome


class Worker:
    """Runs the runnable invocations of one engine's store."""

    def __init__(self, executor: Executor, handlers: dict[str, Any] | None, poll_interval: float) -> None:
        self.executor = executor
        self.store = executor.store
        self._read = executor.committer.read
        self.handlers = handlers
        self.poll_interval = poll_interval
        self.active: set[str] = set()  # scheduled by `serve` in this process

    def runnable(self) -> list[str]:
        """Invocations that should run now: pending, running with a dead owner, due timers."""
        now = now_us()
        store = self.store
        ids = [r.id for r in store.list(Status.PENDING)]
        for record in store.list(Status.RUNNING):
            if store.live_lease(record.id, now) is None:
                ids.append(record.id)
        ids += store.due_timers(now)
        seen: set[str] = set()
        busy = self.active | self.executor.running
        # `seen.add` returns None: the idiom keeps each id's first occurrence, in order.
        ids = [i for i in ids if not (i in seen or seen.add(i)) and i not in busy]  # type: ignore[func-returns-value]
        if self.handlers is not None:  # others are left for a worker that was given their handler
            ids = [i for i in ids if (r := store.get(i)) is not None and r.handler in self.handlers]
        return ids

    async def recover(self, *, concurrency: int = 16) -> list[Outcome]:
        """Run once every invocation left pending or orphaned (its owner died or its lease expired)."""
        outcomes: list[Outcome] = []
        limiter = anyio.CapacityLimiter(concurrency)
        executor = self.executor

        async def one(invocation_id: str) -> None:
            async with limiter:
                try:
                    if await executor.loadable(invocation_id):
                        outcomes.append(await executor.execute(invocation_id))
                except InvocationBusy:
                    pass

        async with anyio.create_task_group() as tg:
            for invocation_id in await self._read(self.runnable):
                tg.start_soon(one, invocation_id)
        return outcomes

    async def serve(self, *, concurrency: int = 16, idle_exit: bool = False) -> None:
        """Run whatever becomes runnable until cancelled (or idle, with `idle_exit`)."""
        limiter = anyio.CapacityLimiter(concurrency)
        executor = self.executor

        async def one(invocation_id: str) -> None:
            try:
                async with limiter:
                    if await executor.loadable(invocation_id):
                        await executor.execute(invocation_id)
            except (InvocationBusy, LeaseLost):
                pass
            finally:
                self.active.discard(invocation_id)
                if not self.active:
                    settled.set()

        async with anyio.create_task_group() as tg:
            while True:
                settled = anyio.Event()  # set when no turn is left, even if the last ends during the look
                ids = await self._read(self.runnable)
                for invocation_id in ids:
                    self.active.add(invocation_id)
                    tg.start_soon(one, invocation_id)
                if idle_exit and not ids and not self.active:
                    return
                # idle_exit: the last turn to end decides at once (no wait for new work to time out)
                await (first_of(self._idle, settled.wait) if idle_exit else self._idle())

    async def _idle(self) -> None:
        """Wait for work: a store that can (PostgreSQL, with a NOTIFY) wakes us when something
        becomes runnable, or when its next timer falls due; any other store is polled."""
        if Capability.WAKE_ON_WORK not in self.store.capabilities:
            await anyio.sleep(self.poll_interval)
            return
        wake = await self._read(self.store.next_wake)
        # A worker that dies sends no NOTIFY: its session's end (or its lease's expiry) is seen
        # by looking again, once a second, a few cheap queries when nothing else wakes us.
        timeout = min(1.0, self.executor.settings.lease_ttl / 3)
        if wake is not None:
            timeout = max(0.0, min(timeout, (wake - now_us()) / 1e6))
        await self._read(self.store.wait_for_work, timeout)
