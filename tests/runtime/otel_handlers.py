"""Handlers for the OpenTelemetry tests, importable by the crash subprocess too."""

from __future__ import annotations

import os

import anyio

from runtime import Context, RetryPolicy, TerminalError, current_step

FLAKY: dict[str, int] = {}
RENAMED = {"on": False}


def plan(question: str) -> str:
    return f"plan for {question}"


async def flaky(key: str) -> str:
    FLAKY[key] = FLAKY.get(key, 0) + 1
    if FLAKY[key] == 1:
        raise ConnectionError("the model endpoint dropped the connection")
    return f"answer after {FLAKY[key]} attempts (key {current_step().idempotency_key})"


async def agent(ctx: Context, question: str) -> str:
    first = await ctx.run("plan", plan, question)
    second = await ctx.run("answer", flaky, question, retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
    return f"{first} / {second}"


async def approval(ctx: Context, question: str) -> str:
    draft = await ctx.run("draft" if not RENAMED["on"] else "draft-v2", plan, question)
    ok = await ctx.promise("approval")
    return f"{draft}: {'approved' if ok else 'declined'}"


async def refuses(ctx: Context, question: str) -> str:
    await ctx.run("plan", plan, question)
    raise TerminalError("the reviewer refused")


async def child(ctx: Context, n: int) -> int:
    return await ctx.run("double", lambda: n * 2)


async def parent(ctx: Context, n: int) -> int:
    return await ctx.call(child, n, id=f"{ctx.invocation_id}-child")


def _touch(path: str) -> str:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    return path


async def _wait_for(entered: str, go: str) -> str:
    _touch(entered)
    while not os.path.exists(go):  # the test kills the process while this waits
        await anyio.sleep(0.01)
    return "went on"


async def crashes(ctx: Context, files: dict) -> str:
    await ctx.run("one", plan, "crash")
    return await ctx.run("two", _wait_for, files["entered"], files["go"])
