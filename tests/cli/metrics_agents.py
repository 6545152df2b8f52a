"""Handlers for the metrics tests: a known workload of completions, failures and a run that
is killed mid-way and replayed."""

from __future__ import annotations

import os

import anyio

from runtime import Context, TerminalError, current_step


def _same(value: object) -> object:
    return value


async def ok(ctx: Context, n: int) -> int:
    return await ctx.run("double", _same, n * 2)


async def bad(ctx: Context, n: int) -> int:
    await ctx.run("try", _same, n)
    raise TerminalError(f"bad input {n}")


async def long(ctx: Context, request: dict) -> str:
    """`request["steps"]` steps, then waits (outside the journal) for a file before its last one."""
    for n in range(request["steps"]):
        await ctx.run(f"part-{n}", _same, n)
    with open(request["entered"], "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(request["gate"]):
        await anyio.sleep(0.02)
    return str(await ctx.run("last", _same, "done"))


def _call_model(n: int) -> int:
    current_step().used(tokens=100 + n)  # what the provider said the call used
    return n


async def llm(ctx: Context, n: int) -> int:
    """One step under the `llm` limit, reporting its tokens."""
    return await ctx.run("model", _call_model, n, limit="llm", tokens=500)
