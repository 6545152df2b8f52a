"""`ctx.state`: durable state shared by the invocations of one key (a conversation thread).

Invocations of a key run one at a time, so state needs no locking. Reads are journaled,
so replay sees what the first execution saw; changes are journaled and applied to the
key's state in the same transaction as their entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import msgspec

from journal import (
    NIL,
    PRIOR_SET,
    PRIOR_UNSET,
    StateGot,
    StateKeys,
    StateSet,
    UnencodableValue,
    decode_value,
    encode_value,
    now_us,
)

from ..errors import TerminalError

T = TypeVar("T")
D = TypeVar("D")

if TYPE_CHECKING:
    from typing import Protocol

    from typing_extensions import TypeForm  # PEP 747: `type=` takes any type expression

    from journal import Committer, Store

    from .._replay._machine import Machine
    from .._replay._replayer import R

    class _Shell(Protocol):
        """What `State` needs from the context it belongs to (see runtime/_handler/_invocation.py)."""

        machine: Machine
        _store: Store
        _committer: Committer

        async def _claim(self, kind: type[R], name: str | None = None) -> tuple[int, int, R | None]: ...
        async def _commit(self, seq: int, entry: Any) -> None: ...
        async def _deliver_cancel(self, seq: int, prev: int) -> None: ...
        def _deliver_cancel_sync(self, seq: int, prev: int) -> None: ...

class State:
    """The state of the invocation's key. Get it as `ctx.state`."""

    def __init__(self, ctx: _Shell, key: str | None) -> None:
        self._ctx = ctx
        self._key = key
        self._overlay: dict[str, bytes | None] = {}  # changes made by this execution so far
        # The key's state as this execution began, read off the event loop for a store that
        # waits on the network: `set` is synchronous. Only this execution changes it meanwhile
        # (a key's invocations run one at a time), and its changes are in the overlay.
        self._snapshot: dict[str, bytes] | None = None

    def preload(self, values: dict[str, bytes]) -> None:
        self._snapshot = values

    def _require_key(self, what: str) -> str:
        if self._key is None:
            raise TerminalError(
                f"ctx.state.{what}() needs a key: start the invocation with a key "
                "(`journal run --key THREAD ...` or `engine.run(..., key=...)`)"
            )
        return self._key

    def _current(self, name: str) -> bytes | None:
        if name in self._overlay:
            return self._overlay[name]
        if self._snapshot is not None:
            return self._snapshot.get(name)
        return self._ctx._store.state(self._require_key("get")).get(name)

    @overload
    async def get(self, name: str, *, type: TypeForm[T]) -> T | None: ...
    @overload
    async def get(self, name: str, default: D, *, type: TypeForm[T]) -> T | D: ...
    @overload
    async def get(self, name: str, default: Any = None, *, type: None = None) -> Any: ...

    async def get(self, name: str, default: Any = None, *, type: Any = None) -> Any:
        """The value of `name`, decoded as `type`, or `default` if it is not set."""
        self._require_key("get")
        ctx = self._ctx
        seq, prev, recorded = await ctx._claim(StateGot, name)
        if recorded is None:
            await ctx._deliver_cancel(seq, prev)
            raw = self._overlay[name] if name in self._overlay else (
                await ctx._committer.read(ctx._store.state, self._require_key("get"))).get(name)
            recorded = StateGot(name, now_us(), msgspec.Raw(raw) if raw is not None else NIL, raw is not None, prev)
            await ctx._commit(seq, recorded)
        return decode_value(recorded.value, type) if recorded.found else default

    async def keys(self) -> list[str]:
        """The names that are set, sorted."""
        key = self._require_key("keys")
        ctx = self._ctx
        seq, prev, recorded = await ctx._claim(StateKeys)
        if recorded is None:
            await ctx._deliver_cancel(seq, prev)
            names = set(await ctx._committer.read(ctx._store.state, key))
            names |= {n for n, v in self._overlay.items() if v is not None}
            names -= {n for n, v in self._overlay.items() if v is None}
            recorded = StateKeys(now_us(), sorted(names), prev)
            await ctx._commit(seq, recorded)
        return list(recorded.names)

    def set(self, name: str, value: Any) -> None:
        """Set `name` to `value` (journaled; applied with the next journal write)."""
        self._change(name, value, cleared=False)

    def clear(self, name: str) -> None:
        """Remove `name`."""
        self._change(name, None, cleared=True)

    def update(self, name: str, value: Any, *, reducer: Callable[[Any, Any], Any], default: Any = None,
               type: Any = None) -> Any:
        """Set `name` to `reducer(current, value)` and return it, e.g. append a message to a list."""
        return self._change(name, value, cleared=False, reducer=(reducer, default, type))

    def _change(self, name: str, value: Any, *, cleared: bool, reducer: Any = None) -> Any:
        self._require_key("set")
        ctx = self._ctx
        seq, prev, recorded = ctx.machine.claim(StateSet, name)
        type_ = reducer[2] if reducer is not None else None
        if recorded is not None:  # replay: the change is already in the store
            self._overlay[name] = None if recorded.cleared else bytes(recorded.value)
            return None if recorded.cleared else decode_value(recorded.value, type_)
        ctx._deliver_cancel_sync(seq, prev)
        first = name not in self._overlay
        raw = self._current(name) if first or reducer is not None else None
        if reducer is not None:
            fn, default, _ = reducer
            value = fn(decode_value(raw, type_) if raw is not None else default, value)
        raw_value: bytes | None = None
        if not cleared:
            try:
                raw_value = bytes(encode_value(value))
            except UnencodableValue as exc:
                raise TerminalError(f"ctx.state.set({name!r}) at seq {seq}: {exc}") from None
        stored = NIL if raw_value is None else msgspec.Raw(raw_value)
        if first:  # what it was before this invocation: `cancel --rollback` restores it
            change = StateSet(name, now_us(), stored, cleared, prev, PRIOR_SET if raw is not None else PRIOR_UNSET,
                              NIL if raw is None else msgspec.Raw(raw))
            ctx.machine.note_prior(seq, change)
        else:
            change = StateSet(name, now_us(), stored, cleared, prev)
        ctx.machine.buffer(seq, change)
        ctx.machine.buffer_state(name, raw_value)
        self._overlay[name] = raw_value
        return None if raw_value is None else decode_value(raw_value, type_)

