"""The handlers that wrote `store-views/`, the store whose listings are kept as golden
outputs (`test_golden_views.py`): one invocation in each state a view must show."""

import os

from runtime import Context, TerminalError


def shout(text: str) -> str:
    return text.upper()


def refuse(text: str) -> str:
    raise TerminalError(f"cannot handle {text!r}")


async def ok(ctx: Context, text: str) -> dict:
    loud = await ctx.run("shout", shout, text)
    await ctx.emit({"progress": 1})
    return {"loud": loud, "at": ctx.now().isoformat(), "n": ctx.random().randint(1, 6)}


async def broke(ctx: Context, text: str) -> str:
    await ctx.run("shout", shout, text)
    return await ctx.run("refuse", refuse, text)


async def waits(ctx: Context, text: str) -> bool:
    await ctx.run("shout", shout, text)
    return await ctx.promise("approve", type=bool)


async def naps(ctx: Context, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "rested"


async def remembers(ctx: Context, text: str) -> list:
    seen = await ctx.state.get("seen", [])
    ctx.state.set("seen", [*seen, text])
    return [*seen, text]


async def child(ctx: Context, n: int) -> int:
    return await ctx.run("double", lambda: n * 2)


async def parent(ctx: Context, n: int) -> list:
    return [await ctx.call("tests.golden.views_handlers:child", n), await ctx.call("tests.golden.views_handlers:child", n + 1)]


async def changes(ctx: Context, text: str) -> str:
    # Journaled with VIEWS_STEP unset, then resumed with it set: replay diverges at the step.
    name = os.environ.get("VIEWS_STEP", "first")
    await ctx.run(name, shout, text)
    return await ctx.promise("go", type=str)


def _hang(marker: str) -> None:
    import time

    open(marker, "w").close()
    time.sleep(3600)


async def hangs(ctx: Context, marker: str) -> None:
    # Killed (SIGKILL) inside its step: left running, with an owner that is gone.
    await ctx.run("shout", shout, marker)
    await ctx.run("hang", _hang, marker)
