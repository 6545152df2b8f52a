"""The Engine: starts, runs, resumes, resolves, cancels and recovers invocations."""

from __future__ import annotations

import datetime
import os
import time
import uuid as _uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

import anyio
import anyio.lowlevel
import msgspec

from journal import (
    HOST,
    Committer,
    Create,
    Durability,
    InvocationRecord,
    Renew,
    RequestCancel,
    Resolve,
    SetStatus,
    Started,
    Status,
    Store,
    Transition,
    UnencodableValue,
    default_path,
    digest,
    encode_entry,
    encode_value,
    now_us,
    open_store,
    trim_due,
)
from journal.batches import Batch
from journal.errors import InvocationBusy, JournalError

from .._flow import _start_options
from .._flow._limits._budget import Budgets
from .._flow._limits._limiter import Limiter
from .._handler._composition import CHILD_PREFIX
from .._handler._handlers import is_handler_name, load_handler, load_recorded, prepare_input, register
from .._handler._step_threads import DEFAULT_LIMIT as DEFAULT_STEP_THREADS
from .._handler._step_threads import StepThreads
from .._messaging import _asking
from .._messaging._requests import check_rollback, refuse_child_promise, refuse_unknown_promise, waiting_for
from ..errors import HandlerNotFound, TerminalError
from ..hooks import Observer, Observers, default_observers
from . import _actions, _batches, _fork_check
from ._executor import Executor, Fresh, Settings
from ._outcome import Event, Outcome
from ._stream import events
from ._worker import DISK_FULL_WAIT, Worker

if TYPE_CHECKING:
    from journal import Chunk

    from .._flow._limits._admin import Limits
    from .._flow._schedules import Schedules


class _StartOptions(NamedTuple):
    priority: int = 0
    tags: Mapping[str, str] | None = None
    limit: str | Sequence[str] | None = None
    delay: float | None = None
    start_at: datetime.datetime | None = None
    debounce: float | None = None
    debounce_max: float | None = None
    if_busy: str = "enqueue"


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
        handlers: dict[str, Callable[..., Any] | str] | None = None,
        observers: list[Observer] | None = None,
        step_threads: int = DEFAULT_STEP_THREADS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        # Seconds since the epoch, as schedules read the time (a test gives a clock it sets).
        self.clock: Callable[[], float] = clock if clock is not None else time.time
        self._schedules: Schedules | None = None
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
        self.owner = f"{HOST}:{os.getpid()}:{_uuid.uuid4().hex[:8]}"
        # Told of attempts, steps and parked invocations (runtime.hooks); OpenTelemetry's by default.
        self.observers = Observers(default_observers() if observers is None else observers)
        self._limiter = Limiter(store, self.owner)  # opens the store's limits on first use only
        self._budgets = Budgets(store)
        self._executor = Executor(Settings(
            committer=self.committer, owner=self.owner, lease_ttl=lease_ttl, inline_sleep_limit=inline_sleep_limit,
            always_replay=always_replay, handler_for=self.handler_for, observers=self.observers,
            poll_interval=poll_interval, threads=StepThreads(step_threads), limiter=self._limiter,
            budgets=self._budgets))
        self._running = self._executor.running  # executing in this process right now
        self._worker = Worker(self._executor, self.handlers, poll_interval)

    @property
    def limits(self) -> Limits:
        """The store's limits, which every process sharing the store obeys (`runtime/_flow/_limits/`):
        `await engine.limits.set("openai", concurrency=4, rate="500/m", tokens="200000/m")`,
        `await engine.limits.ls()`, `await engine.limits.remove("openai")`."""
        from .._flow._limits._admin import Limits

        return Limits(self._limiter)

    @property
    def budgets(self) -> Budgets:
        """The store's budgets, charged with what steps report (`current_step().used(...)`):
        `await engine.budgets.set("handler:agent", tokens=10_000, per="run")`, `.ls()`,
        `.remove(scope)`. A spent budget suspends the invocation on the promise `budget:SCOPE`."""
        return self._budgets

    @property
    def schedules(self) -> Schedules:
        """The store's schedules: add, list, pause, resume, trigger, backfill (`runtime/_flow/_schedules/`)."""
        if self._schedules is None:
            from .._flow._schedules import Schedules

            self._schedules = Schedules(self.store, self.committer, self.clock)
        return self._schedules

    def observe(self, observer: Observer) -> None:
        """Tell `observer` what happens to the invocations this engine runs from now on (runtime.hooks)."""
        self.observers.add(observer)

    @classmethod
    @asynccontextmanager
    async def open(
        cls, path: str | os.PathLike[str] | None = None, *, store: Store | None = None, **options: Any
    ) -> AsyncIterator[Engine]:
        """Open the store at `path` (default `$JOURNAL_DB` or `./.journal`) and an engine on it."""
        own = store is None
        if store is None:
            store = await anyio.to_thread.run_sync(lambda: open_store(path or default_path()))
        engine = None
        try:
            engine = cls(store, **options)
            yield engine
        finally:
            if engine is not None:
                await engine._limiter.settle()
            if own:
                store.close()

    # -- starting and running ----------------------------------------------------------------

    def handler_for(self, name: str) -> Callable[..., Any]:
        """The handler an invocation records by `name`: one this engine was given, or (without
        `handlers`) the function at that import path, if `load_recorded`'s rule lets it be imported."""
        if self.handlers is None:
            if is_handler_name(name):
                raise HandlerNotFound(
                    f"handler {name!r} is a name, not code to import: the process that runs it must be "
                    f"given its code, with --handler {name}=path/to/file.py:function (or package.module:function)")
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
                    key: str | None = None, lax_input: bool = False, priority: int = 0,
                    tags: Mapping[str, str] | None = None, limit: str | Sequence[str] | None = None,
                    delay: float | None = None, start_at: datetime.datetime | None = None,
                    debounce: float | None = None, debounce_max: float | None = None,
                    if_busy: str = "enqueue") -> InvocationRecord:
        """Create the invocation (idempotent by id) without running it. Returns its record.

        `handler` is a function, a TARGET path, or a NAME: a name this engine was given in
        `handlers`, or one recorded as is (its input unchecked) for a worker that has it.
        Workers claim runnable invocations highest `priority` first, then oldest; with
        `delay` (seconds) or `start_at` (an aware datetime) it stays pending, waiting on a
        timer, until then. `tags` (`{"customer": "acme"}`) are what `journal ls --tag
        customer=acme` finds it by. `limit` names limits it holds a unit of
        while it runs: a worker claims it only when one is free, in the same order.

        With `debounce` (seconds) and a `key`: while a debounced start of this handler and key
        has not begun, this one replaces its input and moves its start to `debounce` from
        now (never past `debounce_max` after the first start): one invocation runs, with the
        last input, and every caller gets its record.

        `if_busy`, with a `key` whose thread has an unfinished turn (running, suspended or
        queued): "enqueue" waits behind it; "reject" raises `KeyBusy`; "interrupt" asks every
        unfinished turn to cancel (their compensation runs) and queues this one next;
        "rollback" does the same and restores the key's state to before them. Decided in the
        transaction that creates it: two starts at once never both win."""
        options = _StartOptions(priority, tags, limit, delay, start_at, debounce, debounce_max, if_busy)
        record, _ = await self._start(handler, input, id=id, key=key, lax_input=lax_input, options=options)
        return record

    async def _start(self, handler: Callable[..., Any] | str, input: Any, *, id: str | None, key: str | None,
                     lax_input: bool, lease: bool = False,
                     options: _StartOptions | None = None) -> tuple[InvocationRecord, Fresh | None]:
        """`start`, and what the invocation's journal is if this call created it.

        With `lease`, a local store also leases the invocation it creates to this engine, in
        the same transaction (`Fresh.record`): it is then marked running here, and the caller
        must go on to execute it (`Executor.execute` gives the lease back however that ends)."""
        if isinstance(handler, str) and self.handlers is not None and handler in self.handlers:
            fn, path = self.handlers[handler], handler  # recorded by its name
        elif isinstance(handler, str) and is_handler_name(handler):
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
        if options is not None:
            _start_options.apply(record, priority=options.priority, tags=options.tags, limit=options.limit,
                                 delay=options.delay, start_at=options.start_at)
            lease = lease and record.start_at is None  # a delayed start is run when its time comes
        trace = self.observers.trace_context(invocation_id, path)
        entry = Started(path, raw, at, key, input_digest, None, trace)
        started = encode_entry(entry, self.store.max_entry_bytes)
        if options is not None and options.debounce is not None:
            wait_us, max_us = _start_options.debounce_times(options.debounce, options.debounce_max, key, id,
                                                            record.start_at)
            record, created = await self._read(self.store.debounce, record, started, wait_us, max_us)
            await self.committer.flush()
            return record, None
        if options is not None and options.if_busy != "enqueue":
            _start_options.check_if_busy(options.if_busy, key)
            record, created = await self._read(self.store.apply_one, Create(record, started, None, options.if_busy))
            await self.committer.flush()
            return record, (Fresh(at, entry, None, None) if created else None)
        # Leased with its creation only where nothing can fail between the two: the handler
        # is the one `handler_for` gives, and no execution here holds the id.
        if not lease or fn is None or (self.handlers is not None and path not in self.handlers) \
                or invocation_id in self._running:
            record, created = await self.committer.create(record, started)
            if created:
                self.observers.created(record)
            return record, (Fresh(at, entry, None, None) if created else None)
        self._running.add(invocation_id)
        leased, mark = False, self._executor.leases.mark()
        try:
            # Cancelled while the batch commits, the run does not know whether it took the
            # lease: the except clause gives it back if it did (a shield around the wait
            # would cost every run a cancel scope, and let it go on into the handler). A
            # batch it led, or an `async` commit, was no checkpoint: the run stops here too.
            record, created = await self.committer.create(record, started, self._executor.acquire_op(invocation_id, at))
            await anyio.lowlevel.checkpoint_if_cancelled()
            leased = created and record.status == Status.RUNNING
            if created:
                self.observers.created(record)
        except BaseException as exc:
            await self._executor.give_back_if_taken(invocation_id, exc)
            raise
        finally:
            if not leased:
                self._running.discard(invocation_id)
        return record, (Fresh(at, entry, record if leased else None, mark) if created else None)

    @overload
    async def run(self, handler: Callable[..., Awaitable[T]], input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False,
                  started: Callable[[InvocationRecord], None] | None = None,
                  queued: Callable[[InvocationRecord], None] | None = None, priority: int = 0,
                  tags: Mapping[str, str] | None = None, limit: str | Sequence[str] | None = None,
                  delay: float | None = None, start_at: datetime.datetime | None = None,
                  debounce: float | None = None, debounce_max: float | None = None, if_busy: str = "enqueue") -> Outcome[T]: ...
    @overload
    async def run(self, handler: str, input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False,
                  started: Callable[[InvocationRecord], None] | None = None,
                  queued: Callable[[InvocationRecord], None] | None = None, priority: int = 0,
                  tags: Mapping[str, str] | None = None, limit: str | Sequence[str] | None = None,
                  delay: float | None = None, start_at: datetime.datetime | None = None,
                  debounce: float | None = None, debounce_max: float | None = None, if_busy: str = "enqueue") -> Outcome: ...

    async def run(self, handler: Callable[..., Any] | str, input: Any = None, *, id: str | None = None,
                  key: str | None = None, lax_input: bool = False,
                  started: Callable[[InvocationRecord], None] | None = None,
                  queued: Callable[[InvocationRecord], None] | None = None, priority: int = 0,
                  tags: Mapping[str, str] | None = None, limit: str | Sequence[str] | None = None,
                  delay: float | None = None, start_at: datetime.datetime | None = None,
                  debounce: float | None = None, debounce_max: float | None = None, if_busy: str = "enqueue") -> Outcome:
        """Start (or attach to) an invocation and run it until it completes, fails, suspends or diverges.

        With a `key`, invocations of the key run one at a time, in creation order: this one
        waits for its turn while an earlier one is being run (by any process) or waits for
        its own turn in the process that started it; `queued` is told that earlier one, once.
        If the earlier one is not in anyone's hands (suspended, diverged, pending with nobody
        to run it), waiting would never end: the outcome is this one `pending`, waiting on
        `turn:ID`. `started` is told the record once the invocation exists (created or found).
        The start options are `start`'s; a delayed one is run here once its time comes.
        """
        options = _StartOptions(priority, tags, limit, delay, start_at, debounce, debounce_max, if_busy)
        record, fresh = await self._start(handler, input, id=id, key=key, lax_input=lax_input, lease=True,
                                          options=options)
        if started is not None:
            started(record)
        # A delayed start runs once its time comes (a later debounced start may move it).
        while record.status == Status.PENDING and record.wake_at is not None and record.wake_at > now_us():
            await anyio.sleep((record.wake_at - now_us()) / 1e6)
            record = await self._read(self.store.require, record.id)
        fn = self.handler_for(record.handler)  # (the same as `_start`'s when it leased the invocation)
        return await self._run_in_turn(record, fn, fresh, queued)

    async def resume(self, invocation_id: str, handler: Callable[..., Any] | str | None = None, *,
                     wait_turn: bool = False, queued: Callable[[InvocationRecord], None] | None = None) -> Outcome:
        """Run an existing invocation again: replay its journal, then continue live.

        `handler` names the code to run instead of the one the record names (which is
        imported only if it passes `load_recorded`'s rule). One queued behind another of its
        key raises `InvocationBusy`, or with `wait_turn` waits for its turn as `run` does."""
        fn = load_handler(handler) if isinstance(handler, str) else handler
        if not wait_turn:
            return await self._execute(invocation_id, fn)
        record = await self._read(self.store.require, invocation_id)
        if record.key is None or record.finished:
            return await self._execute(invocation_id, fn)
        return await self._run_in_turn(record, fn, None, queued)

    async def _run_in_turn(self, record: InvocationRecord, fn: Callable[..., Any] | None, fresh: Fresh | None,
                           queued: Callable[[InvocationRecord], None] | None) -> Outcome:
        """Execute `record`'s invocation; while earlier ones of its key run, hold its place
        (a waiter's lease, so no worker takes its turn from this process) and wait."""
        held: int | None = None  # the epoch of the waiter's lease this engine holds on it
        renewed = 0.0
        announced = False
        try:
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
                        if held is None:
                            held = await self._hold_place(record.id)
                            renewed = anyio.current_time()
                        ahead = await self._read(self.store.get, head)
                        if ahead is not None and not ahead.finished:
                            if not await self._in_hand(ahead):
                                return Outcome(id=record.id, status=Status.PENDING, waiting=f"turn:{head}")
                            if queued is not None and not announced:
                                queued(ahead)
                                announced = True
                        if held and anyio.current_time() - renewed >= self.lease_ttl / 3:
                            await self.committer.submit(Renew(record.id, held, int(self.lease_ttl * 1e6), now_us()),
                                                        durable=False)
                            renewed = anyio.current_time()
                    await anyio.sleep(0.02)
        finally:
            if held:  # gives back the waiter's lease; once the turn was taken its epoch is stale: nothing happens
                with anyio.CancelScope(shield=True):
                    try:
                        await self.committer.submit(SetStatus(record.id, Transition(
                            Status.PENDING, now_us(), release=True), held), durable=True)
                    except JournalError:
                        pass

    async def _hold_place(self, invocation_id: str) -> int:
        """Take the waiter's lease of a queued invocation (`Acquire.wait_turn`): its epoch, or
        0 if its turn came meanwhile (nothing is held then)."""
        try:
            op = msgspec.structs.replace(self._executor.acquire_op(invocation_id, now_us()), wait_turn=True)
            epoch: int
            epoch, _ = await self.committer.submit(op, durable=False)
        except InvocationBusy:  # another process holds it: it waits there, this one watches
            return 0
        return epoch

    async def _queue_head(self, record: InvocationRecord) -> str | None:
        """The invocation ahead of `record` in its key's queue, if one is."""
        if record.key is None:
            return None
        queue = await self._read(self.store.key_queue, record.key)
        return queue[0] if queue and queue[0] != record.id else None

    async def _in_hand(self, record: InvocationRecord) -> bool:
        """Whether a live process has the invocation: running it, or (pending) waiting for its turn."""
        return record.status in (Status.RUNNING, Status.PENDING) and (
            await self._read(self.store.live_lease, record.id, now_us()) is not None)

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
            if record.status == Status.RUNNING and not busy:
                # The owner may have finished and let go between the two reads: only a record
                # that still says running once its lease is gone is one nobody runs.
                again = await self._read(self.store.require, invocation_id)
                if again.status != record.status or again.updated_at != record.updated_at:
                    continue
            if until_settled:
                busy = busy or record.status == Status.PENDING
            if not busy:
                return record
            await anyio.sleep(0.02)

    # -- from outside: messages, requests, published values (runtime/_messaging/_asking.py) -------------

    async def send_message(self, invocation_id: str, topic: str, value: Any = None, *,
                           message_id: str | None = None) -> str:
        """Put `value` in the invocation's inbox on `topic` (its handler's `ctx.receive(topic)`
        gets it, in arrival order); returns the message id (`message_id`, or one made for it).
        The same `message_id` sent twice is delivered once. Refused with `MessageRefused` once
        the invocation is finished, and with `MessageValueRefused` for a value that does not
        fit the type the handler receives the topic with."""
        return await self._send(invocation_id, topic, value, message_id, wants_reply=False)

    async def _send(self, invocation_id: str, topic: str, value: Any, message_id: str | None,
                    *, wants_reply: bool) -> str:
        op = _asking.send_op(invocation_id, topic, value, message_id, wants_reply)
        record = await self.committer.submit(op, durable=True)
        if record is not None and record.status == Status.PENDING:
            self._worker.nudge()  # a worker of this process looks at once instead of at its next poll
        return op.message_id

    async def request(self, invocation_id: str, topic: str, value: Any = None, *, wait: float | None = None,
                      message_id: str | None = None) -> _asking.Reply:
        """Send a message that asks for an answer and wait up to `wait` seconds for the handler's
        `message.reply(...)`: `Reply(message_id, replied, value)`, `replied` False if the wait
        ended first (read it later with `Engine.reply`). A reply is seen only once committed."""
        message_id = await self._send(invocation_id, topic, value, message_id, wants_reply=True)
        return await self.reply(invocation_id, message_id, wait=wait)

    async def reply(self, invocation_id: str, message_id: str, *, wait: float | None = None) -> _asking.Reply:
        """The reply to message `message_id`, waiting up to `wait` seconds for it."""
        return await _asking.wait_for_reply(self._read, self.store.message, invocation_id, message_id, wait,
                                            self._look_every, self.committer.replies)

    async def get_value(self, invocation_id: str, name: str, *, wait: float | None = None,
                        after: int | None = None) -> _asking.Value:
        """The latest value the invocation published under `name` (`ctx.publish`), read from the
        store: no worker needs to run. With `wait`, wait up to that many seconds for a newer one
        (than the seq `after`, or than the current one). `ValueNotPublished` if there is none."""
        return await _asking.read_value(self._read, self.store.published, self.store.require, invocation_id, name,
                                        wait, after, self._look_every)

    @property
    def _look_every(self) -> float:
        return _asking.LOOK_EVERY_NETWORK if self.store.blocking else _asking.LOOK_EVERY_LOCAL

    async def values(self, invocation_id: str) -> dict[str, _asking.Value]:
        """Every value the invocation published, by name (the latest of each)."""
        await self._read(self.store.require, invocation_id)
        return _asking.values_of(await self._read(self.store.published, invocation_id, None))

    # -- from outside: promises and cancellation ----------------------------------------------

    def waiting_for(self, invocation_id: str) -> InvocationRecord:
        """The invocation whose wait `invocation_id`'s depends on: itself, or the child it awaits
        with `ctx.call` (and that child's own awaited child, and so on), in its latest generation."""
        return waiting_for(self.store, invocation_id)

    async def resolve(self, invocation_id: str, name: str, value: Any = None, *, early: bool = False) -> InvocationRecord:
        """Deliver `value` to promise `name`; a suspended invocation waiting on it becomes pending.

        A `child:` promise (what `ctx.call` waits for) is refused: the child's result settles it.
        So is a promise the invocation neither waits on nor has recorded (`PromiseNotFound`),
        unless `early` says it is meant ahead of the handler's asking."""
        await self._read(refuse_child_promise, self.store, invocation_id, name)
        if not early:
            await self._read(refuse_unknown_promise, self.store, invocation_id, name)
        try:
            raw = bytes(encode_value(value))
        except UnencodableValue as exc:
            raise TerminalError(f"cannot resolve promise {name!r}: {exc}") from None
        return await self.committer.submit(Resolve(invocation_id, name, now_us(), raw), durable=True)

    async def reject(self, invocation_id: str, name: str, message: str, *, early: bool = False) -> InvocationRecord:
        """Reject promise `name`: the handler's `ctx.promise(name)` raises `PromiseRejected`.
        Refused as `resolve` refuses."""
        await self._read(refuse_child_promise, self.store, invocation_id, name)
        if not early:
            await self._read(refuse_unknown_promise, self.store, invocation_id, name)
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

    # -- operator actions (runtime/_engine/_actions.py): the CLI's and the HTTP API's ------------------

    async def check_resumable(self, invocation_id: str, *, finished_ok: bool = False) -> InvocationRecord:
        """The record of an invocation that may be resumed (pending, suspended, diverged, or
        running with its owner gone), in its latest generation; else `InvocationBusy` (its
        owner is alive), `NotResumable` (finished, unless `finished_ok`) or `InvocationNotFound`."""
        return await self._read(lambda: _actions.check_resumable(self.store, invocation_id, finished_ok=finished_ok))

    async def fork(self, invocation_id: str, *, at: int, values: Mapping[int, Any] | None = None,
                   new_id: str | None = None) -> InvocationRecord:
        """Copy entries `0 … at-1` into a new pending invocation (`journal fork`), with the
        recorded values of the steps or promises at the seqs of `values` replaced by these.
        With this engine's code for its handler, a replaced value that does not fit the type
        the code reads it as is refused (`ForkError`) before anything is written."""
        if values:
            await self._refuse_unfit_values(invocation_id, at, values)
        return await self._read(lambda: _actions.fork_with(self.store, invocation_id, at=at, values=values,
                                                           new_id=new_id))

    async def _refuse_unfit_values(self, invocation_id: str, at: int, values: Mapping[int, Any]) -> None:
        record = await self._read(self.store.require, invocation_id)
        try:
            handler = self.handler_for(record.handler)
        except Exception:  # no code for it here (or it does not import): its run will tell
            return
        try:
            raw = {int(seq): bytes(encode_value(value)) for seq, value in values.items()}
        except UnencodableValue:
            return  # `fork_with` says so
        copy = await self._read(lambda: _fork_check.scratch(self.store, invocation_id, at))
        await _fork_check.refuse_unfit_values(handler, copy, invocation_id, at, raw)

    async def retry(self, invocation_id: str, *, new_id: str | None = None, force: bool = False) -> InvocationRecord:
        """A failed invocation forked before its failing step, pending (`journal retry`): run it
        with `resume` (a worker that has its handler takes it too). Its id is `ID-retry-N`.
        `AlreadyRetried` (an `InvocationConflict`) if it has a retry that has not failed,
        unless `force`."""
        return await self._read(lambda: _actions.retry(self.store, invocation_id, new_id=new_id, force=force))

    # -- retention --------------------------------------------------------------------------

    async def retain(self, retention: Mapping[Status, float], *, interval: float = 30.0, limit: int = 64) -> None:
        """Trim finished invocations once `retention` (seconds by status: `journal.parse_retention`)
        says they are due, until cancelled (`journal worker|serve --retain`): `limit` at a time,
        each in a short transaction of its own off the event loop, pausing four times as long
        as each took, for the work, and a look every `interval` seconds once nothing is due."""
        policy = dict(retention)
        while True:
            began = anyio.current_time()
            trimmed = await anyio.to_thread.run_sync(lambda: trim_due(self.store, policy, limit=limit))
            # At most a fifth of the time goes to trimming: a backlog of 100,000 due ones took
            # W2 to 0.72x of its steps/s with a fixed 50 ms pause (`python -m bench.fleet --only retain`).
            await anyio.sleep(max(0.05, 4 * (anyio.current_time() - began)) if trimmed else interval)

    # -- batches ----------------------------------------------------------------------------

    async def start_batch(self, action: str, filter: dict[str, Any], *, check: bool = False,
                          dry_run: bool = False) -> Batch:
        """A batch of `action` ("cancel", "resume", "retry") over every invocation `filter`
        (the filters of `journal ls`: status, handler, key, tag, q, since, until) matches now,
        recorded in the store; `run_batch` carries it out. With `check` (retry only), each
        failed journal is first replayed against the code the retry runs, and one that would
        diverge is listed instead of retried; `dry_run` acts on nothing."""
        return await _batches.start_batch(self, action, filter, check=check, dry_run=dry_run)

    async def run_batch(self, batch_id: str) -> Batch:
        """Carry the batch out from where its record says it stopped (after a crash too); each
        invocation is acted on once."""
        return await _batches.run_batch(self, batch_id)

    async def resume_batches(self) -> list[Batch]:
        """Finish the batches a crash interrupted (`journal worker` and `journal serve` call it as they start)."""
        return await _batches.resume_batches(self)

    def runs(self, handler: str) -> bool:
        """Whether this engine has code for invocations that record `handler`: one of its
        `handlers`, or without them an import path (a NAME needs `--handler NAME=TARGET`)."""
        return handler in self.handlers if self.handlers is not None else not is_handler_name(handler)

    # -- streams ------------------------------------------------------------------------

    async def stream(self, invocation_id: str, *, after: int | str | Event | Chunk = 0, poll: float = 0.05,
                     chunks: bool = True) -> AsyncIterator[Event | Chunk]:
        """What the invocation publishes, from any process, until it (and any continuation) finishes:
        an `Event` for each `ctx.emit`, once and in seq order, as it is journaled; and (unless
        `chunks=False`) a `Chunk` for the live output its running steps send with
        `current_step().emit(...)`, in order, as it is sent (a step's before its entry).

        Each item carries its `cursor`, the stream's position after it. A follower that was
        cut off resumes with `after=` the last item it saw (or its cursor, or the id of the
        last HTTP event): every later event and chunk comes, none it saw comes again. An int
        is a seq: every entry up to it was seen."""
        async for item in events(self._read, self.store, invocation_id, after=after, poll=poll, chunks=chunks):
            yield item

    # -- recovery and the worker loop (runtime/_engine/_worker.py) ----------------------------------------

    def runnable(self) -> list[str]:
        """Invocations that should run now: pending, running with a dead owner, due timers."""
        return self._worker.runnable()

    async def recover(self, *, concurrency: int = 16) -> list[Outcome]:
        """Resume every invocation left pending or orphaned (its owner died or its lease expired)."""
        return await self._worker.recover(concurrency=concurrency)

    async def serve(self, *, concurrency: int = 16, idle_exit: bool = False,
                    disk_full_wait: float | None = None) -> None:
        """The worker loop: run whatever becomes runnable until cancelled (or idle, with `idle_exit`).

        Cancelling it (Ctrl-C, SIGTERM) stops cleanly: invocations in flight give their lease
        back and stay pending for the next worker. When the store's disk is full it takes no
        work and tries again every few seconds; with `idle_exit` it gives up once the disk has
        stayed full for `disk_full_wait` seconds (None: 60) and raises `DiskFull`, since a
        script waiting for it to end must not hang; without, it waits as long as it takes.
        """
        await self._worker.serve(concurrency=concurrency, idle_exit=idle_exit,
                                 disk_full_wait=DISK_FULL_WAIT if disk_full_wait is None else disk_full_wait,
                                 before_look=self.schedules.fire_due)

    # -- execution (runtime/_engine/_executor.py) ---------------------------------------------------------

    async def _execute(self, invocation_id: str, fn: Callable[..., Any] | None = None,
                       fresh: Fresh | None = None) -> Outcome:
        return await self._executor.execute(invocation_id, fn, fresh)
