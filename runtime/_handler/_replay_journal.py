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

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from journal import Committer, Durability, Entry, Store, decode_entry
from journal.errors import JournalError

from .._base._step_info import _context, _current
from .._replay._branches import count_branches
from .._replay._branches import install as install_branches
from .._replay._machine import EndOfJournal
from .._replay._replayer import Replayer
from .._replay._suspend import ContinueAsNew, Suspend
from ..errors import InvocationNotFound
from ._children import child_input
from ._guard import _handler_scope
from ._handlers import NO_INPUT, decode_input, load_handler, load_recorded
from ._invocation import InvocationContext

# The check ends as soon as every live branch of the handler has stopped for good
# (`Machine.all_parked`). A branch that is neither stopped nor finished may be waiting for
# something outside the journal: an event that a stopped sibling would have set after its
# live step waits for ever, and nothing tells such a wait from one a running sibling is
# about to end. Only then does a count bound the check: this many scheduler rounds without
# a claim (replay does no I/O, so branches that can make progress do so at every round).
_QUIET_ROUNDS = 64


class ReplayReport(msgspec.Struct, kw_only=True):
    """What a replay that found no divergence checked."""

    invocation_id: str
    handler: str
    checked: int  # recorded operations the code asked for in the same way
    finished: bool  # the handler ran to its end (else the check stopped where the journal ends)
    stopped_at: int | None = None  # the first seq that would have run live


def _refused(what: str) -> JournalError:
    return JournalError(f"replay_journal must not write, yet the handler's context tried to {what}; report it as a bug")


class _NoWrites:
    """Stands where the committer goes: replay never reaches a write, and this makes sure."""

    durability = Durability.SYNC
    commits_inline = False

    # The turns of the loop a live run's steps take (`Committer.turn`), so a long replay stops
    # when cancelled too; nothing here gathers a batch.
    _filling = None
    turn_due = Committer.turn_due
    turn = Committer.turn

    def __init__(self, store: Store) -> None:
        self.store = store
        self.turn_by = 0.0

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

    child_input = staticmethod(child_input)

    async def run_child(self, child_id: str) -> None:
        pass

    async def create_child(self, *args: Any, **kwargs: Any) -> None:
        raise _refused("start a child invocation")


async def replay_journal(handler: Callable[..., Any] | str | None, store: Store, invocation_id: str) -> ReplayReport:
    """Replay `invocation_id`'s journal in `store` against `handler` (default: the recorded one).

    Read-only: never appends, never runs a step function, never sleeps. Raises
    `NondeterminismError` (the seq, what the journal holds and what the code asked for)
    if the code no longer makes the recorded calls; otherwise returns a `ReplayReport`.
    `handler` is the function, a handler path, or None for the path entry 0 records.
    """
    report, _ = await replay_outcome(handler, store, invocation_id)
    return report


async def replay_outcome(handler: Callable[..., Any] | str | None, store: Store,
                         invocation_id: str) -> tuple[ReplayReport, BaseException | None]:
    """`replay_journal`, and how the handler ended if it did (an exception it raised, such as
    a recorded value that does not fit the type the code reads it as), else None."""
    record = store.get(invocation_id)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r} in {store.path or 'this store'}")
    entries: dict[int, Entry] = {
        seq: decode_entry(data, invocation_id=invocation_id, seq=seq) for seq, data in store.entries(invocation_id)
    }
    replayer = Replayer(invocation_id, entries)
    started = replayer.started()
    if handler is None or isinstance(handler, str):
        handler = load_handler(handler) if handler else load_recorded(started.handler)
    value = decode_input(handler, started.input)
    # The ordinary context, driven in replay-only mode: an operation with nothing recorded
    # stops its branch (`EndOfJournal`) instead of running, so nothing is ever written.
    ctx = InvocationContext(
        invocation_id=invocation_id, replayer=replayer, committer=_NoWrites(store), epoch=0,  # type: ignore[arg-type]
        max_entry_bytes=store.max_entry_bytes, inline_sleep_limit=0.0, key=record.key,
        spawner=_NoChildren(), replay_only=True,
    )
    machine = ctx.machine
    count_branches(machine)
    settled = anyio.Event()  # a branch stopped or diverged: the check is ending
    machine.on_halt = settled.set
    ended: list[BaseException | None] = []

    async def drive(scope: anyio.CancelScope) -> None:
        token = _handler_scope.set(invocation_id)
        outer_context = _context.set(ctx)
        outer_step = _current.set(None)  # replayed from inside a step, it is still handler code
        try:
            install_branches()
            machine.begin()
            await (handler(ctx) if value is NO_INPUT else handler(ctx, value))
            ended.append(None)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # how the handler ended is judged below
            ended.append(exc)
        finally:
            _current.reset(outer_step)
            _context.reset(outer_context)
            _handler_scope.reset(token)
            scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        # Once a branch stopped at the end of the journal (or diverged), let the others run
        # until every one of them has stopped too, then end the check.
        await settled.wait()
        quiet = 0
        while not machine.all_parked and quiet < _QUIET_ROUNDS and machine.divergence is None:
            before = machine.claims
            await anyio.lowlevel.checkpoint()
            quiet = 0 if machine.claims != before else quiet + 1
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)

    if machine.divergence is not None:
        raise machine.divergence
    outcome = ended[0] if ended else None
    if outcome is not None and not _handler_ending(outcome):
        raise outcome  # KeyboardInterrupt and the like: not the handler's doing
    if isinstance(outcome, Suspend) and machine.stopped_at is None:
        machine.stopped_at = max(entries) + 1  # a recorded timer is still to fire: the journal ends there
    stopped = machine.stopped_at is not None or not ended
    if not stopped:
        replayer.check_finished()  # the handler ended: every recorded operation must have been reached
    return ReplayReport(
        invocation_id=invocation_id,
        handler=started.handler,
        checked=machine.checked,
        finished=not stopped,
        stopped_at=machine.stopped_at,
    ), outcome


def _handler_ending(exc: BaseException) -> bool:
    """Whether `exc` is a way the handler itself ended (an error, a wait, continue-as-new, a stop)."""
    endings = (Exception, EndOfJournal, Suspend, ContinueAsNew, anyio.get_cancelled_exc_class())
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(endings)[1] is None  # nothing else in the group
    return isinstance(exc, endings)
