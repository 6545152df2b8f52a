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

A store whose calls wait on the network (`store.blocking`, PostgreSQL) is never called
from the event loop: each batch's transaction runs on the flusher's thread (or, when the
store can, on the loop without blocking it: `Store.apply_async`), and its commit
is the durable step (`synchronous_commit`), so there is no separate fsync; `async`
operations are batched the same way and committed without waiting for the WAL flush.
`read` runs any other store call off the loop for such a store.

For LMDB the commit itself runs on the caller's thread: a commit without fsync takes a few
microseconds, less than the cost of handing it to another thread, and the writer lock is
never held across a disk flush. The fsync of a batch goes to a thread of its own
(`_flusher.Flusher`), so the event loop keeps serving other invocations while the disk
works. A batch that nobody else on the loop could work beside (a batch of one, or one that
every runnable task has joined), on a disk whose recent fsyncs were quick, is flushed inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, TypeVarTuple, overload

import anyio
import anyio.lowlevel

from .._records import InvocationRecord
from .._store import (
    Acquire,
    Append,
    Capability,
    Continue,
    Create,
    Op,
    OpResult,
    Renew,
    RequestCancel,
    Resolve,
    Send,
    SetStatus,
    Store,
)
from ._flusher import Flusher, deferring

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Seconds a lone leader may go without giving the event loop a turn before its commit.
_TURN_EVERY = 0.001
_UNSHIELDED = contextlib.nullcontext()


class Durability(str, enum.Enum):
    SYNC = "sync"
    ASYNC = "async"
    EXIT = "exit"

    def __str__(self) -> str:
        return self.value


class _Batch:
    """Operations committed in one transaction and made durable by one fsync."""

    __slots__ = ("ops", "results", "_done", "_finished", "durable")
    durable: bool  # set by the leader when it opens the batch

    def __init__(self) -> None:
        self.ops: list[Op | None] = []  # None: a flush, which only needs the fsync
        self.results: list[OpResult | BaseException] = []
        # One event for the whole batch, not one per operation, and made only when someone
        # waits on it: a lone leader (one invocation stepping) never does.
        self._done: anyio.Event | None = None
        self._finished = False

    @property
    def done(self) -> anyio.Event:
        """Set once the batch is committed (and fsynced)."""
        if self._done is None:
            self._done = anyio.Event()
            if self._finished:
                self._done.set()
        return self._done

    def finish(self) -> None:
        self._finished = True
        if self._done is not None:
            self._done.set()


class Committer:
    """Submits store operations from async code; one per store per event loop."""

    def __init__(self, store: Store, durability: Durability | str = Durability.SYNC) -> None:
        self.store = store
        self.durability = Durability(durability)
        self.blocking = store.blocking
        self._loop_commits = Capability.LOOP_COMMITS in store.capabilities
        self._filling: _Batch | None = None  # collecting operations while another batch is in flight
        self._in_flight: _Batch | None = None  # being committed and fsynced
        self._flusher = Flusher(store.sync)
        if self.durability is Durability.ASYNC and not self.blocking:
            store.start_background_sync(0.1)
        self.batches = 0  # how many transactions+fsyncs the sync path made (for benchmarks)
        # Told the seconds of each commit made here (a group's transaction with its fsync, or
        # one `commit_now`): the metric `journal_store_commit_seconds`. Empty, a commit pays one test.
        self.timers: list[Callable[[float], None]] = []
        self._replied: anyio.Event | None = None  # see `replies`
        # (time.monotonic) When `ctx.run` gives the event loop its next turn outside any shield
        # (`turn`); until then a lone leader needs none before its commit.
        self.turn_by = 0.0

    # The result of each kind of operation, as `Store.apply_one` gives it.
    @overload
    def submit(self, op: Acquire, *, durable: bool | None = None, settle: bool = False) -> Awaitable[tuple[int, InvocationRecord]]: ...
    @overload
    def submit(
        self, op: SetStatus | Resolve | RequestCancel | Continue | Send, *, durable: bool | None = None,
        settle: bool = False
    ) -> Awaitable[InvocationRecord]: ...
    @overload
    def submit(self, op: Append | Renew, *, durable: bool | None = None, settle: bool = False) -> Awaitable[InvocationRecord | None]: ...
    @overload
    def submit(self, op: Create, *, durable: bool | None = None, settle: bool = False) -> Awaitable[tuple[InvocationRecord, bool]]: ...

    def submit(self, op: Op, *, durable: bool | None = None, settle: bool = False) -> Awaitable[OpResult]:
        """Commit `op`; the awaitable gives its result or raises its error. Durable per the mode
        unless `durable` says.

        With `settle`, an anyio cancellation while the operation waits for its group commit
        does not take the answer away: the wait goes on to the end, as inside a shield, and
        the cancellation comes at the caller's next checkpoint (`_seen_out`). An execution's
        final write uses it, to see how it ended (a full disk leaves the invocation pending).

        Not a coroutine itself: what it returns is the group commit's own coroutine, so that each
        of the thousands of operations waiting on a group commit pays one coroutine frame fewer,
        in memory while it waits and in CPU when it is woken (W5 in `python -m bench`)."""
        if durable is None:
            durable = self.durability is not Durability.ASYNC
        if self.blocking:
            return self._group(op, durable, settle)
        if not durable:
            return _ready(self.commit_now(op))
        return self._group(op, True, settle)

    async def create(self, record: InvocationRecord, started: bytes,
                     lease: Acquire | None = None) -> tuple[InvocationRecord, bool]:
        """`Store.create`, durable as the mode says: `(record, created)`, the record it already had
        (and False) if it exists with the same input (`InvocationConflict` for another one).
        With `lease`, the store may take the new invocation's lease too (see `Create`).

        On a local store it goes through the group commit, so that invocations started
        together (a fleet of agents) share one transaction and its fsync; a blocking store's
        own transaction is durable at commit."""
        if self.blocking:
            began = time.perf_counter()
            if lease is None:
                created = await self.read(self.store.create, record, started)
            else:
                created = await self.read(self.store.apply_one, Create(record, started, lease))
            if self.timers:
                self._timed(time.perf_counter() - began)
            return created
        return await self.submit(Create(record, started, lease))

    async def submit_batched(self, op: Acquire) -> tuple[int, InvocationRecord]:
        """Commit `op` in the next group transaction, without waiting for a disk flush: an
        operation that need not be durable (taking a lease) but that many tasks make at once,
        so that they share one transaction instead of paying a commit each."""
        result = await self._group(op, durable=False)
        assert isinstance(result, tuple)  # an Acquire's result
        return result  # type: ignore[return-value]  # the union does not narrow to its tuple member

    @property
    def commits_inline(self) -> bool:
        """Whether `commit_now` may be called from the loop (`async` mode on a local store)."""
        return self.durability is Durability.ASYNC and not self.blocking

    @overload
    def commit_now(self, op: Acquire) -> tuple[int, InvocationRecord]: ...
    @overload
    def commit_now(self, op: SetStatus | Resolve | RequestCancel | Continue | Send) -> InvocationRecord: ...
    @overload
    def commit_now(self, op: Append | Renew) -> InvocationRecord | None: ...
    @overload
    def commit_now(self, op: Create) -> tuple[InvocationRecord, bool]: ...

    def commit_now(self, op: Op) -> OpResult:
        """Commit `op` at once, without waiting for an fsync (the `async` mode's whole path)."""
        if not self.timers:
            return self.store.apply_one(op)
        began = time.perf_counter()
        try:
            return self.store.apply_one(op)
        finally:
            self._timed(time.perf_counter() - began)

    def replies(self) -> anyio.Event:
        """An event set by the next `replied`: what a caller of this process that waits for a
        reply to a message waits on between its looks at the store, so that a reply its own
        worker commits is read at once."""
        if self._replied is None:
            self._replied = anyio.Event()
        return self._replied

    def replied(self) -> None:
        """A reply to a message was committed here (`replies`)."""
        if self._replied is not None:
            self._replied.set()
            self._replied = None

    def _timed(self, seconds: float) -> None:
        for timer in self.timers:
            timer(seconds)

    async def read(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """`fn(*args)`, a store call: on a thread for a blocking store, here for a local one."""
        if not self.blocking:
            return fn(*args)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)

    def turn_due(self) -> bool:
        """Whether `ctx.run` gives the loop its turn (`turn`) now: `turn_by` has passed, and no
        batch is gathering the operations of tasks already runnable (the step of one of them
        yielding now would miss the batch and pay an fsync of its own)."""
        return self._filling is None and time.monotonic() >= self.turn_by

    async def turn(self) -> None:
        """Give the event loop a turn, outside any shield, and restart the clock of `turn_by`.
        `ctx.run` calls it once `turn_by` has passed: a handler whose steps never wait for
        anything (quick `async def` steps, or `async` or `exit` durability, whose commits do
        not wait) still leaves timers and sockets their turn, and a cancellation (Ctrl-C, a
        timeout around the run) reaches it there."""
        await anyio.lowlevel.checkpoint()
        self.turn_by = time.monotonic() + _TURN_EVERY

    async def flush(self) -> None:
        """Make everything committed so far durable (no-op for `async`, whose flusher runs anyway)."""
        if self.blocking:
            return  # a blocking store's commits are durable by themselves (`synchronous_commit`)
        if self.durability is not Durability.ASYNC:
            await self._group(None)  # shares the next group commit's fsync

    async def _group(self, op: Op | None, durable: bool = True, settle: bool = False) -> OpResult:
        """Commit `op` in the next group transaction; its result, or its error raised."""
        batch = self._filling
        if batch is not None:  # its leader commits it
            batch.durable = batch.durable or durable
            batch.ops.append(op)
            index = len(batch.ops) - 1
            if settle:
                await _seen_out(batch.done)
            else:
                await batch.done.wait()
            return _unwrap(batch.results[index])
        batch = self._filling = _Batch()
        batch.durable = durable
        batch.ops.append(op)
        # The first to arrive leads. The batch must finish even if the leader is cancelled:
        # the others wait on it. An anyio cancellation stops at the shield; a native asyncio
        # one (`asyncio.wait_for`, `task.cancel()`) goes through it, so the leader defers
        # it (`deferring`) until the batch is committed: left open, the batch would have
        # every later operation join it and wait for ever.
        deferred: list[BaseException] = []
        # A turn of the loop lets tasks already runnable join this batch. With none runnable
        # it would only look for I/O and due timers, which cost a lone invocation 10-15 µs a
        # `sync` step. A lone leader skips it while `turn_by` has not passed: `ctx.run` gives
        # the loop a turn once `_TURN_EVERY` seconds have passed since its last (`turn`), so
        # sockets and timers (a lease's renewal) wait at most that and one step (its fsync
        # included) behind a handler making step after step.
        lone = self._in_flight is None and _nothing_else_ready()
        turn = self._in_flight is None and (not lone or time.monotonic() >= self.turn_by)
        # A leader that waits for nothing (no turn, no batch in flight, its commit and fsync
        # on this thread) cannot be interrupted on the way: it needs no shield (2-3 µs).
        quick = lone and not turn and not self.blocking and self._flusher.inline
        with _UNSHIELDED if quick else anyio.CancelScope(shield=True):
            if turn:
                # (`turn_by` is not pushed back: a turn inside the shield lets no cancellation
                # in, and must not put off `ctx.run`'s, which does. A handler committing only
                # through other operations takes this turn each time, as before.)
                await deferring(anyio.lowlevel.checkpoint, deferred)
            while self._in_flight is not None:  # everyone arriving meanwhile joins this batch
                await deferring(self._in_flight.done.wait, deferred)
            self._filling, self._in_flight = None, batch
            began = time.perf_counter() if self.timers else 0.0
            try:
                ops = [o for o in batch.ops if o is not None]
                if self.blocking:
                    done: Sequence[OpResult | BaseException] | None = (
                        await self.store.apply_async(ops, durable=batch.durable, deferred=deferred)
                        if ops and self._loop_commits else None if ops else [])
                    if done is None:
                        done = await self._flusher.call(
                            functools.partial(self.store.apply, ops, durable=batch.durable), deferred)
                    results = iter(done)
                else:
                    results = iter(self.store.apply(ops) if ops else ())
                    if batch.durable:  # a batch of acquires alone needs no flush
                        await self._flusher.run(alone=len(batch.ops) == 1 or _nothing_else_ready(),
                                                deferred=deferred)
                self.batches += 1
                batch.results = [None if o is None else next(results) for o in batch.ops]
                if self.timers:
                    self._timed(time.perf_counter() - began)
            except BaseException as exc:  # a failed commit or fsync fails every op in it
                batch.results = [exc] * len(batch.ops)
                if not isinstance(exc, Exception):
                    raise
            finally:
                self._in_flight = None
                batch.finish()
        if deferred:
            raise deferred[0]
        return _unwrap(batch.results[0])


def _nothing_else_ready() -> bool:
    """Whether the running asyncio loop has no callback ready to run besides this task: every
    task that could have joined the batch has, so the loop would only sleep through its fsync.
    (False off asyncio's own loop, trio or uvloop, which do not show what is ready.)"""
    try:
        return not asyncio.get_running_loop()._ready  # type: ignore[attr-defined]
    except (RuntimeError, AttributeError):
        return False


async def _seen_out(done: anyio.Event) -> None:
    """`await done.wait()`, gone on with to the end if an anyio cancellation interrupts it.

    This is what a shield around the wait would do (`CancelScope(shield=True)`), paid only
    when a cancellation comes: a cancel scope costs about 5 µs to enter and leave, and W5
    in `python -m bench` (10,000 agents in flight) ran several percent faster a step
    without the two each invocation paid (docs/performance.md). anyio's cancellation is
    level-triggered, so the caller's next checkpoint raises it again. A native asyncio
    cancellation (`task.cancel()`, `asyncio.timeout`) is raised at once, as it passes
    through a shield too: it is delivered once, and must not be lost, even when it lands
    together with an anyio one (asyncio then folds the two into one exception)."""
    task = _asyncio_task()
    before = task.cancelling() if task is not None else 0
    try:
        await done.wait()
    except BaseException as exc:
        if not _anyio_cancelled_alone(exc, task, before):
            raise
        with anyio.CancelScope(shield=True):
            await done.wait()


def _asyncio_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # not asyncio: trio
        return None


def _anyio_cancelled_alone(exc: BaseException, task: asyncio.Task[object] | None, before: int) -> bool:
    """Whether `exc` is a cancellation by an anyio scope and nothing else (a cancelled scope
    delivers it again at the next checkpoint; anything else is delivered once)."""
    if anyio.current_effective_deadline() != -math.inf:  # no cancelled scope around the caller
        return False
    if task is None:  # trio: every cancellation is a scope's
        return True
    # anyio cancels a task with a message of its own, once per wait; asyncio counts every
    # `cancel()` in `cancelling()`, so a native one landing at the same moment shows there.
    return (isinstance(exc, asyncio.CancelledError) and task.cancelling() == before + 1
            and bool(exc.args) and isinstance(exc.args[0], str)
            and exc.args[0].startswith(_ANYIO_CANCEL_MESSAGE))


# How anyio (4.x) words the cancellations it delivers on asyncio; its own check reads the same.
_ANYIO_CANCEL_MESSAGE = "Cancelled via cancel scope "


async def _ready(result: OpResult) -> OpResult:
    return result


def _unwrap(result: OpResult | BaseException) -> OpResult:
    if isinstance(result, BaseException):
        raise result
    return result
