"""Continue-as-new: a fresh linked journal, typed results, a crash in the middle of a chain."""

import pytest

from runtime import Context

from .crashing import armed, crash_once, crash_then_resume, kinds

pytestmark = pytest.mark.anyio


async def loop_agent(ctx: Context, state: dict) -> dict:
    n = await ctx.run("work", lambda: state["n"] + 1)
    if n < state["until"]:
        ctx.continue_as_new({"n": n, "until": state["until"]})
    return {"n": n}


async def test_continue_as_new_starts_a_fresh_linked_journal(open_engine):
    async with open_engine() as engine:
        out = await engine.run(loop_agent, {"n": 0, "until": 3}, id="loop", key="loop-key")
        assert out.result == {"n": 3} and out.id == "loop~2"
        first, second = engine.store.get("loop"), engine.store.get("loop~1")
        assert first.continued_as == "loop~1" and second.continued_from == "loop"
        assert kinds(engine.store, "loop") == ["started", "step", "continued_as_new"]
        assert kinds(engine.store, "loop~2") == ["started", "step", "completed"]
        assert engine.store.get("loop~2").key == "loop-key"
        assert engine.store.key_queue("loop-key") == []
        # Attaching to the first id follows the chain to the final result.
        assert (await engine.run(loop_agent, {"n": 0, "until": 3}, id="loop", key="loop-key")).result == {"n": 3}


async def test_continue_as_new_with_a_typed_result(open_engine):
    async def countdown(ctx: Context, n: int) -> str:
        await ctx.run("tick", lambda: n)
        if n > 0:
            ctx.continue_as_new(n - 1)
        return "liftoff"

    async with open_engine() as engine:
        out = await engine.run(countdown, 2, id="cd")
    assert out.result == "liftoff" and out.id == "cd~2"


async def test_a_crash_in_the_middle_of_a_continue_as_new_chain_resumes_the_chain(open_engine, calls):

    async def chain(ctx: Context, n: int) -> int:
        await ctx.run(f"tick-{n}", calls(f"tick-{n}", result=n))
        if n == 1:
            await ctx.run("crash", crash_once)
        if n < 2:
            ctx.continue_as_new(n + 1)
        return n

    armed["on"] = True
    outcome, _ = await crash_then_resume(open_engine, chain, chain, input=0)
    assert outcome.result == 2 and outcome.id == "inv~2"
    assert calls.counts == {"tick-0": 1, "tick-1": 1, "tick-2": 1}
