"""`current_step()`: what a step function can learn about the step it runs in."""

from __future__ import annotations

from contextvars import ContextVar
from typing import NamedTuple


class StepInfo(NamedTuple):
    invocation_id: str
    seq: int
    name: str
    attempt: int
    idempotency_key: str  # stable across retries and crashes: f"{invocation_id}:{seq}"


_current: ContextVar[StepInfo | None] = ContextVar("journal_current_step", default=None)


def current_step() -> StepInfo:
    """The step being executed. Only valid inside a function run by `ctx.run`."""
    info = _current.get()
    if info is None:
        raise LookupError(
            "current_step() was called outside a step; call it from a function passed to ctx.run(...)"
        )
    return info
