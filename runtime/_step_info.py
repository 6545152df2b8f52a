"""`current_step()`: what a step function can learn about the step it runs in."""

from __future__ import annotations

from contextvars import ContextVar
from typing import NamedTuple


class StepInfo(NamedTuple):
    invocation_id: str
    seq: int
    name: str
    attempt: int
    # Stable across retries and crashes: the invocation id and a hash of the step's
    # position in its branch (see `runtime.idempotency_key`), not its seq.
    idempotency_key: str


# While a step function runs: (invocation id, seq, name, attempt, position token). A plain
# tuple, so that a step pays for a `StepInfo` and its key only if it asks for them.
_current: ContextVar[tuple[str, int, str, int, int] | None] = ContextVar("journal_current_step", default=None)


def current_step() -> StepInfo:
    """The step being executed. Only valid inside a function run by `ctx.run`."""
    info = _current.get()
    if info is None:
        raise LookupError(
            "current_step() was called outside a step; call it from a function passed to ctx.run(...)"
        )
    invocation_id, seq, name, attempt, token = info
    return StepInfo(invocation_id, seq, name, attempt, f"{invocation_id}:{token:016x}")


def in_step() -> bool:
    """Whether the caller runs inside a step function (where nondeterminism is allowed)."""
    return _current.get() is not None
