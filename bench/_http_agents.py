"""The handler the HTTP load test registers with `journal serve` (by path, like a user's agent)."""

from __future__ import annotations

import os

from runtime import Context


def _effect(log: str, invocation_id: str) -> str:
    # One short O_APPEND write per effect: lines from concurrent steps never interleave.
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{invocation_id}\n".encode())
    finally:
        os.close(fd)
    return invocation_id


async def approval(ctx: Context, request: dict) -> dict:
    """A draft, a human's approval, and the side effect it allows (logged once per run)."""
    draft = await ctx.run("draft", lambda: f"refund {request['n']}")
    decision = await ctx.promise("approval")
    done = await ctx.run("refund", _effect, request["log"], ctx.invocation_id) if decision else None
    return {"draft": draft, "refunded": done}
