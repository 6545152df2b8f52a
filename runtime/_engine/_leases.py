"""One lease watcher per engine: renews the leases of every execution running in this
process, and passes on the cancel requests made for them from other processes.

A watcher per execution (a task each, waking every `poll_interval` to read its record)
cost 10,000 concurrent invocations ~40,000 store reads a second, more CPU than their
steps. Here one task wakes every `poll_interval` for all of them:

- the leases due for renewal (a third of `lease_ttl` after the last one) are renewed in
  one transaction, each `Renew` succeeding or failing on its own;
- the store's count of cancel requests (`KVStore.cancel_requests_made`, one small read)
  tells whether anyone asked to cancel anything since the last look; only then, and once
  every renewal period for writers that do not count (older releases, other stores), are
  the records of the executions here read, all in one store call (an execution's own
  record is also read at the first look after it started: see `_Watched.looked`).

So renewal deadlines and cancel latency are what they were: a lease is renewed within
`poll_interval` of a third of its time to live, a cancel request is seen within
`poll_interval`. The task runs while there is something to watch and ends with the last
execution; the next one starts it again. It must never raise: it records each failure on
the execution it concerns (`ctx.stop`), which stops at its next context call.

A store that waits for its server while it is away (PostgreSQL, restarting or cut off)
holds a renewal for as long: the store's work runs in a task of its own, one at a time,
and the watcher goes on looking at the clock meanwhile. An execution whose lease runs out
before a renewal came through is stopped with `LeaseLost` (`_expire`): another worker may
have taken the invocation over by now, so this one starts no further side effect; once
the store answers, whichever worker claims the invocation replays what was journaled.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from typing import TYPE_CHECKING, Any

import anyio

from journal import Capability, Committer, Renew, now_us
from journal.errors import LeaseLost

if TYPE_CHECKING:
    from .._handler._invocation import InvocationContext


class _Watched:
    __slots__ = ("ctx", "epoch", "renewed", "looked")

    def __init__(self, ctx: InvocationContext, epoch: int, looked: bool, renewed: float) -> None:
        self.ctx = ctx
        self.epoch = epoch
        # When (`time.monotonic()`) the store began to count the lease's current term: the
        # moment the claim or the last renewal was sent, not when its answer came back.
        self.renewed = renewed
        # Whether the requests this execution must know of are ones it knows, or ones the
        # next change of the count will show. The claim's record shows the requests made
        # before it; one made between the claim and `add` may already be in the count that
        # a look saw meanwhile, so then the first look after `add` reads this record
        # whatever the count (see `Leases.mark`).
        self.looked = looked


class Leases:
    """The executions this engine runs right now, and the task that watches over them."""

    def __init__(self, committer: Committer, lease_ttl: float, poll_interval: float) -> None:
        self.committer = committer
        self.lease_ttl = lease_ttl
        # Woken at least six times per lease: a renewal falls due a third of the way in, and
        # `_expire` stops an execution a poll before its lease ends, so a poll as long as the
        # lease (a short `lease_ttl` beside the default 0.25 s) would stop every execution
        # at its first wake-up, its lease still live.
        self.poll_interval = min(poll_interval, lease_ttl / 6)
        self._live: dict[str, _Watched] = {}
        self._loop: Any = None  # the event loop whose task is watching, if one is
        self._cancels: int | None = None  # the store's cancel request count at the last look
        self._looked = 0.0  # when every record was read last
        self._looks = 0  # looks begun so far
        self._looking = False  # one is reading the store now (a blocking store's reads wait)
        self._working: Any = None  # the loop on which a tick's store work (renewals, cancels) is under way

    def mark(self) -> int | None:
        """Taken before a lease is claimed, given to `add` after: whether a look may have
        counted, in between, a cancel request the claim's record did not show. None if one
        is under way (it may count requests made after the claim)."""
        return None if self._looking else self._looks

    def add(self, ctx: InvocationContext, epoch: int, claimed: int, mark: int | None = None) -> bool:
        """Watch `ctx`'s lease (acquired at `epoch` by a claim sent at `claimed`, µs since the
        epoch, `mark` taken before it) until `remove`. True if its renewal is due already:
        the caller renews it (`renew_now`) before the handler starts.

        The store counts the lease's time to live from the claim, and the claim's answer may
        come back late: a new invocation's lease is claimed with its creation, which waits for
        the disk's flush (0.35 s for the first commit of a fresh store on a loaded machine);
        a claim on a networked store waits on the network, and the journal is read after it.
        Counted from here, the first renewal could fall due after the lease had run out, and
        another worker could take over an invocation whose owner is alive and running it.

        With no look begun since `mark`, any request made after the claim changes the count
        from the one the last look saw, and the next look reads every record: this one's need
        not be read at once (one store read fewer per execution started)."""
        looked = mark is not None and mark == self._looks and not self._looking
        now = time.monotonic()
        # On the wall clock, as the store counts: how long ago the claim was sent (none if the
        # clock went back meanwhile).
        age = max(0.0, (now_us() - claimed) / 1e6)
        self._live[ctx.invocation_id] = _Watched(ctx, epoch, looked, now - age)
        loop = _current_loop()
        if self._loop is not loop:  # none running, or one left behind on a finished loop
            # The count seen last stays: a request made since changes it, and requests made
            # before are in the records the executions here claimed with. Forgetting it cost
            # the first look a read of every record (10,000 of them in W5 of `python -m bench`).
            self._loop = loop
            _spawn(self._run, loop)
        return age >= self.lease_ttl / 3

    async def renew_now(self, ctx: InvocationContext) -> None:
        """Renew `ctx`'s lease at once, as a tick would (a failure stops the execution at its
        next context call): for a lease whose claim came back late (see `add`)."""
        watched = self._live.get(ctx.invocation_id)
        if watched is not None and watched.ctx is ctx:
            await self._renew_these([watched])

    def remove(self, ctx: InvocationContext) -> None:
        watched = self._live.get(ctx.invocation_id)
        if watched is not None and watched.ctx is ctx:
            del self._live[ctx.invocation_id]

    async def _run(self) -> None:
        loop = self._loop
        try:
            while self._live and self._loop is loop:
                await anyio.sleep(self.poll_interval)
                self._expire()
                if self._working is not loop:  # (one left on a loop that closed is no longer under way)
                    self._working = loop
                    _spawn(self._work, loop)
        except BaseException:
            # Cancelled with its event loop, or (never expected) an error: the next
            # execution starts another watcher.
            if self._loop is loop:
                self._loop = None
            raise
        if self._loop is loop:
            self._loop = None

    async def _work(self) -> None:
        try:
            await self._tick()
        finally:
            self._working = None

    async def _tick(self) -> None:
        await self._renew()
        await self._look_for_cancels()

    def _expire(self) -> None:
        """Stop the executions whose lease ran out while no renewal came through (within a
        poll of its end, as the store counts it from before the claim or renewal was sent)."""
        ends = time.monotonic() - self.lease_ttl + self.poll_interval
        for w in [w for w in self._live.values() if w.renewed <= ends]:
            w.ctx.stop(LeaseLost(
                f"invocation {w.ctx.invocation_id!r}: its lease (epoch {w.epoch}) ran out before the store "
                f"answered a renewal ({self.lease_ttl:g} s without one); another process may run it now, so this "
                "one stops before its next side effect, and it runs again, replaying its journal, once the store "
                "answers"))
            self.remove(w.ctx)

    async def _renew(self) -> None:
        now, every = time.monotonic(), self.lease_ttl / 3
        due = [w for w in self._live.values() if now - w.renewed >= every]
        if due:
            await self._renew_these(due)

    async def _renew_these(self, due: list[_Watched]) -> None:
        now = time.monotonic()  # (before the renewal is sent: the store counts from `at`)
        ttl_us, at = int(self.lease_ttl * 1e6), now_us()
        store = self.committer.store
        try:
            ops = [Renew(w.ctx.invocation_id, w.epoch, ttl_us, at) for w in due]
            results = await self.committer.read(functools.partial(store.apply, ops, durable=False))
        except Exception as exc:  # noqa: BLE001 - the whole transaction failed: tried again at the next tick
            for w in due:
                w.ctx.stop(exc)
            return
        for w, result in zip(due, results, strict=True):
            if isinstance(result, LeaseLost):
                w.ctx.stop(result)
                self.remove(w.ctx)
            elif isinstance(result, Exception):
                w.ctx.stop(result)  # tried again at the next tick; the handler stops meanwhile
            elif isinstance(result, BaseException):
                raise result  # not a store's refusal (those are JournalErrors): let it through
            else:
                w.renewed = now

    async def _look_for_cancels(self) -> None:
        self._looks += 1
        self._looking = True
        try:
            await self._look()
        finally:
            self._looking = False

    async def _look(self) -> None:
        store, read = self.committer.store, self.committer.read
        counted = Capability.CANCEL_COUNTER in store.capabilities
        try:
            count = await read(store.cancel_requests_made) if counted else None
            now = time.monotonic()
            every = count is None or count != self._cancels or now - self._looked >= self.lease_ttl / 3
            watched = [w for w in self._live.values() if every or not w.looked]
            if not watched:
                return
            records = await read(_records, store, [w.ctx.invocation_id for w in watched])
        except Exception as exc:  # noqa: BLE001 - the handlers stop at their next context call
            for w in list(self._live.values()):
                w.ctx.stop(exc)
            return
        if every:
            self._cancels, self._looked = count, now
        for w, record in zip(watched, records, strict=True):
            w.looked = True
            if record is not None and record.cancel_requested:
                w.ctx.request_cancel("cancel requested")
                w.ctx.machine.rollback = w.ctx.machine.rollback or record.cancel_rollback


def _records(store: Any, ids: list[str]) -> list[Any]:
    return [store.get(i) for i in ids]


def _current_loop() -> Any:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: anyio's other backend, trio
        import trio

        return trio.lowlevel.current_trio_token()


def _spawn(fn: Any, loop: Any) -> None:
    """Start `fn` as a task of the event loop's own, outside any handler's task group, in a
    context of its own: it is no branch of the handler whose execution happened to start it
    (runtime/_replay/_branches.py counts only tasks spawned in the spawner's context)."""
    if isinstance(loop, asyncio.AbstractEventLoop):
        task = loop.create_task(fn(), context=contextvars.Context())
        _tasks.add(task)  # the loop keeps only a weak reference to its tasks
        task.add_done_callback(_tasks.discard)
    else:
        import trio

        trio.lowlevel.spawn_system_task(fn)


_tasks: set[asyncio.Task[None]] = set()
