"""What a model step reports and acquires: its token usage and the named limit.

Both go through public names only: `Context.run(..., limit=)` where the running version
takes it, and `StepInfo.used(tokens=)` where it exists. On a version whose steps cannot
acquire a limit, asking for one is an error when the plugin is made, not a limit
silently ignored while the agent runs."""

from __future__ import annotations

import inspect
from typing import Any

from runtime import Context, current_step


def limit_options(limit: str | list[str] | None) -> dict[str, Any]:
    """The keyword arguments that make each model step acquire `limit` (none when it is None)."""
    if limit is None:
        return {}
    if "limit" not in inspect.signature(Context.run).parameters:
        raise NotImplementedError(
            f"JournalPlugin(limit={limit!r}): this version of journal's steps cannot acquire a named limit "
            "(Context.run takes no `limit=`); drop `limit=` to run the agent without one"
        )
    return {"limit": limit}


def report_tokens(usage: Any) -> None:
    """Give the step's token usage (ADK's `usage_metadata`) to `current_step().used`, if it exists."""
    used = getattr(current_step(), "used", None)
    total = getattr(usage, "total_token_count", None)
    if used is not None and isinstance(total, int):
        used(tokens=total)
