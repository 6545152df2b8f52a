"""Where code is running: handler code (must be deterministic) or a step function (anything goes).

The determinism guard in `runtime.testing` reads `in_handler_code()` to decide whether a
call to the wall clock or an unseeded random source is a mistake.
"""

from __future__ import annotations

from contextvars import ContextVar

# The invocation id while handler code runs outside any step; None inside steps and elsewhere.
_handler_scope: ContextVar[str | None] = ContextVar("journal_handler_scope", default=None)


def in_handler_code() -> str | None:
    """The invocation id if the caller is handler code outside a step, else None."""
    return _handler_scope.get()
