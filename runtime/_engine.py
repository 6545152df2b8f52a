"""The Engine: starts, runs, resumes, resolves, cancels and recovers invocations."""

from __future__ import annotations

import os
import uuid as _uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, NamedTuple, TypeVar, overload

import anyio
import anyio.lowlevel

from journal import (
    HOST,
    Acquire,
    Capability,
    Committer,
    Durability,
    InvocationRecord,
    RequestCancel,
    Resolve,
    Started,
    Status,
    Store,
    UnencodableValue,
    default_path,
    digest,
    encode_entry,
    encode_value,
    open_store,
)
from journal.errors import CorruptEntry, InvocationBusy, LeaseLost

from . import _otel
from ._children import Children
from ._clock import now_us
from ._composition import CHILD_PREFIX
from ._execution import prepare
from ._first_of import first_of
from ._handlers import load_handler, load_recorded, prepare_input, register
from ._leases import Leases
from ._outcome import Event, Outcome
from ._park import give_back, give_back_if_taken, park, park_if_unloadable
from ._requests import check_rollback, refuse_child_promise, waiting_for
from ._stream import events
from .errors import HandlerNotFound, TerminalError

T = TypeVar("T")


class Engine:
    """Runs handlers durably against one store.

    Open it with `async with Engine.open(path, durability="sync") as engine:`. One engine
    per store per process is enough; it can run many invocations concurrently.
    """

    def __init__(
        self,
        store: Store,
        *,
        durability: Durability | str = Durability.SYNC,
        lease_ttl: float = 30.0,
        inline_sleep_limit: float = 60.0,
        poll_interval: float = 0.25,
        always_replay: bool = False,
        divergence_wait: float | None = None,
        handlers: dict[str, Callable[..., Any] | str] | None = None,
    ) -> None:
        self.store = store
        # The handlers this engine may run, by name; None: any handler path it can import.
        # A worker given them never imports a path read from the store.
        self.handlers = None if handlers is None else {
            name: load_handler(fn) if isinstance(fn, str) else fn for name, fn in handlers.items()}
        self.durability = Durability(durability)
        self.committer = Committer(store, self.durability)
        self._read = self.committer.read  # store calls: off the loop when the store is blocking
        self.lease_ttl = lease_ttl
        self.inline_sleep_limit = inline_sleep_limit
        self.poll_interval = poll_interval
        # Testing aid: after every live step, unwind and replay the handler from the start.
        self.always_replay = always_replay
        # Accepted for compatibility and ignored: divergence is decided from the journal at
        # once (runtime/_replayer.py), never after a wait.
        self.divergence_wait = divergence_wait
        self.owner = f"{HOST}:{os.getpid()}:{_uuid.uuid4().hex[:8]}"
        self.on_step: Callable[[str, str, str, float, bool], None] | None = None
        # Told (id, reason) when the worker parks an invocation whose handler does not load.
        self.on_park: Callable[[str, str], None] | None = None
        self._active: set[str] = set()  # scheduled by serve() in this process
        self._running: set[str] = set()  # executing in this process right now
        self._leases = Leases(self.committer, lease_ttl, poll_interval)  # renewed by one task for all
        self._children = Children(self.committer, self._running, self._execute)

    @classmethod
    @asynccontextmanager
    async def open(
        cls, path: str | os.PathLike[str] | None = None, *, store: Store | None = None, **options: Any
    ) -> AsyncIterator[Engine]:
        """Open the store at `path` (default `$JOURNAL_DB` or `./.journal`) and an engine on it."""
        own = store is None
        if store is None:
            store = await anyio.to_thread.run_sync(lambda: open_store(path or default_path()))
        try:
            yield cls(store, **options)
        finally:
            if own:
                store.close()

    # -- starting and running ----------------------------------------------------------------

    def handler_for(self, name: str) -> Callable[..., Any]:
        """The handler an invocation records by `name`: one this engine was given, or (without
        `handlers`) the function at that import path, if `load_recorded`'s rule lets it be imported."""
        if self.handlers is None:
            return load_recorded(name)
        try:
            return self.handlers[name]
        except KeyError:
            raise HandlerNotFound(
                f"handler {name!r} was not given to this worker, which runs only "
                f"{', '.join(sorted(self.handlers)) or 'nothing'}; start a worker with --handler {name}=TARGET"
            ) from None

    def register(self, fn: Callable[..., Any]) -> str:
        """Make `fn` loadable by its path without importing (handlers defined in tests, notebooks)."""
        return register(fn)

    async def start(self, handler: Callable[..., Any] | str, input: Any = None, *, id: str | None = None,
                    key: str | None = None, lax_input: bool = False) -> InvocationRecord:
        """Create the invocation (idempotent by id) without running it. Returns its record.

        `handler` is a function, a TARGET path, or a NAME: a name this engine was given in
        `handlers`, or one recorded as is (its input unchecked) for a worker that has it."""
        record, _ = await self._start(handler, input, id=id, key=key, lax_input=lax_input)
        return record

    async def _start(self, handler: Callable[..., Any] | str, input: Any, *, id: str | None, key: str | None,
                     lax_input: bool, lease: bool = False) -> tuple[InvocationRecord, _Fresh | None]:
        """`start`, and what the invocation's journal is if this call created it.

        With `lease`, a local store also leases the invocation it creates to this engine, in
        the same transaction (`_Fresh.record`): it is then marked running here, and the caller
        must go on to execute it (`_execute_once` gives the lease back however that ends)."""
        if isinstance(handler, str) and self.handlers is not None and handler in self.handlers:
            fn, path = self.handlers[handler], handler  # recorded by its name
        elif isinstance(handler, str) and _is_name(handler):
            fn, path = None, handler  # a worker given `--handler NAME=TARGET` runs it and checks its input
        else:
            fn = load_handler(handler) if isinstance(handler, str) else handler
            path = register(fn)
        if fn is None:
            raw = encode_value(input)
        else:
            raw, _ = prepare_input(fn, input, lax=lax_input)
        invocation_id = id if id is not None else _uuid.uuid4().hex
        at = now_us()
        input_digest = digest(bytes(raw))
        record = InvocationRecord(invocation_id, path, Status.PENDING, at, at, key, input_digest)
        trace = _otel.start_context(invocation_id, path) if _otel.enabled() else None
        entry = Started(path, raw, at, key, input_digest, None, trace)
        started = encode_entry(entry, self.store.max_entry_bytes)
        # Leased with its creation only where nothing can fail between the two: the handler
        # is the one `handler_for` gives, and no execution here holds the id.
        if not lease or fn is None or (self.handlers is not None and path not in self.handlers) \
                or invocation_id in self._running:
            record, created = await self.committer.create(record, started)
            return record, (_Fresh(at, entry, None, None) if created else None)
        self._running.add(invocation_id)
        leased, mark = False, self._leases.mark()
        try:
            # Cancelled while the batch commits, the run does not know whether it took the
            # lease: the except clause gives it back if it did (a shield around the wait
            # would cost every run a cancel scope, and let it go on into the handler). A
            # batch it led, or an `async` commit, was no checkpoint: the run stops here too.
            record, created = await self.committer.create(record, started, Acquire(
                invocation_id, self.owner, HOST, os.getpid(), int(self.lease_ttl * 1e6), at))
            await anyio.lowlevel.checkpoint_if_cancelled()
            leased = created and record.status == Status.RUNNING
        except BaseException as exc:
            await give_back_if_taken(self.committer, invocation_id, self.owner, exc)
            raise
        finally:
            if not leased:
                self._running.discard(invocation_id)
        return record, (_Fresh(at, entry, record if leased else None, mark) if created else None)

    @overload
    async def run(self, handler: Callable[..., Awaitable[T]], input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False) -> Outcome[T]: ...
    @overload
    async def run(self, handler: str, input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False) -> Outcome: ...

    async def run(self, handler: Callable[..., Any] | str, input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False) -> Outcome:
        """Start (or attach to) an invocation and run it until it completes, fails, suspends or diverges."""
        record, fresh = await self._start(handler, input, id=id, key=key, lax_input=lax_input, lease=True)
        fn = self.handler_for(record.handler)  # (the same as `_start`'s when it leased the invocation)
        while True:
            try:
                return await self._execute(record.id, fn, fresh)
            except InvocationBusy:
                fresh = None
                record = await self._wait_while_running(record.id)
                if record.status != Status.PENDING and record.status != Status.RUNNING:
                    return Outcome.of(record)
                head = await self._queue_head(record)
                if head is not None:
                    # Its key's turn belongs to another invocation: wait while that one runs;
                    # if it is waiting itself (suspended), this one waits in the queue too.
                    ahead = await self._read(self.store.get, head)
                    if ahead is not None and not ahead.finished and not await self._running_live(head):
                        return Outcome(id=record.id, status=Status.PENDING, waiting=f"turn:{head}")
                await anyio.sleep(0.02)

    async def _queue_head(self, record: InvocationRecord) -> str | None:
        """The invocation ahead of `record` in its key's queue, if one is."""
        if record.key is None:
            return None
        queue = await self._read(self.store.key_queue, record.key)
        return queue[0] if queue and queue[0] != record.id else None

    async def _running_live(self, invocation_id: str) -> bool:
        record = await self._read(self.store.get, invocation_id)
        return (
            record is not None and record.status == Status.RUNNING
            and await self._read(self.store.live_lease, invocation_id, now_us()) is not None
        )

    async def resume(self, invocation_id: str, handler: Callable[..., Any] | str | None = None) -> Outcome:
        """Run an existing invocation again: replay its journal, then continue live.

        `handler` names the code to run instead of the one the record names (which is
        imported only if it passes `load_recorded`'s rule)."""
        fn = load_handler(handler) if isinstance(handler, str) else handler
        return await self._execute(invocation_id, fn)

    async def get(self, invocation_id: str) -> Outcome:
        return Outcome.of(await self._read(self.store.require, invocation_id))

    async def wait(self, invocation_id: str) -> Outcome:
        """Wait until the invocation is finished, suspended or diverged (someone else may run it)."""
        return Outcome.of(await self._wait_while_running(invocation_id, until_settled=True))

    async def _wait_while_running(self, invocation_id: str, until_settled: bool = False) -> InvocationRecord:
        while True:
            record = await self._read(self.store.require, invocation_id)
            busy = record.status == Status.RUNNING and (
                await self._read(self.store.live_lease, invocation_id, now_us()) is not None)
            if until_settled:
                busy = busy or record.status == Status.PENDING
            if not busy:
                return record
            await anyio.sleep(0.02)

    # -- from outside: promises and cancellation ----------------------------------------------

    def waiting_for(self, invocation_id: str) -> InvocationRecord:
        """The invocation whose wait `invocation_id`'s depends on: itself, or the child it awaits
        with `ctx.call` (and that child's own awaited child, and so on), in its latest generation."""
        return waiting_for(self.store, invocation_id)

    async def resolve(self, invocation_id: str, name: str, value: Any = None) -> InvocationRecord:
        """Deliver `value` to promise `name`; a suspended invocation waiting on it becomes pending.

        A `child:` promise (what `ctx.call` waits for) is refused: the child's result settles it."""
        await self._read(refuse_child_promise, self.store, invocation_id, name)
        try:
            raw = bytes(encode_value(value))
        except UnencodableValue as exc:
            raise TerminalError(f"cannot resolve promise {name!r}: {exc}") from None
        return await self.committer.submit(Resolve(invocation_id, name, now_us(), raw), durable=True)

    async def reject(self, invocation_id: str, name: str, message: str) -> InvocationRecord:
        """Reject promise `name`: the handler's `ctx.promise(name)` raises `PromiseRejected`."""
        await self._read(refuse_child_promise, self.store, invocation_id, name)
        return await self.committer.submit(Resolve(invocation_id, name, now_us(), None, message), durable=True)

    async def cancel(self, invocation_id: str, *, run: bool = True, rollback: bool = False) -> Outcome:
        """Ask the invocation to cancel. If nobody runs it, run it here so the handler receives `Cancelled`.

        With `rollback`, the `ctx.state` changes it made to its key are undone when it ends
        `cancelled`, in the same transaction as its `cancelled` entry: the next invocation of
        the key sees the state as it was before this one (compensating steps' changes included)."""
        record = await self._read(self.store.require, invocation_id)
        while record.continued_as is not None:  # the logical run goes on in its latest generation
            record = await self._read(self.store.require, record.continued_as)
        invocation_id = record.id
        if rollback and not record.finished:
            await self._read(check_rollback, self.store, invocation_id)
        if record.waiting is not None and record.waiting.startswith(CHILD_PREFIX):
            # The child it awaits goes first.
            await self.cancel(record.waiting[len(CHILD_PREFIX):], run=run, rollback=rollback)
        record = await self.committer.submit(RequestCancel(invocation_id, now_us(), rollback), durable=True)
        if not run or record.finished:
            return Outcome.of(record)
        try:
            return await self._execute(invocation_id)
        except InvocationBusy:
            record = await self._read(self.store.require, invocation_id)
            if await self._queue_head(record) is not None:
                # Queued behind another invocation of its key: it receives the cancel on its turn.
                return Outcome.of(record)
            return await self.wait(invocation_id)

    # -- streams ------------------------------------------------------------------------

    async def stream(self, invocation_id: str, *, after: int = 0, poll: float = 0.05) -> AsyncIterator[Event]:
        """The events the invocation emits with `ctx.emit`, each once and in seq order, as they are
        journaled (from any process); ends when the invocation (and any continuation) finishes."""
        async for event in events(self._read, self.store, invocation_id, after=after, poll=poll):
            yield event

    # -- recovery and the worker loop -----------------------------------------------------------

    def runnable(self) -> list[str]:
        """Invocations that should run now: pending, running with a dead owner, due timers."""
        now = now_us()
        ids = [r.id for r in self.store.list(Status.PENDING)]
        for record in self.store.list(Status.RUNNING):
            if self.store.live_lease(record.id, now) is None:
                ids.append(record.id)
        ids += self.store.due_timers(now)
        seen: set[str] = set()
        busy = self._active | self._running
        # `seen.add` returns None: the idiom keeps each id's first occurrence, in order.
        ids = [i for i in ids if not (i in seen or seen.add(i)) and i not in busy]  # type: ignore[func-returns-value]
        if self.handlers is not None:  # others are left for a worker that was given their handler
            ids = [i for i in ids if (r := self.store.get(i)) is not None and r.handler in self.handlers]
        return ids

    async def recover(self, *, concurrency: int = 16) -> list[Outcome]:
        """Resume every invocation left pending or orphaned (its owner died or its lease expired)."""
        outcomes: list[Outcome] = []
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(invocation_id: str) -> None:
            async with limiter:
                try:
                    if await self._loadable(invocation_id):
                        outcomes.append(await self._execute(invocation_id))
                except InvocationBusy:
                    pass

        async with anyio.create_task_group() as tg:
            for invocation_id in await self._read(self.runnable):
                tg.start_soon(one, invocation_id)
        return outcomes

    async def serve(self, *, concurrency: int = 16, idle_exit: bool = False) -> None:
        """The worker loop: run whatever becomes runnable until cancelled (or idle, with `idle_exit`).

        Cancelling it (Ctrl-C, SIGTERM) stops cleanly: invocations in flight give their lease
        back and stay pending for the next worker.
        """
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(invocation_id: str) -> None:
            try:
                async with limiter:
                    if await self._loadable(invocation_id):
                        await self._execute(invocation_id)
            except (InvocationBusy, LeaseLost):
                pass
            finally:
                self._active.discard(invocation_id)
                if not self._active:
                    settled.set()

        async with anyio.create_task_group() as tg:
            while True:
                settled = anyio.Event()  # set when no turn is left, even if the last ends during the look
                ids = await self._read(self.runnable)
                for invocation_id in ids:
                    self._active.add(invocation_id)
                    tg.start_soon(one, invocation_id)
                if idle_exit and not ids and not self._active:
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
        timeout = min(1.0, self.lease_ttl / 3)
        if wake is not None:
            timeout = max(0.0, min(timeout, (wake - now_us()) / 1e6))
        await self._read(self.store.wait_for_work, timeout)

    async def _loadable(self, invocation_id: str) -> bool:
        """Whether the invocation's handler loads here; if not, it is parked (`_park.py`)."""
        return await park_if_unloadable(self, invocation_id)

    # -- execution ------------------------------------------------------------------------------

    async def _execute(self, invocation_id: str, fn: Callable[..., Any] | None = None,
                       fresh: _Fresh | None = None) -> Outcome:
        while True:
            outcome = await self._execute_once(invocation_id, fn, fresh)
            fresh = None  # what the journal held before the first execution, not after it
            if outcome.continued_as is not None:  # the logical run goes on in its continuation
                invocation_id = outcome.continued_as
                continue
            # A promise resolved (or a cancel requested) while the handler unwound to wait.
            if outcome.status != Status.PENDING:
                return outcome

    async def _execute_once(self, invocation_id: str, fn: Callable[..., Any] | None,
                            fresh: _Fresh | None = None) -> Outcome:
        leased = fresh.record if fresh is not None else None  # by `_start`, which marked it running here
        if leased is None and (fresh is None or fn is None):
            record = await self._read(self.store.require, invocation_id)
            if record.finished:
                return Outcome.of(record)
            fn = fn or self.handler_for(record.handler)
        assert fn is not None  # `run` gives the handler with the invocation it leased
        # (A fresh invocation that finished meanwhile, run by another process, fails the acquire
        # below with InvocationBusy, after which `run` reports its outcome.)
        if leased is None and invocation_id in self._running:
            # The lease belongs to this engine already: a second execution here would take it
            # from the first one in the middle of a step.
            raise InvocationBusy(f"invocation {invocation_id!r} is already running in this process")
        # Marked before the acquire is awaited: a store call off the loop lets a second
        # execution here reach this point meanwhile.
        self._running.add(invocation_id)
        try:
            if fresh is not None and fresh.record is not None:  # leased by `_start`
                epoch, record, mark = 1, fresh.record, fresh.mark
            else:  # invocations starting together (a worker's batch, a fleet) share one transaction
                mark = self._leases.mark()
                try:  # cancelled meanwhile, it may hold the lease all the same: given back below
                    epoch, record = await self.committer.submit_batched(Acquire(
                        invocation_id, self.owner, HOST, os.getpid(), int(self.lease_ttl * 1e6), now_us()))
                    await anyio.lowlevel.checkpoint_if_cancelled()  # (as in `_start`)
                except BaseException as exc:
                    await give_back_if_taken(self.committer, invocation_id, self.owner, exc)
                    raise
            try:
                # Created by this engine a moment ago and never leased before, its journal is the
                # entry 0 it wrote (an append needs a lease): it is not read back.
                written = fresh.started if fresh is not None and (
                    fresh.record is not None or epoch == 1 and record.created_at == fresh.created_at) else None
                execution, started, tracing = await prepare(self, invocation_id, epoch, record, written, self._children)
            except BaseException as exc:
                # It does not run after all (a damaged journal, a cancellation): not left `running`.
                with anyio.CancelScope(shield=True):
                    if isinstance(exc, CorruptEntry):  # not runnable until repaired: parked with the reason
                        await park(self.committer, invocation_id, epoch, (
                            f"{exc}. It cannot run until its journal is repaired; `journal fork {invocation_id} "
                            "--at SEQ` continues it from before the damage"))
                    else:
                        await give_back(self.committer, invocation_id, epoch)
                raise
            del record, leased, fresh  # not kept for the whole run by this frame (many thousands may be in flight)
            ctx = execution.ctx
            self._leases.add(ctx, epoch, mark)
            try:
                if tracing is None:
                    return await execution.drive(fn, started)
                ctx.wrap_step = tracing.wrap_step
                with tracing:
                    outcome = await execution.drive(fn, started)
                    tracing.finish(outcome.status, await self._read(self.store.get, invocation_id),
                                   ctx.machine.replayer.replayed)
                    return outcome
            finally:
                self._leases.remove(ctx)
        finally:
            self._running.discard(invocation_id)

def _is_name(handler: str) -> bool:
    """A handler name (`summarize`), as opposed to a TARGET (`pkg.mod:fn`, `path/file.py:fn`)."""
    return ":" not in handler and "/" not in handler and os.sep not in handler


class _Fresh(NamedTuple):
    """An invocation `Engine.run` has just created: its creation time, entry 0, and its record
    if this engine holds its lease (epoch 1) since then."""

    created_at: int
    started: Started
    record: InvocationRecord | None
    mark: int | None  # the lease watcher's, taken before the lease (`Leases.mark`)
