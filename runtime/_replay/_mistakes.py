"""What a value that cannot be journaled most often says about the handler's code: the two
mistakes a new handler makes most, told as what happened instead of as a type name.

- A missing `await`: `plan = ctx.run("plan", llm, q)` makes `plan` a coroutine that never
  runs, and the journal is asked to record it.
- A handler without the Context: `async def greet(name)` gets the Context in `name`, and
  returns it (or is given an input it has no parameter for).
"""

from __future__ import annotations

import inspect
from typing import Any


def unjournalable(value: Any, what: str) -> str | None:
    """Why `value`, which `what` produced ("the handler", "step 'plan' (seq 3)"), cannot be
    journaled, when that is a mistake we can name; None for an ordinary unencodable value."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            # Reported here: Python's "coroutine ... was never awaited" warning would add nothing.
            value.close()
        name = getattr(value, "__qualname__", type(value).__qualname__)
        return (f"{what} returned {name}(...) not awaited: a coroutine, not its result. An `await` is missing, "
                "most likely before a `ctx.run(...)` (write `plan = await ctx.run(\"plan\", fn, ...)`); "
                "the call it stands for never ran")
    # Known by a mark on its class: replay sits below the handler's room and imports nothing of it.
    if getattr(type(value), "_journal_context", False):
        return (f"{what} returned its Context: a handler's first parameter always receives the Context, so a "
                "handler written without one (`async def greet(name)`) gets it in its input's place; define "
                "it as `async def greet(ctx: Context, name: str)`")
    return None
