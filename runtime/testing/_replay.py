"""`replay_journal`: check a recorded journal against the current code, without running anything.

The handler runs against a read-only context that serves each operation from the
journal through the `Replayer`. Nothing is appended and no step function is called:

- an operation the journal holds at its seq (same kind, name and argument digest)
  returns the recorded outcome, as a live replay would;
- an operation that differs from the recorded one raises `NondeterminismError` (the
  same report `journal resume` would give), even if the handler catches it;
- an operation past the end of an unfinished journal stops the check there: that is
  where live execution would begin;
- a handler that returns before reaching every recorded operation diverged too.

Use it in tests against journals recorded by earlier versions of the code (golden
journals), and from the shell as `journal replay ID`.
"""

from __future__ import annotations

import datetime
import hashlib
import random as _random
import uuid as _uuid
from typing import Any, Callable

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
)

from .._context import Context
from .._guard import _handler_scope
from .._handlers import NO_INPUT, decode_input, load_handler
from .._invocation import _rebuild_error, _return_type, from_us
from .._replayer import Replayer
from ..errors import Cancelled, InvocationNotFound, NondeterminismError, PromiseRejected


class ReplayReport(msgspec.Struct, kw_only=True):
    """What a replay that found no divergence checked."""

    invocation_id: str
    handler: str
    checked: int  # recorded operations the code asked for, in the same way
    finished: bool  # the handler ran to its end (else it reached the end of the journal)
    stopped_at: int | None = None  # the seq the check stopped at when the journal ran out


class _Stop(BaseException):
    """Internal: the journal holds nothing more; stop the handler (BaseException: not caught by handlers)."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class _ReplayContext(Context):
    """Serves a handler from its journal; never appends, never runs a step."""

    def __init__(self, invocation_id: str, replayer: Replayer) -> None:
        self._id = invocation_id
        self._replayer = replayer
        self._random: _random.Random | None = None
        self._uuid_counter = 0
        self.checked = 0
        self.divergence: NondeterminismError | None = None
        self.stop: _Stop | None = None

    @property
    def invocation_id(self) -> str:
        return self._id

    # Same derivations as the live context, so replayed handlers see the same values.
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
        return from_us(self._recorded(Now).at)

    def patched(self, change_id: str) -> bool:
        self._halted()
        entries = self._replayer._entries
        recorded = entries.get(self._replayer.next_seq)
        if isinstance(recorded, Patched) and recorded.name == change_id:
            self._replayer.take()
            self.checked += 1
            return True
        if self._replayer.replaying:
            return False  # recorded before the change: the old path
        raise self._stopped(self._replayer.next_seq)

    async def run(self, name: str, fn: Callable[..., Any], *args: Any, retry: Any = None, type: Any = None,
                  timeout: float | None = None, **kwargs: Any) -> Any:
        recorded: Step = self._recorded(Step, name, digest(name, args, kwargs))
        if recorded.error is not None:
            raise _rebuild_error(recorded.error)
        return decode_value(recorded.value, type if type is not None else _return_type(fn))

    async def sleep(self, seconds: float) -> None:
        self._recorded(Sleep)
        if isinstance(self._replayer._entries.get(self._replayer.next_seq), CancelReceived):
            self._cancel(self._replayer.take())

    async def promise(self, name: str, *, type: Any = None, timeout: float | None = None) -> Any:
        recorded: Promise = self._recorded(Promise, name)
        if recorded.error is not None:
            raise PromiseRejected(f"promise {name!r} of invocation {self._id!r} was rejected: {recorded.error}")
        return decode_value(recorded.value, type if type is not None else Any)

    async def emit(self, event: Any) -> None:
        self._recorded(Emitted)

    # -- internals -------------------------------------------------------------------------

    def _recorded(self, kind: type, name: str | None = None, call_digest: int | None = None) -> Any:
        self._halted()
        seq = self._replayer.take()
        try:
            recorded = self._replayer.match(seq, kind, name, call_digest)
        except NondeterminismError as exc:
            self.divergence = self.divergence or exc
            raise
        if recorded is None:
            raise self._stopped(seq)
        if isinstance(recorded, CancelReceived):
            self._cancel(seq)
        self.checked += 1
        return recorded

    def _cancel(self, seq: int) -> None:
        self.checked += 1
        raise Cancelled(f"invocation {self._id!r} was cancelled (at seq {seq})")

    def _stopped(self, seq: int) -> _Stop:
        self.stop = self.stop or _Stop(seq)
        return self.stop

    def _halted(self) -> None:
        # After a divergence or the end of the journal, nothing more is served, even to a
        # handler that caught the error and carried on.
        if self.divergence is not None:
            raise self.divergence
        if self.stop is not None:
            raise self.stop


async def replay_journal(handler: Callable[..., Any] | str | None, store: Store, invocation_id: str) -> ReplayReport:
    """Replay `invocation_id`'s journal in `store` against `handler` (default: the recorded one).

    Read-only: never appends, never runs a step function, never sleeps. Raises
    `NondeterminismError` (with the seq, what the journal holds and what the code asked
    for) if the code no longer makes the recorded calls; otherwise returns a `ReplayReport`.
    `handler` may be the function, a handler path, or None for the path in entry 0.
    """
    record = store.get(invocation_id)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r} in {store.path or 'this store'}")
    entries: dict[int, Entry] = {
        seq: decode_entry(data, invocation_id=invocation_id, seq=seq) for seq, data in store.entries(invocation_id)
    }
    replayer = Replayer(invocation_id, entries)
    started = replayer.started()
    path = handler if isinstance(handler, str) else started.handler if handler is None else None
    fn = load_handler(path) if path is not None else handler
    ctx = _ReplayContext(invocation_id, replayer)
    scope = _handler_scope.set(invocation_id)
    ended = False
    try:
        value = decode_input(fn, started.input)
        try:
            await (fn(ctx) if value is NO_INPUT else fn(ctx, value))
        except BaseException as exc:  # the handler's own outcome is not what is checked
            if ctx.divergence is None and ctx.stop is None and not _is_handler_outcome(exc):
                raise
        ended = ctx.stop is None and ctx.divergence is None
        if ctx.divergence is not None:
            raise ctx.divergence
        if ended:
            replayer.check_finished()
    finally:
        _handler_scope.reset(scope)
    return ReplayReport(
        invocation_id=invocation_id,
        handler=started.handler,
        checked=ctx.checked,
        finished=ended,
        stopped_at=None if ctx.stop is None else ctx.stop.seq,
    )


def _is_handler_outcome(exc: BaseException) -> bool:
    """Whether `exc` is a way a handler can end (an error), not an interruption of the check."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_handler_outcome(e) for e in exc.exceptions)
    return isinstance(exc, Exception)
