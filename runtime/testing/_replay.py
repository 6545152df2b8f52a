"""`replay_journal`: check a recorded journal against the current code, without running anything.

The handler runs against the ordinary invocation context, fed by the `Replayer` exactly as
a resumed invocation would be, with one difference: every operation that would go live
(the point where the journal holds nothing more for it) stops instead. So nothing is
appended, no step function is called, no child invocation is started and no timer is
waited for:

- an operation the journal holds (same kind, name and argument digest, on the same
  branch) returns the recorded outcome, or raises the recorded error;
- an operation the journal contradicts raises `NondeterminismError`, the report that
  `journal resume` would give, even if the handler catches it and carries on;
- an operation past the end of an unfinished journal is where live execution would
  begin: that branch stops there, and the check ends once no other branch makes progress;
- past the end of a finished journal (completed, failed, cancelled), or when the handler
  returns before reaching every recorded operation, the code diverged too.

Use it in tests against journals recorded by earlier versions of the code (golden
journals), and from the shell as `journal replay ID`.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
import anyio.lowlevel
import msgspec

from journal import Durability, Entry, Store, decode_entry, kind_of
from journal.errors import JournalError

from .._engine import Engine
from .._guard import _handler_scope
from .._step_info import _current
from .._handlers import NO_INPUT, decode_input, load_handler
from .._composition import ContinueAsNew
from .._invocation import InvocationContext
from .._suspend import Suspend
from .._replayer import Replayer, describe
from ..errors import InvocationNotFound, NondeterminismError

# Scheduler rounds without any claim before a stopped check ends: replay does no I/O, so
# branches that can still make progress do so at every round.
_QUIET_ROUNDS = 64


class ReplayReport(msgspec.Struct, kw_only=True):
    """What a replay that found no divergence checked."""

    invocation_id: str
    handler: str
    checked: int  # recorded operations the code asked for in the same way
    finished: bool  # the handler ran to its end (else the check stopped where the journal ends)
    stopped_at: int | None = None  # the first seq that would have run live


class _Stop(BaseException):
    """Internal: a synchronous operation reached the end of the journal (not caught by `except Exception`)."""


def _refused(what: str) -> JournalError:
    return JournalError(f"replay_journal must not write, yet the handler's context tried to {what}; report it as a bug")


class _NoWrites:
    """Stands where the committer goes: replay never reaches a write, and this makes sure."""

    durability = Durability.SYNC
    commits_inline = False

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def submit(self, op: Any, *, durable: bool | None = None) -> Any:
        raise _refused(f"commit {type(op).__name__}")

    async def flush(self) -> None:
        pass


class _NoChildren:
    """Stands where the engine goes for `ctx.call`/`ctx.send`: children are neither created nor run.

    Their ids and results are in the parent's journal; only the call's digest is computed,
    the way the engine computes it.
    """

    def __init__(self, store: Store) -> None:
        self._child_input = Engine(store)._child_input

    async def _run_child(self, child_id: str) -> None:
        pass

    async def _create_child(self, *args: Any, **kwargs: Any) -> None:
        raise _refused("start a child invocation")


class _ReplayContext(InvocationContext):
    """The live context, except that an operation with nothing recorded stops instead of running."""

    def __init__(self, store: Store, invocation_id: str, replayer: Replayer, key: str | None) -> None:
        super().__init__(
            invocation_id=invocation_id, replayer=replayer, committer=_NoWrites(store), epoch=0,  # type: ignore[arg-type]
            max_entry_bytes=store.max_entry_bytes, inline_sleep_limit=0.0, divergence_wait=0.1, key=key,
            spawner=_NoChildren(store),
        )
        self.checked = 0
        self.divergence: NondeterminismError | None = None
        self.stopped_at: int | None = None  # lowest seq where a branch reached the end of the journal
        self.settled = anyio.Event()  # a branch stopped or diverged: the check is ending

    def _claim_at_once(self, kind: type, name: str | None = None, call_digest: int | None = None) -> None:
        return None  # every claim goes through `_claim` below, which checks it

    async def _claim(self, kind: type, name: str | None = None, call_digest: int | None = None) -> tuple[int, int, Any]:
        self._halted()
        try:
            seq, last, recorded = await super()._claim(kind, name, call_digest)
        except NondeterminismError as exc:
            raise self._diverged(exc) from None
        if recorded is None:
            self._past_the_end(seq, kind, name, call_digest)
            await anyio.sleep_forever()  # this branch would run live from here: it stops
        self.checked += 1
        return seq, last, recorded

    def _claim_now(self, kind: type, name: str | None = None) -> tuple[int, int, Any]:
        self._halted()
        try:
            seq, last, recorded = super()._claim_now(kind, name)
        except NondeterminismError as exc:
            raise self._diverged(exc) from None
        if recorded is None:
            self._past_the_end(seq, kind, name, None)
            raise _Stop()
        self.checked += 1
        return seq, last, recorded

    def _past_the_end(self, seq: int, kind: type, name: str | None, call_digest: int | None) -> None:
        terminal = self._replayer.terminal()
        if terminal is not None:
            # The recorded run ended there, the code goes on: a call the journal never saw.
            raise self._diverged(self._replayer.divergence(
                seq, f"{kind_of(terminal)} (the recorded run ended there)",
                describe(kind.__struct_config__.tag, name, call_digest),
                [f"the code makes a call after the point where the recorded invocation {kind_of(terminal)}"],
            ))
        self.stopped_at = seq if self.stopped_at is None else min(self.stopped_at, seq)
        self.settled.set()

    def _diverged(self, exc: NondeterminismError) -> NondeterminismError:
        self.divergence = self.divergence or exc
        self.settled.set()
        return self.divergence

    def _halted(self) -> None:
        # After a divergence nothing more is served, even to a handler that caught it.
        if self.divergence is not None:
            raise self.divergence


async def replay_journal(handler: Callable[..., Any] | str | None, store: Store, invocation_id: str) -> ReplayReport:
    """Replay `invocation_id`'s journal in `store` against `handler` (default: the recorded one).

    Read-only: never appends, never runs a step function, never sleeps. Raises
    `NondeterminismError` (the seq, what the journal holds and what the code asked for)
    if the code no longer makes the recorded calls; otherwise returns a `ReplayReport`.
    `handler` is the function, a handler path, or None for the path entry 0 records.
    """
    record = store.get(invocation_id)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r} in {store.path or 'this store'}")
    entries: dict[int, Entry] = {
        seq: decode_entry(data, invocation_id=invocation_id, seq=seq) for seq, data in store.entries(invocation_id)
    }
    replayer = Replayer(invocation_id, entries)
    started = replayer.started()
    if handler is None or isinstance(handler, str):
        handler = load_handler(handler or started.handler)
    value = decode_input(handler, started.input)
    ctx = _ReplayContext(store, invocation_id, replayer, record.key)
    ended: list[BaseException | None] = []

    async def drive(scope: anyio.CancelScope) -> None:
        token = _handler_scope.set(invocation_id)
        outer_step = _current.set(None)  # replayed from inside a step, it is still handler code
        try:
            await (handler(ctx) if value is NO_INPUT else handler(ctx, value))
            ended.append(None)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # how the handler ended is judged below
            ended.append(exc)
        finally:
            _current.reset(outer_step)
            _handler_scope.reset(token)
            scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        # Once a branch stopped at the end of the journal (or diverged), let the others run
        # until nothing more is claimed, then end the check.
        await ctx.settled.wait()
        quiet = 0
        while quiet < _QUIET_ROUNDS and ctx.divergence is None:
            before = replayer.claims
            await anyio.lowlevel.checkpoint()
            quiet = 0 if replayer.claims != before else quiet + 1
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)

    if ctx.divergence is not None:
        raise ctx.divergence
    outcome = ended[0] if ended else None
    if outcome is not None and not _handler_ending(outcome):
        raise outcome  # KeyboardInterrupt and the like: not the handler's doing
    if isinstance(outcome, Suspend) and ctx.stopped_at is None:
        ctx.stopped_at = max(entries) + 1  # a recorded timer is still to fire: the journal ends there
    stopped = ctx.stopped_at is not None or not ended
    if not stopped:
        replayer.check_finished()  # the handler ended: every recorded operation must have been reached
    return ReplayReport(
        invocation_id=invocation_id,
        handler=started.handler,
        checked=ctx.checked,
        finished=not stopped,
        stopped_at=ctx.stopped_at,
    )


def _handler_ending(exc: BaseException) -> bool:
    """Whether `exc` is a way the handler itself ended (an error, a wait, continue-as-new, a stop)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_handler_ending(e) for e in exc.exceptions)
    return isinstance(exc, (Exception, _Stop, Suspend, ContinueAsNew, anyio.get_cancelled_exc_class()))
