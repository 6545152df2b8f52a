"""`LimitTable`: the limits of one store, as every process sharing the store sees them.

A backend gives a table its transactions (`_transact`, `_read`) over the tables of
`_logic.LIMIT_TABLES`; what happens inside them is `_logic.py`, the same for all. Acquiring and
releasing are not journal writes: they are never fsynced (a crash frees what the crashed
process held, through the owner-death rules), and an LMDB store keeps them apart from the
journal's writer lock, in an environment of their own.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from ..kv._rules import Txn
from . import _logic
from ._logic import Alive, Request, local_alive
from ._model import Blocked, Granted, LimitRule, LimitView, check_name, check_rule

T = TypeVar("T")

# Seconds a process goes on using the rules it read: a rule changed elsewhere is obeyed within
# this (DESIGN: within a second), and an acquisition reads no rule from the store meanwhile.
RULES_FOR = 0.5


def now_us() -> int:
    return time.time_ns() // 1000


class LimitTable(abc.ABC):
    """The rules and counters of limits in one store (`Store.limits()`).

    Each call is one transaction. `acquire` either takes a unit of every limited name of a
    request or takes none and leaves the request waiting in line (it must then be asked again,
    or `withdraw`n); `release` gives them back."""

    # Whether calls wait on the network (the runtime then makes them from a thread).
    blocking: bool = False

    @abc.abstractmethod
    def _transact(self, work: Callable[[Txn], T], *, durable: bool = False) -> T:
        """`work` in one write transaction; `durable` for rule changes (made durable before
        returning), never for acquiring and releasing."""

    @abc.abstractmethod
    def _read(self, work: Callable[[Txn], T]) -> T: ...

    _known: tuple[float, dict[str, LimitRule]] | None = None

    def _alive(self) -> Alive:
        return local_alive

    def _rules(self) -> dict[str, LimitRule]:
        """The rules, as read at most `RULES_FOR` seconds ago (or changed here since)."""
        known = self._known
        if known is None or time.monotonic() - known[0] > RULES_FOR:
            known = self._known = (time.monotonic(), self._read(_logic.rules))
        return known[1]

    # -- rules ----------------------------------------------------------------------------------

    def set(self, name: str, rule: LimitRule) -> None:
        """Set the rule of `name` (or of every `PREFIX:<anything>` for `PREFIX:*`): obeyed by
        every process sharing the store from their next acquisition."""
        check_name(name, rule=True)
        check_rule(rule)
        self._transact(lambda txn: _logic.set_rule(txn, name, rule), durable=True)
        self._known = None

    def remove(self, name: str) -> bool:
        """Remove the rule of `name`; whether there was one. Its waiters go on at once."""

        def work(txn: Txn) -> bool:
            found = _logic.remove_rule(txn, name)
            if found and not name.endswith(":*"):
                _logic.forget_name(txn, name)
            return found

        try:
            return self._transact(work, durable=True)
        finally:
            self._known = None

    def rules(self) -> dict[str, LimitRule]:
        return self._read(_logic.rules)

    def rule_for(self, name: str) -> LimitRule | None:
        return self._read(lambda txn: _logic.rule_for(txn, name))

    def ls(self) -> list[LimitView]:
        now = now_us()
        return self._read(lambda txn: _logic.views(txn, now))

    def waiting_for(self, label: str) -> list[str]:
        now = now_us()
        return self._read(lambda txn: _logic.waiting_for(txn, label, now))

    # -- holding --------------------------------------------------------------------------------

    def acquire(self, request: Request) -> Granted | Blocked:
        known = self._rules()
        now = now_us()
        alive = self._alive()
        return self._transact(lambda txn: _logic.acquire(txn, request, now, alive, known))

    def release(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                claim: int | None = None) -> None:
        """Give back `hid`'s units; with `claim`, only if the hold is still that claim's (`Holder.claim`)."""
        known = self._rules() if used_tokens is not None else None
        now = now_us()
        self._transact(lambda txn: _logic.release(txn, hid, names, used_tokens, now, known, claim))

    def withdraw(self, hid: str, names: tuple[str, ...]) -> None:
        """A waiter stops waiting (cancelled): it leaves every line it stood in."""
        self.release(hid, names, None)

    async def acquire_async(self, request: Request) -> Granted | Blocked | None:
        """`acquire` from the event loop without blocking it, where the backend can (None: it
        cannot this time, call `acquire`)."""
        return None

    async def release_async(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                            awaited: bool = False, claim: int | None = None) -> bool:
        """`release` from the event loop without blocking it, where the backend can (whether it did).
        `awaited`: someone in this process waits for a unit (a backend that delays releases does not)."""
        return False

    async def settle(self) -> None:
        """Until the releases `release_async` left on their way are done."""
        return None

    def pause(self, names: tuple[str, ...], until_us: int) -> list[str]:
        return self._transact(lambda txn: _logic.pause(txn, names, until_us))

    def close(self) -> None:
        """Let go of what the table opened (the store closes it)."""
        return None


class MemoryLimits(LimitTable):
    """The limits of a store held in this process's memory."""

    def __init__(self) -> None:
        from ..backends.in_memory import _MemoryTxn, _Table

        self._tables = {name: _Table() for name in _logic.LIMIT_TABLES}
        self._txn = _MemoryTxn
        self._lock = threading.Lock()

    def _transact(self, work: Callable[[Txn], T], *, durable: bool = False) -> T:
        with self._lock:
            return work(self._txn(self._tables))

    def _read(self, work: Callable[[Txn], T]) -> T:
        with self._lock:
            return work(self._txn(self._tables))
