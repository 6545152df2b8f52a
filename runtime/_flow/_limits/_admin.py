"""`engine.limits`: the operator's view of the store's limits, from Python (the CLI and the HTTP
API call the same)."""

from __future__ import annotations

from typing import Any

from journal.limits import LimitError, LimitRule, LimitView, Window, parse_window

WindowSpec = str | Window | tuple[int, float] | None


def window_of(spec: WindowSpec, what: str) -> Window | None:
    """`"500/m"`, `Window(500, 60)` or `(500, 60)` as a `Window`."""
    if spec is None or isinstance(spec, Window):
        return spec
    if isinstance(spec, str):
        return parse_window(spec, what)
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        count, period = spec
        if isinstance(count, int) and not isinstance(count, bool) and isinstance(period, (int, float)):
            return Window(count, float(period))
    raise LimitError(f"{what}= takes 'N/PERIOD' (such as '500/m'), a Window or (N, seconds), got {spec!r}")


class Limits:
    """The limits of an engine's store: `await engine.limits.set("openai", rate="500/m")`."""

    def __init__(self, limiter: Any) -> None:
        self._limiter = limiter

    async def set(self, name: str, *, concurrency: int | None = None, rate: WindowSpec = None,
                  tokens: WindowSpec = None) -> LimitView:
        """Set the rule of `name` (or of every `PREFIX:<anything>` for `PREFIX:*`), replacing any
        it had; every process sharing the store obeys it from its next acquisition."""
        if concurrency is not None and (not isinstance(concurrency, int) or isinstance(concurrency, bool)):
            raise LimitError(f"concurrency= takes a whole number of units, got {concurrency!r}")
        rule = LimitRule(concurrency, window_of(rate, "rate"), window_of(tokens, "tokens"))
        table = self._limiter.table
        await self._limiter._call(table.set, name, rule)
        found = await self.get(name)
        assert found is not None
        return found

    async def ls(self) -> list[LimitView]:
        return list(await self._limiter._call(self._limiter.table.ls))

    async def get(self, name: str) -> LimitView | None:
        return next((view for view in await self.ls() if view.name == name), None)

    async def remove(self, name: str) -> bool:
        """Remove the rule of `name`; whether there was one. Its waiters go on at once."""
        return bool(await self._limiter._call(self._limiter.table.remove, name))

    async def waiting_for(self, invocation_id: str) -> list[str]:
        """The limits an invocation's steps wait on right now."""
        return list(await self._limiter._call(self._limiter.table.waiting_for, invocation_id))
