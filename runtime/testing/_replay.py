"""`replay_journal`: check a recorded journal against the current code, without running anything.

The handler runs against a read-only context that serves each operation from the
journal through the `Replayer`, exactly as a resumed invocation would be served, except
that nothing is appended, no step function is called and no timer is waited for:

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

import datetime
import hashlib
import itertools
import random as _random
import uuid as _uuid
from contextvars import ContextVar
from typing import Any, Callable

import anyio
import anyio.lowlevel
import msgspec

from journal import (
    CancelReceived,
    Emitted,
    Entry,
    Now,
    Patched,
    Promise,
    Sleep,
    Step,
    Store,
    decode_entry,
    decode_value,
    digest,
    kind_of,
)

from .._context import Context
from .._guard import _handler_scope
from .._handlers import NO_INPUT, decode_input, load_handler
from .._invocation import _rebuild_error, _return_type, from_us
from .._replayer import WAIT, Replayer, describe
from ..errors import Cancelled, InvocationNotFound, NondeterminismError, PromiseRejected

# Scheduler rounds without any claim before a waiting operation (or a stopped check) gives
# up: replay does no I/O, so sibling branches make progress at every round if they can.
_QUIET_ROUNDS = 64

# The seq the current branch (task) claimed last, tagged with its context's serial; child
# tasks inherit their parent's value when spawned, which is how branches are told apart.
_branch_last: ContextVar[tuple[int, int]] = ContextVar("journal_replay_branch_last", default=(0, 0))
_serials = itertools.count(1)


class ReplayReport(msgspec.Struct, kw_only=True):
    """What a replay that found no divergence checked."""

    invocation_id: str
    handler: str
    checked: int  # recorded operations the code asked for in the same way
    finished: bool  # the handler ran to its end (else the check stopped where the journal ends)
    stopped_at: int | None = None  # the first seq that would have run live


class _Stop(BaseException):
    """Internal: a synchronous operation reached the end of the journal (not caught by `except Exception`)."""


class _ReplayContext(Context):
    """Serves a handler from its journal; never appends, never runs a step, never sleeps."""

    def __init__(self, invocation_id: str, replayer: Replayer) -> None:
        self._id = invocation_id
        self._serial = next(_serials)
        self._replayer = replayer
        self._random: _random.Random | None = None
        self._uuid_counter = 0
        self.checked = 0
        self.divergence: NondeterminismError | None = None
        self.stopped_at: int | None = None  # lowest seq where a branch reached the end of the journal
        self.settled = anyio.Event()  # a branch stopped or diverged: the check is ending

    @property
    def invocation_id(self) -> str:
        return self._id

    # The same derivations as the live context, so replayed handlers see the same values.
    def random(self) -> _random.Random:
        if self._random is None:
            seed = int.from_bytes(hashlib.blake2b(self._id.encode(), digest_size=8).digest(), "big")
            self._random = _random.Random(seed)
        return self._random

    def uuid(self) -> _uuid.UUID:
        self._uuid_counter += 1
        raw = hashlib.blake2b(f"{self._id}\x00{self._uuid_counter}".encode(), digest_size=16).digest()
        return _uuid.UUID(bytes=raw, version=4)

    def now(self) -> datetime.datetime:
        return from_us(self._claim_now(Now).at)

    def patched(self, change_id: str) -> bool:
        self._halted()
        last = self._last()
        if not self._replayer.exhausted:
            found = self._replayer.claim(last, Patched, change_id)
            if found is WAIT or found[1] is None:
                return False  # recorded before the change: the old path
            self._took(found[0])
            return True
        seq, _ = self._replayer.claim(last, Patched, change_id)  # every entry claimed: this would be live
        self._past_the_end(seq, Patched, change_id, None)
        raise _Stop()

    async def run(self, name: str, fn: Callable[..., Any], *args: Any, retry: Any = None, type: Any = None,
                  timeout: float | None = None, **kwargs: Any) -> Any:
        recorded: Step = await self._claim(Step, name, digest(name, args, kwargs))
        if recorded.error is not None:
            raise _rebuild_error(recorded.error)
        return decode_value(recorded.value, type if type is not None else _return_type(fn))

    async def sleep(self, seconds: float) -> None:
        await self._claim(Sleep)
        if isinstance(self._replayer.recorded(self._last() + 1), CancelReceived):
            await self._claim(CancelReceived)  # cancellation cut this sleep short when recorded

    async def promise(self, name: str, *, type: Any = None, timeout: float | None = None) -> Any:
        recorded: Promise = await self._claim(Promise, name)
        if recorded.error is not None:
            raise PromiseRejected(f"promise {name!r} of invocation {self._id!r} was rejected: {recorded.error}")
        return decode_value(recorded.value, type if type is not None else Any)

    async def emit(self, event: Any) -> None:
        await self._claim(Emitted)

    # -- claiming ------------------------------------------------------------------------------

    def _last(self) -> int:
        serial, last = _branch_last.get()
        return last if serial == self._serial else 0

    def _took(self, seq: int) -> None:
        _branch_last.set((self._serial, seq))
        self.checked += 1

    async def _claim(self, kind: type, name: str | None = None, call_digest: int | None = None) -> Any:
        self._halted()
        last = self._last()
        quiet = 0
        while True:
            found = self._replayer.claim(last, kind, name, call_digest)
            if found is not WAIT:
                break
            before = self._replayer.claims
            await anyio.lowlevel.checkpoint()
            quiet = 0 if self._replayer.claims != before else quiet + 1
            if quiet >= _QUIET_ROUNDS:
                raise self._diverged(self._replayer.stuck(last, kind, name, call_digest))
        seq, recorded = found
        if recorded is None:
            self._past_the_end(seq, kind, name, call_digest)
            await anyio.sleep_forever()  # this branch would run live from here: it stops
        return self._served(seq, recorded)

    def _claim_now(self, kind: type, name: str | None = None) -> Any:
        self._halted()
        last = self._last()
        found = self._replayer.claim(last, kind, name)
        if found is WAIT:
            raise self._diverged(self._replayer.stuck(last, kind, name))
        seq, recorded = found
        if recorded is None:
            self._past_the_end(seq, kind, name, None)
            raise _Stop()
        return self._served(seq, recorded)

    def _served(self, seq: int, recorded: Entry) -> Entry:
        self._took(seq)
        if isinstance(recorded, CancelReceived):
            raise Cancelled(f"invocation {self._id!r} was cancelled (at seq {seq})")
        return recorded

    def _past_the_end(self, seq: int, kind: type, name: str | None, call_digest: int | None) -> None:
        terminal = self._replayer.terminal()
        if terminal is not None:
            # The recorded run ended here, the code goes on: a call the journal never saw.
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
    ctx = _ReplayContext(invocation_id, replayer)
    ended: list[BaseException | None] = []

    async def drive(scope: anyio.CancelScope) -> None:
        token = _handler_scope.set(invocation_id)
        try:
            await (handler(ctx) if value is NO_INPUT else handler(ctx, value))
            ended.append(None)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # how the handler ended is judged below
            ended.append(exc)
        finally:
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
        raise outcome  # KeyboardInterrupt and the like: not the handler's result
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
    """Whether `exc` is a way the handler itself ended (an error, or the replay stopping it)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_handler_ending(e) for e in exc.exceptions)
    return isinstance(exc, (Exception, _Stop)) or isinstance(exc, anyio.get_cancelled_exc_class())
