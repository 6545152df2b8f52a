"""Mistakes a type checker must catch in a user's program (`tests/typing/test_typing.py`).

Each line marked `# error: CODE` must be reported by `mypy --strict` with that error code,
and nothing else may be: if an annotation of `journal` or `runtime` decays to `Any`, the
mistakes go unreported and the test fails. (A keyword argument for one of `fn`'s
parameters that has a default is not checked: see `Context.run`.)"""

from __future__ import annotations

from runtime import Context, Engine, current_step

from .user_program import Weather, agent, fetch, forecast


async def mistakes(ctx: Context, engine: Engine) -> None:
    await ctx.run("fetch", fetch, 42)  # error: arg-type
    await ctx.run("forecast", forecast, "Oslo", 7, "extra")  # error: call-arg, arg-type
    await ctx.run("forecast", forecast)  # error: call-arg, arg-type
    weather = await ctx.run("fetch", fetch, "Oslo")
    weather.upper()  # error: attr-defined
    celsius: str = (await ctx.run("fetch", fetch, "Oslo")).celsius  # error: assignment
    approved: str = await ctx.promise("approval", type=bool)  # error: arg-type
    await ctx.sleep("ten seconds")  # error: arg-type
    history: list[int] | None = await ctx.state.get("history", type=list[str])  # error: arg-type
    pair: list[Weather] = await ctx.gather(ctx.run("a", forecast, "Rome"))  # error: arg-type
    outcome = await engine.run(agent, "Paris")
    outcome.value() + 1  # error: operator
    current_step().emit({"not": "text"})  # error: arg-type
    print(celsius, approved, history, pair)
