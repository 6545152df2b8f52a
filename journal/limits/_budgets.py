"""Budgets kept in the store: an allowance of tokens and cost for a scope (`handler:NAME`,
`key:KEY`, `tag:K=V` or a limit name), per run, per UTC hour, day or month, or in total, and
what the steps charged to it.

Both live in the store's durable tables (`journal/_tables.py`), never in the unsynced limits'
environment: a budget is money. A step's charge is one row keyed by the budget's window, the
invocation and the step's seq, written durably before the step's own entry is committed. A
process killed between the two runs the step again, which writes the same key: the charge is
replaced, never counted twice, and never lost (it was on disk before the step could be seen
done). What was used in a window is the sum of its rows."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

import msgspec

from .._tables import TableDelete, TableDeletePrefix, TablePut
from ._model import LimitError, check_name

RULES = "budgets"
USE = "budget_use"
PERIODS = ("run", "hour", "day", "month")
SCOPE_KINDS = ("handler:", "key:", "tag:")
PROMISE_PREFIX = "budget:"


class BudgetRule(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The allowance of a scope. Fields only ever appended, with defaults: rules are kept in the store."""

    tokens: int | None = None
    cost: float | None = None
    per: str | None = None  # run, hour, day, month; None: a total


class BudgetView(msgspec.Struct, frozen=True, gc=False):
    """A budget as `journal budget ls --json` shows it: what was used in its current window
    (every run's together for `--per run`)."""

    scope: str
    tokens: int | None
    cost: float | None
    per: str | None
    used_tokens: int
    used_cost: float
    window_start: int | None  # µs since the epoch, UTC; None for a total or `--per run`

    def to_json(self) -> dict[str, Any]:
        start = None if self.window_start is None else datetime.datetime.fromtimestamp(
            self.window_start / 1e6, datetime.UTC).isoformat()
        return {"scope": self.scope, "tokens": self.tokens, "cost": self.cost, "per": self.per,
                "used_tokens": self.used_tokens, "used_cost": round(self.used_cost, 9), "window_start": start}


def check_scope(scope: str) -> str:
    """`scope` if it names what a budget can cover, else a `LimitError` saying what can."""
    if not isinstance(scope, str) or not scope or "\0" in scope or len(scope.encode()) > 200:
        raise LimitError(f"a budget scope is handler:NAME, key:KEY, tag:K=V or a limit name (at most 200 bytes), "
                         f"got {scope!r}")
    for kind in SCOPE_KINDS:
        if scope.startswith(kind):
            rest = scope[len(kind):]
            if not rest or (kind == "tag:" and ("=" not in rest or rest.startswith("="))):
                raise LimitError(f"budget scope {scope!r} names nothing: write {kind}"
                                 f"{'K=V' if kind == 'tag:' else 'NAME'}")
            return scope
    if scope.endswith(":*"):
        raise LimitError(f"a budget covers one limit name, not a PREFIX:* rule: got {scope!r}")
    check_name(scope)
    return scope


def check_rule(rule: BudgetRule) -> BudgetRule:
    if rule.tokens is None and rule.cost is None:
        raise LimitError("a budget needs an allowance: --tokens N, --cost USD, or both")
    if rule.tokens is not None and (not isinstance(rule.tokens, int) or isinstance(rule.tokens, bool)
                                    or rule.tokens < 0):
        raise LimitError(f"a budget's tokens are a whole number, 0 or more, got {rule.tokens!r}")
    if rule.cost is not None and (isinstance(rule.cost, bool) or not isinstance(rule.cost, (int, float))
                                  or rule.cost < 0):
        raise LimitError(f"a budget's cost is an amount in USD, 0 or more, got {rule.cost!r}")
    if rule.per is not None and rule.per not in PERIODS:
        raise LimitError(f"--per takes run, hour, day or month (or nothing, for a total), got {rule.per!r}")
    return rule


def window_start(per: str | None, now_us: int) -> int | None:
    """The start (µs, UTC) of the window of `per` that holds `now_us`; None for a total or a run."""
    if per not in ("hour", "day", "month"):
        return None
    now = datetime.datetime.fromtimestamp(now_us / 1e6, datetime.UTC)
    if per == "hour":
        start = now.replace(minute=0, second=0, microsecond=0)
    elif per == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1_000_000)


def promise_name(scope: str, asked: int) -> str:
    """The promise an invocation waits on the `asked`-th time (from 1) it finds `scope` spent:
    `budget:SCOPE`, then `budget:SCOPE#2`, ... (a promise is resolved once; each ask is new)."""
    return f"{PROMISE_PREFIX}{scope}" if asked == 1 else f"{PROMISE_PREFIX}{scope}#{asked}"


_USAGE = msgspec.msgpack.Encoder()
_DECODE_USAGE = msgspec.msgpack.Decoder(tuple[int, float])
_DECODE_RULE = msgspec.msgpack.Decoder(BudgetRule)


def _part(rule: BudgetRule, invocation_id: str, now_us: int) -> str:
    if rule.per == "run":
        return f"run:{invocation_id}"
    start = window_start(rule.per, now_us)
    return "" if start is None else f"{start:020d}"


class BudgetBook:
    """The budgets of a store (`tables`: a `journal.Tables`), read and charged in blocking calls."""

    def __init__(self, tables: Any) -> None:
        self._tables = tables

    def rules(self) -> dict[str, BudgetRule]:
        return {key.decode(): _DECODE_RULE.decode(value) for key, value in self._tables.table_scan(RULES)}

    def set(self, scope: str, rule: BudgetRule) -> None:
        check_scope(scope)
        self._tables.table_write([TablePut(RULES, scope.encode(), _USAGE.encode(check_rule(rule)))])

    def remove(self, scope: str) -> bool:
        """Remove the budget of `scope` and what was charged to it; whether there was one."""
        check_scope(scope)
        if self._tables.table_get(RULES, scope.encode()) is None:
            return False
        self._tables.table_write([TableDelete(RULES, scope.encode()),
                                  TableDeletePrefix(USE, scope.encode() + b"\0")])
        return True

    def used(self, scope: str, rule: BudgetRule, invocation_id: str, now_us: int) -> tuple[int, float]:
        """Tokens and cost charged to `scope` in the window (or run) that `invocation_id` counts in now."""
        return self._sum(self._tables.table_scan(
            USE, f"{scope}\0{_part(rule, invocation_id, now_us)}\0".encode()))

    def charge(self, charges: Iterable[tuple[str, BudgetRule]], invocation_id: str, seq: int, tokens: int,
               cost: float, now_us: int) -> None:
        """Charge one step's usage to every budget in `charges`, durably, in one transaction.
        The row is the step's: charging it again (the step ran again after a crash) replaces it."""
        value = _USAGE.encode((tokens, cost))
        ops = [TablePut(USE, f"{scope}\0{_part(rule, invocation_id, now_us)}\0{invocation_id}\0{seq:012d}".encode(),
                        value) for scope, rule in charges]
        if ops:
            self._tables.table_write(ops)

    def views(self, now_us: int) -> list[BudgetView]:
        out = []
        for scope, rule in sorted(self.rules().items()):
            start = window_start(rule.per, now_us)
            prefix = f"{scope}\0" if rule.per in (None, "run") else f"{scope}\0{start:020d}\0"
            if rule.per is None:
                prefix = f"{scope}\0\0"
            tokens, cost = self._sum(self._tables.table_scan(USE, prefix.encode()))
            out.append(BudgetView(scope, rule.tokens, rule.cost, rule.per, tokens, cost, start))
        return out

    @staticmethod
    def _sum(rows: list[tuple[bytes, bytes]]) -> tuple[int, float]:
        tokens, cost = 0, 0.0
        for _, value in rows:
            t, c = _DECODE_USAGE.decode(value)
            tokens += t
            cost += c
        return tokens, cost
