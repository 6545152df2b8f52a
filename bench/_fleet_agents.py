"""The handler `python -m bench.fleet` fails, then fixes (FIXED) and retries."""

from __future__ import annotations

from runtime import Context, TerminalError

FIXED = False


def _load(n: int) -> int:
    return n


def _pay(n: int) -> str:
    if not FIXED:
        raise TerminalError(f"card declined for order {n}")
    return f"paid {n}"


async def charge(ctx: Context, n: int) -> str:
    await ctx.run("load", _load, n)
    return await ctx.run("pay", _pay, n)
