"""One execution of an invocation: the async shell that drives its state machine.

The `Engine` acquires the lease, builds the context (and its `Machine`) and hands them
here. `Execution.drive` runs the handler and turns however it ended (a result, an error, a
wait, a divergence, a cancellation, continue-as-new, a lost lease, a broken store) into
the invocation's next status, written with what the machine still buffers in one append.
Meanwhile the engine's lease watcher (`runtime/_leases.py`) renews the lease and passes on
cancel requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from journal import (
    Cancelled as CancelledEntry,
)
from journal import (
    Committer,
    Completed,
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
)
from journal.errors import EntryTooLarge, InvocationConflict, JournalError, LeaseLost, StoreError

from . import _otel
from ._branches import install as install_branches
from ._clock import now_us
from ._composition import ContinueAsNew
from ._groups import leaves as _leaves
from ._guard import _handler_scope
from ._handlers import NO_INPUT, decode_input, load_recorded, prepare_input
from ._invocation import InvocationContext, Restart
from ._outcome import Outcome
from ._park import give_back
from ._replayer import Replayer
from ._step_info import _context, _current
from ._suspend import Suspend
from .errors import Cancelled, NondeterminismError, TerminalError

if TYPE_CHECKING:
    from ._engine import Engine


async def prepare(engine: Engine, invocation_id: str, epoch: int, record: InvocationRecord,
                  started: Started | None, spawner: Any) -> tuple[Execution, Started, Any]:
    """The execution of an invocation `engine` has just leased at `epoch`: its journal read
    (unless `started` is all of it), its context (whose child invocations `spawner` starts),
    and its tracing if that is on."""
    if started is not None:
        entries: dict[int, Any] = {0: started}
    else:
        entries = {seq: decode_entry(data, invocation_id=invocation_id, seq=seq)
                   for seq, data in await engine.committer.read(engine.store.entries, invocation_id)}
    replayer = Replayer(invocation_id, entries)
    started = replayer.started()
    ctx = InvocationContext(
        invocation_id=invocation_id, replayer=replayer, committer=engine.committer, epoch=epoch,
        max_entry_bytes=engine.store.max_entry_bytes, inline_sleep_limit=engine.inline_sleep_limit,
        always_replay=engine.always_replay, key=started.key, spawner=spawner,
    )
    if started.key is not None and engine.store.blocking:  # ctx.state.set must not wait on the network
        ctx.state.preload(await engine.committer.read(engine.store.state, started.key))
    if engine.on_step is not None:
        hook = engine.on_step
        ctx.on_step = lambda name, how, secs, replayed: hook(invocation_id, name, how, secs, replayed)
    if record.cancel_requested:
        ctx.request_cancel("cancel requested")
    ctx.machine.rollback = record.cancel_rollback
    execution = Execution(ctx, epoch, committer=engine.committer, handler_for=engine.handler_for)
    tracing = _otel.attempt(invocation_id, record.handler, started.trace, epoch) if _otel.enabled() else None
    return execution, started, tracing


class Execution:
    """Drives one execution of an invocation whose lease (`epoch`) the engine holds."""

    def __init__(self, ctx: InvocationContext, epoch: int, *, committer: Committer,
                 handler_for: Callable[[str], Callable[..., Any]] = load_recorded) -> None:
        self.store = committer.store
        self.committer = committer
        self._read = committer.read  # store calls: off the loop when the store is blocking (PostgreSQL)
        self._handler_for = handler_for  # the engine's choice of code for a recorded handler name
        self.ctx = ctx
        self.epoch = epoch

    async def drive(self, fn: Callable[..., Any], started: Started) -> Outcome:
        """Run the handler to its end, a wait or a stop, and write where it stands."""
        ctx = self.ctx
        replayer = ctx.machine.replayer
        invocation_id = ctx.invocation_id
        scope = _handler_scope.set(invocation_id)
        outer_context = _context.set(ctx)
        # An invocation run from inside another's step is handler code again, not that step.
        outer_step = _current.set(None)
        machine = ctx.machine
        install_branches()
        # The caller's own position comes back afterwards: an invocation may be run from
        # inside another's step, in that handler's task.
        position = machine.begin()
        try:
            value = decode_input(fn, started.input)
            result = await (fn(ctx) if value is NO_INPUT else fn(ctx, value))
            # The handler may have caught a store failure, a lost lease or a divergence and
            # returned: its journal may lack an entry, so it is not finished; `_settle` reports it.
            machine.raise_if_stopped()
            replayer.check_finished()
        except BaseException as exc:
            return await self._settle(exc)
        finally:
            machine.end(position)
            _current.reset(outer_step)
            _context.reset(outer_context)
            _handler_scope.reset(scope)
        if machine.cancel_delivered:
            return await self._finish(CancelledEntry(now_us(), machine.cancel_reason or ""), Status.CANCELLED)
        try:
            raw = encode_value(result)
        except UnencodableValue as exc:
            error = ErrorInfo("TerminalError", f"the handler's result cannot be journaled: {exc}")
            return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)
        return await self._finish(Completed(now_us(), raw), Status.COMPLETED, result=raw)

    async def _settle(self, exc: BaseException) -> Outcome:
        """Turn however the handler ended into the invocation's next status."""
        ctx, epoch, invocation_id = self.ctx, self.epoch, self.ctx.invocation_id
        machine = ctx.machine
        leaves = _leaves(exc)
        if machine.lost is not None or any(isinstance(e, LeaseLost) for e in leaves):
            with anyio.CancelScope(shield=True):
                return Outcome.of(await self._read(self.store.require, invocation_id))
        exits = [e for e in leaves if isinstance(e, SystemExit)]
        if exits and not machine.cancel_delivered:
            # sys.exit() in handler code is the handler's own (deterministic) ending, not an
            # interruption: it fails the invocation instead of leaving it to fail again at
            # every resume, and the process running it carries on.
            code = exits[0].code
            error = ErrorInfo("SystemExit", f"the handler called sys.exit({code!r}); a handler ends by returning "
                              "a value or raising an exception, never by exiting the process", True)
            return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)
        interrupted = [e for e in leaves if isinstance(e, anyio.get_cancelled_exc_class())
                       or isinstance(e, (KeyboardInterrupt, SystemExit))]
        if interrupted:
            # Stopped from outside (Ctrl-C, shutdown): give the lease back, stay resumable.
            with anyio.CancelScope(shield=True):
                try:  # with what `exit` durability still holds in memory: finished steps stay done
                    await ctx.finish(None, Transition(Status.PENDING, now_us(), release=True))
                except JournalError:
                    await self.committer.submit(
                        SetStatus(invocation_id, Transition(Status.PENDING, now_us(), release=True), epoch),
                        durable=True,
                    )
            raise exc
        if machine.broken is not None:
            # The store failed under the runtime (a full disk): nothing about the handler is
            # decided. Give the lease back if the store allows it and report the store's error.
            with anyio.CancelScope(shield=True):
                await give_back(self.committer, invocation_id, epoch)
            raise machine.broken
        if any(isinstance(e, Restart) for e in leaves):
            return Outcome(id=invocation_id, status=Status.PENDING)  # always-replay: run it again from the top
        if not any(isinstance(e, (Exception, Suspend, ContinueAsNew)) for e in leaves):
            raise exc  # an unknown BaseException behaves like a crash: nothing is written, the lease lapses
        diverged = machine.divergence or next((e for e in leaves if isinstance(e, NondeterminismError)), None)
        if diverged is not None and machine.cancel_reason is not None:
            # Cancelling a diverged invocation abandons it: its journal ends where it diverged.
            machine.abandon_writes()
            return await self._finish(CancelledEntry(now_us(), machine.cancel_reason), Status.CANCELLED)
        if diverged is not None:
            record = await self.committer.submit(SetStatus(invocation_id, Transition(
                Status.DIVERGED, now_us(), divergence=str(diverged), release=True), epoch), durable=True)
            return Outcome.of(record)
        cont = next((e for e in leaves if isinstance(e, ContinueAsNew)), None)
        if cont is not None and not machine.cancel_delivered:
            return await self._continue_as_new(cont)
        suspends = [e for e in leaves if isinstance(e, Suspend)]
        # Compensation after a cancel may wait too (for an approval, a timer): it suspends
        # like any other wait, and ends `cancelled` once it finishes.
        if suspends and not any(isinstance(e, Cancelled) for e in leaves):
            # Branches may wait on different things (select over a promise and a timer): wake on any.
            names = list(dict.fromkeys(name for e in suspends for name in e.names()))
            wakes = [e.wake_at for e in suspends if e.wake_at is not None]
            return await self._finish(None, Status.SUSPENDED, waiting=names[0] if names else None,
                                      waiting_any=names[1:], wake_at=min(wakes, default=None))
        if machine.cancel_delivered and all(isinstance(e, (Cancelled, Suspend)) for e in leaves):
            return await self._finish(CancelledEntry(now_us(), machine.cancel_reason or ""), Status.CANCELLED)
        error = _error_info(leaves)
        return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)

    async def _continue_as_new(self, cont: ContinueAsNew) -> Outcome:
        ctx, epoch, invocation_id = self.ctx, self.epoch, self.ctx.invocation_id
        record = await self._read(self.store.require, invocation_id)
        fn = self._handler_for(record.handler)
        try:
            raw, _ = prepare_input(fn, cont.input)
        except (ValueError, UnencodableValue) as exc:
            error = ErrorInfo("TerminalError", f"continue_as_new: {exc}")
            return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)
        root, _, generation = invocation_id.rpartition("~")
        next_id = f"{root}~{int(generation) + 1}" if root and generation.isdigit() else f"{invocation_id}~1"
        at = now_us()
        input_digest = digest(bytes(raw))
        new = InvocationRecord(next_id, record.handler, Status.PENDING, at, at, record.key, input_digest,
                               parent=record.parent, queued_at=record.queued_at, continued_from=invocation_id)
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
                return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)
        return Outcome.of(finished)

    async def _finish(self, entry: Any, status: Status, **change: Any) -> Outcome:
        ctx = self.ctx
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
            return await self._finish(Failed(now_us(), error), Status.FAILED, error=error)
        except StoreError:
            # The final write failed (a full disk, with `exit` durability the whole journal at
            # once): nothing about the handler was recorded, so it goes back to `pending`, a
            # write small enough to fit where the journal did not, and the error is reported.
            with anyio.CancelScope(shield=True):
                try:
                    await self.committer.submit(SetStatus(ctx.invocation_id, Transition(
                        Status.PENDING, now_us(), release=True), self.epoch), durable=True)
                except JournalError:
                    pass
            raise
        return Outcome.of(record)


def _error_info(leaves: list[BaseException]) -> ErrorInfo:
    exc = next((e for e in leaves if not isinstance(e, Suspend)), leaves[0])
    if isinstance(exc, TerminalError):
        return ErrorInfo(exc.type_name, exc.message or str(exc), True)
    return ErrorInfo(type(exc).__qualname__, str(exc) or type(exc).__qualname__, True)
