"""Budgets at run time: before a live step runs, the budgets that cover it are looked at, and a
spent one suspends the invocation on the promise `budget:SCOPE` instead of running the step;
after each attempt, what the step reported (`current_step().used(tokens=, cost=)`) is charged
to each of them, durably, before the step's entry is committed (`journal/limits/_budgets.py`).

Neither the look nor the charge is journaled: a replayed step is not looked at and charges
nothing, and a step whose entry was never committed runs (and is charged, in the same row)
again. The promise's value is an increase for this invocation only, `{"tokens"?, "cost"?}`; a
rejection fails the step with its message. Each time the invocation finds the budget spent
again it asks anew (`budget:SCOPE#2`, ...)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import anyio

from journal import Store, decode_value, now_us
from journal.limits import (
    BUDGET_PROMISE_PREFIX,
    BudgetBook,
    BudgetRule,
    BudgetView,
    LimitError,
    budget_promise,
    check_budget,
    check_scope,
    wake_budget_waiters,
)

from ..._base._step_info import Usage, _usage

_REREAD = 1.0  # seconds a process uses the rules it read (a change elsewhere is obeyed within that)


class BudgetIncrease(TypedDict, total=False):
    """What resolving `budget:SCOPE` grants the waiting invocation, on top of the budget."""

    tokens: int
    cost: float


class BudgetSpent(Exception):
    """Internal: the budget `scope` is spent for this invocation; it waits on `promise`."""

    def __init__(self, scope: str, promise: str) -> None:
        super().__init__(promise)
        self.scope = scope
        self.promise = promise


class Budgets:
    """The budgets of an engine's store: the rules (re-read at most every second) and the
    look and the charge of each live step covered by one."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.book = BudgetBook(store)
        self._rules: dict[str, BudgetRule] = {}
        self.any = False  # whether the store had a budget when last read (a step then looks)
        # When the rules are next read (time.monotonic()): an attribute a live step compares
        # itself, so a store with no budget costs the step path no call into this module.
        self.reread_at = 0.0

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._store.blocking:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args))
        return fn(*args)

    async def rules(self) -> dict[str, BudgetRule]:
        if time.monotonic() >= self.reread_at:
            self._rules = await self._call(self.book.rules)
            self.any = bool(self._rules)
            self.reread_at = time.monotonic() + _REREAD
        return self._rules

    def covering(self, scopes: Sequence[str]) -> list[tuple[str, BudgetRule]]:
        rules = self._rules
        return [(scope, rules[scope]) for scope in scopes if scope in rules]

    async def gate(self, invocation_id: str, covering: list[tuple[str, BudgetRule]], resolution: Any) -> None:
        """Raise `BudgetSpent` for the first budget in `covering` this invocation has spent and
        not been granted more of; a rejected grant raises `BudgetRejected`."""
        now = now_us()
        for scope, rule in covering:
            tokens, cost = await self._call(self.book.used, scope, rule, invocation_id, now)
            allowed_tokens, allowed_cost = rule.tokens, rule.cost
            asked = 1
            while (allowed_tokens is not None and tokens >= allowed_tokens) or (
                    allowed_cost is not None and cost >= allowed_cost):
                name = budget_promise(scope, asked)
                answer = await resolution(name)
                if answer is None:
                    raise BudgetSpent(scope, name)
                if answer.error is not None:
                    raise BudgetRejected(f"budget {scope!r} is spent and more was refused: {answer.error}")
                more = _increase(answer.value)
                allowed_tokens = None if allowed_tokens is None else allowed_tokens + int(more.get("tokens", 0))
                allowed_cost = None if allowed_cost is None else allowed_cost + float(more.get("cost", 0.0))
                asked += 1

    def charged(self, fn: Callable[..., Any], invocation_id: str, seq: int,
                covering: list[tuple[str, BudgetRule]]) -> Callable[..., Any]:
        """`fn` whose attempts' reported usage is charged to `covering` after each attempt."""
        total = Usage()

        async def attempt(*args: Any, **kwargs: Any) -> Any:
            usage = Usage(parent=_usage.get())
            token = _usage.set(usage)
            try:
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
                return value
            finally:
                _usage.reset(token)
                if usage.tokens is not None or usage.cost is not None:
                    total.add(usage.tokens, usage.cost)
                    with anyio.CancelScope(shield=True):  # on disk before the step's entry can be
                        await self._call(self.book.charge, covering, invocation_id, seq, total.tokens or 0,
                                         total.cost or 0.0, now_us())

        return attempt

    # -- the operator's view: `engine.budgets` -------------------------------------------------

    async def set(self, scope: str, *, tokens: int | None = None, cost: float | None = None,
                  per: str | None = None) -> BudgetView:
        """Set the budget of `scope`, replacing any it had. Invocations waiting on it are woken:
        those it now allows go on, the others ask again."""
        check_scope(scope)
        rule = check_budget(BudgetRule(tokens, float(cost) if isinstance(cost, int) and not isinstance(cost, bool)
                                     else cost, per))
        await self._call(self.book.set, scope, rule)
        self.reread_at = 0.0
        await self._call(self._wake, scope)
        found = await self.get(scope)
        assert found is not None
        return found

    async def ls(self) -> list[BudgetView]:
        return list(await self._call(self.book.views, now_us()))

    async def get(self, scope: str) -> BudgetView | None:
        return next((view for view in await self.ls() if view.scope == scope), None)

    async def remove(self, scope: str) -> bool:
        """Remove the budget of `scope` (and its usage); whether there was one. Its waiters go on."""
        removed = bool(await self._call(self.book.remove, scope))
        self.reread_at = 0.0
        await self._call(self._wake, scope)
        return removed

    def _wake(self, scope: str) -> None:
        wake_budget_waiters(self._store, scope)


class BudgetRejected(Exception):
    """Internal: carried out as a TerminalError by the caller."""


def _increase(value: Any) -> dict[str, Any]:
    try:
        more = decode_value(value)
    except Exception:
        more = None
    if not isinstance(more, dict) or set(more) - {"tokens", "cost"} or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in more.values()):
        raise LimitError(f'a budget promise is resolved with {{"tokens"?: N, "cost"?: USD}} (0 or more), got '
                         f"{value!r}")
    return more


def is_budget_promise(name: str | None) -> bool:
    return name is not None and name.startswith(BUDGET_PROMISE_PREFIX)


def budget_scopes(record: Any, key: str | None) -> tuple[str, ...]:
    """The scopes that may cover an invocation: its handler (as it was started, and the name of
    its function), its key, its tags and its limits (a step's own limits are added to them)."""
    scopes = [f"handler:{record.handler}"]
    name = record.handler.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    if name != record.handler:  # a handler started by its path (`module:function`) is also its function's name
        scopes.append(f"handler:{name}")
    if key is not None:
        scopes.append(f"key:{key}")
    scopes += [f"tag:{k}={v}" for k, v in sorted((getattr(record, "tags", None) or {}).items())]
    return (*scopes, *record.limits)
