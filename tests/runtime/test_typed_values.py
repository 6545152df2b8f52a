"""Typed values: step results read back as their annotation says, wrong promise values, changed types."""

import pytest

from journal import Status
from runtime import Context
from runtime.errors import PromiseValueRefused

from .crashing import armed, crash_once, crash_then_resume

pytestmark = pytest.mark.anyio


async def test_a_promise_value_of_the_wrong_type_names_the_promise(open_engine):
    async def agent(ctx: Context) -> int:
        return await ctx.promise("count", type=int)

    async with open_engine() as engine:
        await engine.run(agent, id="wt")
        # Refused when resolved: the run stays suspended on it.
        with pytest.raises(PromiseValueRefused, match="promise 'count' of invocation 'wt' expects int"):
            await engine.resolve("wt", "count", "three")
        assert engine.store.get("wt").status == Status.SUSPENDED
        await engine.resolve("wt", "count", 3)
        out = await engine.resume("wt")
    assert out.status == Status.COMPLETED and out.result == 3


async def test_results_are_typed_by_the_return_annotation_when_read_back(open_engine):
    import msgspec

    class Report(msgspec.Struct):
        text: str

    async def agent(ctx: Context) -> Report:
        return Report(await ctx.run("t", lambda: "x"))

    async with open_engine() as engine:
        live = await engine.run(agent, id="typed")
        later = await engine.get("typed")
    assert live.result == later.result == Report("x")


async def test_a_changed_return_type_on_replay_is_a_divergence_naming_the_step(open_engine):

    def word() -> str:
        return "seven"

    def number() -> int:
        return 7

    async def old(ctx: Context) -> None:
        await ctx.run("value", word)
        await ctx.run("crash", crash_once)

    async def new(ctx: Context) -> None:
        await ctx.run("value", number)

    armed["on"] = True
    outcome, _ = await crash_then_resume(open_engine, old, new)
    assert outcome.status == Status.DIVERGED and "'value'" in outcome.divergence and "int" in outcome.divergence
