"""Handlers that misbehave, for the bad-input and fault cases (`tests/cli/faulty.py:NAME`)."""

from __future__ import annotations

import sys

import msgspec

from runtime import Context, TerminalError

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\u202e"


async def echo(ctx: Context, value: object) -> object:
    return await ctx.run("echo", lambda: value)


async def no_input(ctx: Context) -> int:
    return await ctx.run("answer", lambda: 42)


class Order(msgspec.Struct):
    item: str
    qty: int


async def order(ctx: Context, order: Order) -> int:
    return await ctx.run("price", lambda: order.qty * 3)


async def three_params(ctx: Context, a: int, b: int) -> int:
    return a + b


async def no_params() -> int:
    return 1


def not_async(ctx: Context, value: object) -> object:
    return value


async def huge_result(ctx: Context, value: object) -> int:
    await ctx.run("fine", lambda: 1)
    return 2**70


async def huge_step(ctx: Context, value: object) -> str:
    try:
        await ctx.run("huge", lambda: 2**70)
    except TerminalError:
        pass
    return await ctx.run("after", lambda: "went on")


async def unencodable_result(ctx: Context, value: object) -> object:
    return object()


async def exits(ctx: Context, value: object) -> None:
    await ctx.run("before", lambda: 1)
    sys.exit(5)


async def interrupts(ctx: Context, value: object) -> None:
    await ctx.run("before", lambda: 1)
    raise KeyboardInterrupt


async def raises(ctx: Context, value: object) -> None:
    await ctx.run("before", lambda: 1)
    raise ValueError("the handler broke")


async def hostile(ctx: Context, value: object) -> str:
    """Journal contents an LLM could have produced: escapes in names, values, errors, events."""
    await ctx.run("name" + HOSTILE, lambda: HOSTILE)
    await ctx.emit({"event": HOSTILE})
    try:
        await ctx.run("refused", _refuse)
    except TerminalError:
        pass
    return HOSTILE


def _refuse() -> None:
    raise TerminalError("refused" + HOSTILE)


async def hostile_failure(ctx: Context, value: object) -> None:
    raise TerminalError("failed" + HOSTILE)


async def _slow() -> int:
    import anyio

    await anyio.sleep(30)
    return 1


def _fails_now() -> None:
    raise TerminalError("no")


async def sibling_fails(ctx: Context, value: object) -> None:
    """A step in flight is cancelled when its sibling fails: its seq stays unused."""
    import anyio

    async with anyio.create_task_group() as tg:
        tg.start_soon(ctx.run, "slow", _slow)
        tg.start_soon(ctx.run, "fails", _fails_now)


async def unencodable_event(ctx: Context, value: object) -> int:
    try:
        await ctx.emit(object())
    except TerminalError:
        pass
    return await ctx.run("after", lambda: 1)


async def waits(ctx: Context, value: object) -> object:
    return await ctx.promise("approval")
