"""Handlers for the tests of messages with real processes (tests/runtime/test_message_processes.py)."""

from __future__ import annotations

import os
import time

from runtime import Context


async def drain(ctx: Context, args: dict) -> list:
    """Receive `n` messages on topic "m" and return their ids in the order received. Every
    execution, replays included, appends what it sees to `log` as `pid index id`, so a test
    can check that each one saw the same order."""
    seen = []
    with open(args["log"], "a") as log:
        for i in range(args["n"]):
            message = await ctx.receive("m")
            seen.append(message.id)
            log.write(f"{os.getpid()} {i} {message.id}\n")
            log.flush()
    return seen


def _hold(release: str, started: str) -> None:
    """A step that says it runs, then waits for `release` to exist (a kill lands meanwhile)."""
    open(started, "a").close()
    while not os.path.exists(release):
        time.sleep(0.01)


async def answer_after_hold(ctx: Context, args: dict) -> str:
    """Receive one request, run a step held until released (a kill lands there), then reply once."""
    message = await ctx.receive("ask")
    await ctx.run("hold", _hold, args["release"], args["started"])
    await message.reply({"answer": message.value * 2})
    return "done"
