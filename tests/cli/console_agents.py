"""Handlers of the operator's console tests (`tests/cli/test_console.py`), run by path.

Every step appends a line to the log file its input names, so a test tells a step that ran
from one that was replayed. Files named by the input stand for the outside world: a step
waits while `hold` exists (so a test can kill the process inside it), and fails while
`broken` exists (the cause an operator fixes before `journal retry`).
"""

from __future__ import annotations

import os
import time

import msgspec
import pydantic

from runtime import Context, RetryPolicy

ONCE = RetryPolicy(max_attempts=1)


def _log(log: str, what: str) -> str:
    with open(log, "a", encoding="utf-8") as f:
        f.write(what + "\n")
    return what


def _held(args: dict, what: str) -> str:
    _log(args["log"], what + " started")
    while os.path.exists(args["hold"]):  # the test removes it, or kills this process
        time.sleep(0.01)
    return _log(args["log"], what)


async def three_steps(ctx: Context, args: dict) -> list[str]:
    one = await ctx.run("one", _log, args["log"], "one")
    two = await ctx.run("two", _held, args, "two")
    three = await ctx.run("three", _log, args["log"], "three")
    return [one, two, three]


def _charge(args: dict) -> str:
    _log(args["log"], "charge")
    if os.path.exists(args["broken"]):
        raise ConnectionError("the payment service is down")
    return "charged"


async def payment(ctx: Context, args: dict) -> list[str]:
    fetched = await ctx.run("fetch", _log, args["log"], "fetch")
    charged = await ctx.run("charge", _charge, args, retry=ONCE)
    return [fetched, charged]


async def missing_key(ctx: Context, args: dict) -> str:
    d = {"present": await ctx.run("read", lambda: 1)}
    return d["missing"]


async def plan_and_use(ctx: Context, args: dict) -> str:
    plan = await ctx.run("plan", _log, args["log"], "a first plan")
    return await ctx.run("use", lambda: f"used: {plan}")


class Approval(msgspec.Struct):
    approved: bool
    by: str


async def approval(ctx: Context, args: dict) -> str:
    await ctx.run("draft", _log, args["log"], "draft")
    answer = await ctx.promise("approval", type=Approval)
    return f"approved={answer.approved} by {answer.by}"


class Verdict(pydantic.BaseModel):
    ok: bool
    score: int = 0


async def verdict(ctx: Context, args: dict) -> str:
    answer = await ctx.promise("verdict", type=Verdict)
    return f"ok={answer.ok} score={answer.score}"


async def yes_or_no(ctx: Context, args: dict) -> bool:
    return await ctx.promise("answer", type=bool)
