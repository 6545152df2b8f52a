"""Budgets (DESIGN.md, "Budgets"): usage charged durably to every budget covering the
invocation, a spent budget suspending it on `budget:SCOPE` instead of failing, resolving to go
on, rejecting to fail, and raising the budget waking its waiters."""

import anyio
import pytest

from journal.limits import LimitError
from runtime import Context, current_step

pytestmark = pytest.mark.anyio


RAN: list[str] = []  # the steps that really ran (a replayed step runs nothing)


def spend(tokens, cost=None):
    RAN.append(current_step().name)
    current_step().used(tokens=tokens, cost=cost)
    return tokens


async def spender(ctx: Context, n: int) -> int:
    """`n` steps, each reporting 40 tokens."""
    total = 0
    for i in range(n):
        total += await ctx.run(f"call-{i}", spend, 40)
    return total


async def test_a_spent_budget_suspends_on_its_promise_and_a_resolve_allows_more(open_engine):
    RAN.clear()
    async with open_engine() as engine:
        await engine.budgets.set("handler:spender", tokens=100, per="run")
        outcome = await engine.run(spender, 5, id="b1")
        # 40, 80, 120: the fourth step finds the budget spent and does not run.
        assert outcome.status == "suspended" and outcome.waiting == "budget:handler:spender"
        assert RAN == ["call-0", "call-1", "call-2"]
        view = await engine.budgets.get("handler:spender")
        assert (view.used_tokens, view.tokens, view.per) == (120, 100, "run")
        await engine.resolve("b1", "budget:handler:spender", {"tokens": 100})
        with anyio.fail_after(30):
            outcome = await engine.resume("b1")
        assert outcome.result == 200 and RAN == [f"call-{i}" for i in range(5)]
        assert (await engine.budgets.get("handler:spender")).used_tokens == 200


async def test_spent_again_it_asks_again(open_engine):
    async with open_engine() as engine:
        await engine.budgets.set("handler:spender", tokens=40, per="run")
        assert (await engine.run(spender, 4, id="b2")).waiting == "budget:handler:spender"
        await engine.resolve("b2", "budget:handler:spender", {"tokens": 40})
        with anyio.fail_after(30):
            outcome = await engine.resume("b2")
        assert outcome.waiting == "budget:handler:spender#2"
        await engine.resolve("b2", "budget:handler:spender#2", {"tokens": 80})
        with anyio.fail_after(30):
            assert (await engine.resume("b2")).result == 160


async def test_a_rejected_budget_promise_fails_the_run_with_its_message(open_engine):
    async with open_engine() as engine:
        await engine.budgets.set("handler:spender", tokens=50, per="run")
        assert (await engine.run(spender, 3, id="b3")).status == "suspended"
        await engine.reject("b3", "budget:handler:spender", "tenant over plan")
        with anyio.fail_after(30):
            outcome = await engine.resume("b3")
    assert outcome.status == "failed" and "tenant over plan" in outcome.error.message


async def test_raising_the_budget_wakes_its_waiters(open_engine):
    async with open_engine() as engine:
        await engine.budgets.set("key:acme", tokens=60)  # a total, for every run of the key
        first = await engine.run(spender, 3, id="w1", key="acme")
        assert first.waiting == "budget:key:acme"
        await engine.budgets.set("key:acme", tokens=1000)
        record = engine.store.require("w1")
        assert record.status == "pending" and record.waiting is None
        with anyio.fail_after(30):
            assert (await engine.resume("w1")).result == 120


async def test_a_budget_covers_by_handler_key_and_limit_name_and_per_run_is_each_runs_own(open_engine):
    async def limited(ctx: Context) -> int:
        return await ctx.run("call", spend, 30, limit="openai")

    async with open_engine() as engine:
        await engine.budgets.set("openai", tokens=1000, cost=1.5)
        await engine.budgets.set("handler:spender", tokens=50, per="run")
        await engine.run(limited)
        await engine.run(limited)
        for i in range(3):  # each run has its own 50: two steps each (40, then 80: spent)
            assert (await engine.run(spender, 3, id=f"r{i}")).waiting == "budget:handler:spender"
        views = {view.scope: view for view in await engine.budgets.ls()}
    assert views["openai"].used_tokens == 60 and views["openai"].cost == 1.5
    assert views["handler:spender"].used_tokens == 240  # every run's usage together


async def test_a_replayed_step_charges_nothing(open_engine):
    async def agent(ctx: Context) -> int:
        a = await ctx.run("a", spend, 10)
        await ctx.promise("go")
        return a + await ctx.run("b", spend, 5)

    async with open_engine() as engine:
        await engine.budgets.set("handler:agent", tokens=1000)
        assert (await engine.run(agent, id="p")).status == "suspended"
        await engine.resolve("p", "go", True)
        assert (await engine.resume("p")).result == 15
        assert (await engine.budgets.get("handler:agent")).used_tokens == 15


async def test_bad_budgets_are_refused_with_what_to_write(open_engine):
    async with open_engine() as engine:
        with pytest.raises(LimitError, match="needs an allowance"):
            await engine.budgets.set("handler:x")
        with pytest.raises(LimitError, match="--per takes run, hour, day or month"):
            await engine.budgets.set("handler:x", tokens=5, per="week")
        with pytest.raises(LimitError, match="tag:K=V"):
            await engine.budgets.set("tag:novalue", tokens=5)
        assert await engine.budgets.remove("handler:x") is False
        await engine.budgets.set("handler:x", tokens=5, per="day")
        view = await engine.budgets.get("handler:x")
        assert view.to_json()["window_start"].endswith("T00:00:00+00:00")
        assert await engine.budgets.remove("handler:x") is True
        assert await engine.budgets.ls() == []
