"""Running an invocation once it is chosen: the lease, the journal read back, the handler
driven through its state machine, and how it ended written down.

`Executor.execute` takes the lease (in one group transaction with the other claims made
at the same moment), reads the journal into a `Replayer`, builds the context (and its
`Machine`), runs the handler, and writes the `Ending` that `Machine.settle` decides with
what the machine still buffers, in one append. Meanwhile the lease watcher
(`runtime/_engine/_leases.py`) renews the lease and passes on cancel requests. An invocation that
cannot run here (its handler does not load, its journal is damaged) is parked as
`diverged` with the reason; one stopped from outside gives its lease back and stays
`pending`. Everything the executor needs comes in one `Settings` value, not the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, NamedTuple

import anyio
import anyio.lowlevel
import msgspec

from journal import (
    HOST,
    Acquire,
    Committer,
    Continue,
    ContinuedAsNew,
    ErrorInfo,
    Failed,
    InvocationRecord,
    SetStatus,
    Started,
    Status,
    Transition,
    UnencodableValue,
    decode_entry,
    digest,
    encode_entry,
    encode_value,
    now_us,
    retry_lineage,
)
from journal.errors import (
    CorruptEntry,
    EntryTooLarge,
    InvocationBusy,
    InvocationConflict,
    JournalError,
    LeaseLost,
    StoreError,
)

from .._base._step_info import _context, _current
from .._flow._limits._budget import budget_scopes
from .._handler._children import Children
from .._handler._guard import _handler_scope
from .._handler._handlers import NO_INPUT, decode_input, prepare_input
from .._handler._invocation import InvocationContext
from .._handler._step_threads import StepThreads
from .._replay._branches import install as install_branches
from .._replay._machine import Ending
from .._replay._replayer import Replayer
from .._replay._suspend import ContinueAsNew
from ..errors import HandlerNotFound, TerminalError
from ..hooks import Attempt, AttemptObserver, Observers
from ._leases import Leases
from ._outcome import Outcome


@dataclass(frozen=True, slots=True)
class Settings:
    """What running an invocation depends on, from the engine that runs it."""

    committer: Committer
    owner: str  # this engine's name in the leases it takes
    lease_ttl: float
    inline_sleep_limit: float
    always_replay: bool
    handler_for: Callable[[str], Callable[..., Any]]  # the engine's choice of code for a recorded name
    observers: Observers
    poll_interval: float
    threads: StepThreads  # where plain step functions run
    budgets: Any = None  # the engine's `runtime/_flow/_limits/_budget.py::Budgets`: live steps are charged to them
    limiter: Any = None  # the engine's `runtime/_flow/_limits/_limiter.py::Limiter`: steps under `limit=` take units through it


def run_hold(invocation_id: str) -> str:
    """The id of the hold an invocation under limits has while it runs: the same in every
    process, so that workers looking at it stand in its line once, and only one claims it.
    An execution takes it with its lease epoch as the hold's claim and gives it back with the
    same, so an execution ending late never gives back a unit a later one of the same
    invocation holds; a worker's look takes it with claim 0, and an execution that leased the
    invocation but does not run it gives that back with its epoch
    (`journal/limits/_model.py::Holder.claim`)."""
    return f"run:{invocation_id}"


def run_limits(record: InvocationRecord) -> tuple[str, ...]:
    """The limits an invocation's run holds a unit of, in their one order (`limit_names`)."""
    return tuple(sorted(set(record.limits)))


class Fresh(NamedTuple):
    """An invocation `Engine.run` has just created: its creation time, entry 0, and its record
    if this engine holds its lease (epoch 1) since then."""

    created_at: int
    started: Started
    record: InvocationRecord | None
    mark: int | None  # the lease watcher's, taken before the lease (`Leases.mark`)


class Executor:
    """Runs invocations for one engine; `running` holds the ids it is executing right now."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.committer = settings.committer
        self.store = settings.committer.store
        self._read = settings.committer.read  # store calls: off the loop when the store is blocking
        self.running: set[str] = set()
        self.leases = Leases(self.committer, settings.lease_ttl, settings.poll_interval)  # one watcher for all
        self.children = Children(self.committer, self.running, self.execute, settings.observers,
                                 settings.handler_for)

    def acquire_op(self, invocation_id: str, at: int) -> Acquire:
        return Acquire(invocation_id, self.settings.owner, HOST, os.getpid(), int(self.settings.lease_ttl * 1e6), at)

    async def execute(self, invocation_id: str, fn: Callable[..., Any] | None = None,
                      fresh: Fresh | None = None) -> Outcome:
        """Run the invocation until it finishes, waits, diverges or is stopped (following a
        continue-as-new into its next generation)."""
        while True:
            outcome = await self._execute_once(invocation_id, fn, fresh)
            fresh = None  # what the journal held before the first execution, not after it
            if outcome.continued_as is not None:  # the logical run goes on in its continuation
                invocation_id = outcome.continued_as
                continue
            # A promise resolved (or a cancel requested) while the handler unwound to wait.
            if outcome.status != Status.PENDING:
                return outcome

    async def _execute_once(self, invocation_id: str, fn: Callable[..., Any] | None, fresh: Fresh | None) -> Outcome:
        leased = fresh.record if fresh is not None else None  # by `Engine.run`, which marked it running here
        took_over = False
        if leased is None and (fresh is None or fn is None):
            record = await self._read(self.store.require, invocation_id)
            if record.finished:
                # A worker may have taken it a unit as it finished elsewhere: nobody runs it now.
                await self._release_run(invocation_id, run_limits(record))
                return Outcome.of(record)
            fn = fn or self.settings.handler_for(record.handler)
            if record.status == Status.RUNNING:  # left running: a takeover, if the acquire below succeeds
                held = await self._read(self.store.lease, invocation_id)  # (only then: a rare path)
                took_over = held is not None and held.owner != self.settings.owner
        assert fn is not None  # `run` gives the handler with the invocation it leased
        # (A fresh invocation that finished meanwhile, run by another process, fails the acquire
        # below with InvocationBusy, after which `run` reports its outcome.)
        if leased is None and invocation_id in self.running:
            # The lease belongs to this engine already: a second execution here would take it
            # from the first one in the middle of a step.
            raise InvocationBusy(f"invocation {invocation_id!r} is already running in this process")
        # Marked before the acquire is awaited: a store call off the loop lets a second
        # execution here reach this point meanwhile.
        self.running.add(invocation_id)
        try:
            if fresh is not None and fresh.record is not None:  # leased by `Engine.run`, with its creation
                epoch, record, mark, claimed = 1, fresh.record, fresh.mark, fresh.created_at
            else:  # invocations starting together (a worker's batch, a fleet) share one transaction
                mark, claimed = self.leases.mark(), now_us()
                try:  # cancelled meanwhile, it may hold the lease all the same: given back below
                    epoch, record = await self.committer.submit_batched(self.acquire_op(invocation_id, claimed))
                    await anyio.lowlevel.checkpoint_if_cancelled()  # (as in `Engine._start`)
                except BaseException as exc:
                    await self.give_back_if_taken(invocation_id, exc)
                    raise
            try:
                # Created by this engine a moment ago and never leased before, its journal is the
                # entry 0 it wrote (an append needs a lease): it is not read back.
                written = fresh.started if fresh is not None and (
                    fresh.record is not None or epoch == 1 and record.created_at == fresh.created_at) else None
                ctx, started = await self._prepare(invocation_id, epoch, record, written)
            except BaseException as exc:
                # It does not run after all (a damaged journal, a cancellation): not left `running`.
                with anyio.CancelScope(shield=True):
                    try:
                        if isinstance(exc, CorruptEntry):  # not runnable until repaired: parked with the reason
                            await self._park(invocation_id, epoch, (
                                f"{exc}. It cannot run until its journal is repaired; `journal fork {invocation_id} "
                                "--at SEQ` continues it from before the damage"))
                        else:
                            await self._give_back(invocation_id, epoch)
                    finally:  # a worker's look (or an earlier execution) may have taken it a unit
                        await self._release_run(invocation_id, run_limits(record), epoch)
                raise
            watching = self.settings.observers.attempt(Attempt(invocation_id, record.handler, epoch, started.trace,
                                                               took_over))
            limits, ctx.priority, created_at = run_limits(record), record.priority, record.created_at
            del record, leased, fresh  # not kept for the whole run by this frame (many thousands may be in flight)
            try:
                if self.leases.add(ctx, epoch, claimed, mark):  # the claim took long to come back
                    await self.leases.renew_now(ctx)
                if limits:  # a unit of its limits while it runs (a worker took it before claiming it)
                    await self.settings.limiter.acquire(limits, hid=run_hold(invocation_id), claim=epoch,
                                                        priority=ctx.priority,
                                                        label=invocation_id, arrival=created_at)
                try:
                    if not watching:
                        return await self._drive(ctx, epoch, fn, started)
                    return await self._drive_watched(ctx, epoch, fn, started, watching)
                finally:  # suspended, finished or stopped: it holds nothing until it runs again
                    await self._release_run(invocation_id, limits, epoch)
            finally:
                self.leases.remove(ctx)
        finally:
            self.running.discard(invocation_id)

    async def _prepare(self, invocation_id: str, epoch: int, record: InvocationRecord,
                       started: Started | None) -> tuple[InvocationContext, Started]:
        """The context of an invocation just leased at `epoch`: its journal read (unless
        `started` is all of it), and what the record says of cancellation."""
        if started is not None:
            entries: dict[int, Any] = {0: started}
        else:
            entries = {seq: decode_entry(data, invocation_id=invocation_id, seq=seq)
                       for seq, data in await self._read(self.store.entries, invocation_id)}
        replayer = Replayer(invocation_id, entries)
        started = replayer.started()
        settings = self.settings
        ctx = InvocationContext(
            invocation_id=invocation_id, replayer=replayer, committer=self.committer, epoch=epoch,
            max_entry_bytes=self.store.max_entry_bytes, inline_sleep_limit=settings.inline_sleep_limit,
            always_replay=settings.always_replay, key=started.key, spawner=self.children, threads=settings.threads,
            key_id=retry_lineage(invocation_id, started.parent),
        )
        if started.key is not None and self.store.blocking:  # ctx.state.set must not wait on the network
            ctx.state.preload(await self._read(self.store.state, started.key))
        ctx.on_step = settings.observers.step_reporter(invocation_id)
        ctx.limiter = settings.limiter
        ctx.budgets = settings.budgets
        ctx.budget_scopes = budget_scopes(record, started.key)
        if record.cancel_requested:
            ctx.request_cancel("cancel requested")
        ctx.machine.rollback = record.cancel_rollback
        return ctx, started

    async def _drive_watched(self, ctx: InvocationContext, epoch: int, fn: Callable[..., Any], started: Started,
                             watching: list[AttemptObserver]) -> Outcome:
        """`_drive` with the observers that follow this attempt entered around it."""
        # An observer that leaves step functions alone costs them nothing.
        wrappers = [w.wrap_step for w in watching if type(w).wrap_step is not AttemptObserver.wrap_step]
        if len(wrappers) == 1:
            ctx.wrap_step = wrappers[0]
        elif wrappers:
            def wrap(step_fn: Callable[..., Any]) -> Callable[..., Any]:
                for wrapper in wrappers:
                    step_fn = wrapper(step_fn)
                return step_fn

            ctx.wrap_step = wrap
        with ExitStack() as stack:
            for watcher in watching:
                stack.enter_context(watcher)
            outcome = await self._drive(ctx, epoch, fn, started)
            record = await self._read(self.store.get, ctx.invocation_id)
            for watcher in watching:
                watcher.ended(outcome.status, record, ctx.machine.replayer.replayed)
            return outcome

    async def _drive(self, ctx: InvocationContext, epoch: int, fn: Callable[..., Any], started: Started) -> Outcome:
        """Run the handler to its end, a wait or a stop, and write where it stands."""
        machine = ctx.machine
        scope = _handler_scope.set(ctx.invocation_id)
        outer_context = _context.set(ctx)  # `current_context()`, in the handler and every task it spawns
        # An invocation run from inside another's step is handler code again, not that step.
        outer_step = _current.set(None)
        install_branches()
        # The caller's own position comes back afterwards: an invocation may be run from
        # inside another's step, in that handler's task.
        position = machine.begin()
        try:
            value = decode_input(fn, started.input)
            result = await (fn(ctx) if value is NO_INPUT else fn(ctx, value))
            # The handler may have caught a store failure, a lost lease or a divergence and
            # returned: its journal may lack an entry, so it is not finished; `settle` says so.
            machine.raise_if_stopped()
            machine.replayer.check_finished()
        except BaseException as exc:
            ending = machine.settle(now_us(), error=exc, interrupted=anyio.get_cancelled_exc_class())
        else:
            ending = machine.settle(now_us(), result=result)
        finally:
            machine.end(position)
            _current.reset(outer_step)
            _context.reset(outer_context)
            _handler_scope.reset(scope)
        return await self._write(ctx, epoch, ending)

    async def _write(self, ctx: InvocationContext, epoch: int, ending: Ending) -> Outcome:
        """Write how the execution ended, as `Machine.settle` decided."""
        invocation_id = ctx.invocation_id
        how = ending.how
        if how == "write":
            return await self._finish(ctx, epoch, ending.entry, ending.status, **ending.change)  # type: ignore[arg-type]
        if how == "diverged":
            record = await self.committer.submit(SetStatus(invocation_id, Transition(
                Status.DIVERGED, now_us(), release=True, **ending.change), epoch), durable=True)
            return Outcome.of(record)
        if how == "continue":
            assert ending.cont is not None
            return await self._continue_as_new(ctx, epoch, ending.cont)
        if how == "reread":
            with anyio.CancelScope(shield=True):
                return Outcome.of(await self._read(self.store.require, invocation_id))
        if how == "restart":
            return Outcome(id=invocation_id, status=Status.PENDING)  # always-replay: run it again from the top
        error = ending.error
        assert error is not None
        if how == "give back":
            await self._stopped(ctx, epoch, from_outside=error is not ctx.machine.broken)
        raise error  # "give back" and "crash"

    async def _stopped(self, ctx: InvocationContext, epoch: int, *, from_outside: bool) -> None:
        """Give the lease back of an execution that stopped before it ended: `pending` again,
        with what `exit` durability still holds in memory when it was stopped from outside
        (finished steps stay done)."""
        with anyio.CancelScope(shield=True):
            if not from_outside:
                await self._give_back(ctx.invocation_id, epoch)
                return
            try:
                await ctx.finish(None, Transition(Status.PENDING, now_us(), release=True))
            except JournalError:
                await self.committer.submit(SetStatus(ctx.invocation_id, Transition(
                    Status.PENDING, now_us(), release=True), epoch), durable=True)

    async def _continue_as_new(self, ctx: InvocationContext, epoch: int, cont: ContinueAsNew) -> Outcome:
        invocation_id = ctx.invocation_id
        record = await self._read(self.store.require, invocation_id)
        fn = self.settings.handler_for(record.handler)
        try:
            raw, _ = prepare_input(fn, cont.input)
        except (ValueError, UnencodableValue) as exc:
            error = ErrorInfo("TerminalError", f"continue_as_new: {exc}")
            return await self._finish(ctx, epoch, Failed(now_us(), error), Status.FAILED, error=error)
        root, _, generation = invocation_id.rpartition("~")
        next_id = f"{root}~{int(generation) + 1}" if root and generation.isdigit() else f"{invocation_id}~1"
        at = now_us()
        input_digest = digest(bytes(raw))
        # The next generation is the same run to an operator: it keeps the tags (those set in
        # this execution and not yet written included).
        tags = {**record.tags, **dict(ctx.machine.take_tags() or ())}
        new = InvocationRecord(next_id, record.handler, Status.PENDING, at, at, record.key, input_digest,
                               parent=record.parent, queued_at=record.queued_at, continued_from=invocation_id,
                               tags=tags)
        trace = ctx.machine.replayer.started().trace  # the next generation goes on in the same trace
        started = encode_entry(Started(record.handler, raw, at, record.key, input_digest, record.parent, trace),
                               self.store.max_entry_bytes)
        with anyio.CancelScope(shield=True):
            entries, state, seen = ctx.machine.take_final(ContinuedAsNew(at, next_id))
            done = Transition(Status.COMPLETED, at, result=encode_value({"continued_as": next_id}), release=True)
            op = Continue(invocation_id, epoch, entries, done, new, started, state, seen)
            try:
                finished = await self.committer.submit(op, durable=True)
            except InvocationConflict:
                error = ErrorInfo("TerminalError", (
                    f"continue_as_new: the next generation's id {next_id!r} is taken by another invocation; "
                    f"remove or rename {next_id!r}, then `journal resume {invocation_id}`"))
                return await self._finish(ctx, epoch, Failed(now_us(), error), Status.FAILED, error=error)
        return Outcome.of(finished)

    async def _finish(self, ctx: InvocationContext, epoch: int, entry: Any, status: Status, **change: Any) -> Outcome:
        if status == Status.CANCELLED and ctx.machine.rollback:
            try:
                entry = msgspec.structs.replace(entry, rolled_back=ctx.machine.roll_back())
            except TerminalError:  # changes journaled without their prior values (checked when asked)
                pass
        try:
            record = await ctx.finish(entry, Transition(status, now_us(), release=True, **change))
        except LeaseLost:
            with anyio.CancelScope(shield=True):
                record = await self._read(self.store.require, ctx.invocation_id)
        except EntryTooLarge as exc:
            if status == Status.FAILED:
                raise
            # The result (or the end of a cancelled run) is too large to journal: that is the
            # handler's doing, and would happen again at every resume, so the invocation fails.
            error = ErrorInfo("TerminalError", f"the handler's result cannot be journaled: {exc}")
            return await self._finish(ctx, epoch, Failed(now_us(), error), Status.FAILED, error=error)
        except StoreError:
            # The final write failed (a full disk, with `exit` durability the whole journal at
            # once): nothing about the handler was recorded, so it goes back to `pending`, a
            # write small enough to fit where the journal did not, and the error is reported.
            with anyio.CancelScope(shield=True):
                try:
                    await self.committer.submit(SetStatus(ctx.invocation_id, Transition(
                        Status.PENDING, now_us(), release=True), epoch), durable=True)
                except JournalError:
                    pass
            raise
        return Outcome.of(record)

    # -- invocations that do not run here ----------------------------------------------------------

    async def loadable(self, invocation_id: str, record: InvocationRecord | None = None) -> bool:
        """True if the invocation's handler loads here; else park it, tell the observers, and
        return False. The lease is taken first: an invocation another process runs is left alone.
        `record`: its record as a worker's look just read it (an invocation's handler never
        changes, and a finished one is found so by the execution), not read again."""
        if record is None:
            record = await self._read(self.store.get, invocation_id)
        if record is None or record.finished:
            return True
        try:
            self.settings.handler_for(record.handler)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure to import the handler's module
            reason = exc if isinstance(exc, HandlerNotFound) else f"importing it raised {type(exc).__name__}: {exc}"
        message = (f"invocation {invocation_id!r} cannot run: cannot load its handler {record.handler!r}: {reason}. "
                   f"Restore or fix the code, then `journal resume {invocation_id}`")
        epoch, _ = await self.committer.submit(self.acquire_op(invocation_id, now_us()), durable=False)
        await self._park(invocation_id, epoch, message)
        await self._release_run(invocation_id, run_limits(record), epoch)  # a worker's look may have taken it a unit
        self.settings.observers.parked(invocation_id, message)
        return False

    async def _release_run(self, invocation_id: str, limits: tuple[str, ...], claim: int | None = None) -> None:
        """Give back the unit of `limits` the invocation's run holds, unless an execution later
        than `claim` has taken it over (`run_hold`); None: whoever holds it."""
        if limits:
            await self.settings.limiter.release(run_hold(invocation_id), limits, claim=claim)

    async def _park(self, invocation_id: str, epoch: int, reason: str) -> None:
        """Set the invocation `diverged` with `reason` (the status whose meaning is "the code
        does not fit this journal: fix it, then `journal resume`"), giving the lease back."""
        await self.committer.submit(SetStatus(invocation_id, Transition(
            Status.DIVERGED, now_us(), divergence=reason, release=True), epoch), durable=True)

    async def _give_back(self, invocation_id: str, epoch: int | None = None, owner: str | None = None) -> None:
        """Give the lease back (held at `epoch`, or by `owner` if it is) and leave the invocation
        `pending`, to run again; if the store refuses, the lease runs out by itself."""
        try:
            await self.committer.submit(SetStatus(
                invocation_id, Transition(Status.PENDING, now_us(), release=True), epoch, owner), durable=True)
        except JournalError:
            pass

    async def give_back_if_taken(self, invocation_id: str, exc: BaseException) -> None:
        """After a claim (`Create` with a lease, `Acquire`) ended in `exc` with no answer: the
        store may have taken the lease all the same (a native asyncio cancellation, which an
        anyio shield does not stop, or an fsync that failed after the commit), so give it back
        if this engine holds it. A refusal by the store's rules took nothing."""
        if isinstance(exc, JournalError) and not isinstance(exc, StoreError):
            return
        with anyio.CancelScope(shield=True):
            await self._give_back(invocation_id, owner=self.settings.owner)

