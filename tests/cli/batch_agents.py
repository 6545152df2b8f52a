"""A handler before and after a fix: with CHARGE_FIXED=1 `pay` succeeds, and the audit step
that every fifth run made is gone (so those journals no longer replay against the code)."""

from __future__ import annotations

import os
import time

from runtime import Context, TerminalError

FIXED = os.environ.get("CHARGE_FIXED") == "1"


def _load(n: int) -> int:
    return n


def _audit(n: int) -> str:
    return f"audit {n}"


def _pay(n: int) -> str:
    if not FIXED:
        raise TerminalError(f"card declined for order {n}")
    return f"paid {n}"


async def charge(ctx: Context, n: int) -> str:
    # Handler code outside steps runs on every replay too: checking a journal costs this
    # much, which gives a test the time to stop a server in the middle of a batch.
    time.sleep(0.01)
    await ctx.run("load", _load, n)
    if n % 5 == 0 and not FIXED:
        await ctx.run("audit", _audit, n)
    return await ctx.run("pay", _pay, n)
