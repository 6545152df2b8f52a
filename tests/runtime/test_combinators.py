"""`ctx.gather`, `ctx.select` and timeouts: winners journaled and replayed, durable deadlines."""

import anyio
import pytest

from journal import Status, decode_entry
from runtime import Context, StepTimeout

from ..waiting import until
from .crashing import armed, crash_once, crash_then_resume, kinds

pytestmark = pytest.mark.anyio


async def test_gather_returns_results_in_argument_order(open_engine):
    async def slow(x):
        await anyio.sleep(0.01 * (3 - x))
        return x

    async def agent(ctx: Context) -> list:
        return await ctx.gather(*(ctx.run(f"s{i}", slow, i) for i in range(3)))

    async with open_engine() as engine:
        assert (await engine.run(agent)).result == [0, 1, 2]


async def test_select_journals_the_winner_and_replay_picks_the_same(open_engine, calls):
    async def fast():
        return "fast"

    async def slow():
        await anyio.sleep_forever()  # loses the race whatever the load: select cancels it

    async def agent(ctx: Context) -> list:
        index, value = await ctx.select(ctx.run("slow", slow), ctx.run("fast", fast))
        await ctx.promise("go")
        return [index, value]

    async with open_engine() as engine:
        await engine.run(agent, id="sel")
        assert "selected" in kinds(engine.store, "sel")
        await engine.resolve("sel", "go", 1)
        assert (await engine.resume("sel")).result == [1, "fast"]


async def test_promise_timeout_raises_step_timeout_and_replays_it(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            await ctx.promise("answer", timeout=0.05)
        except StepTimeout:
            return "gave up"
        return "answered"

    async with open_engine() as engine:
        assert (await engine.run(agent, id="to")).result == "gave up"
        entries = [decode_entry(d) for _, d in engine.store.entries("to")]
        assert entries[2].timed_out


async def test_a_long_promise_timeout_suspends_and_wakes_on_the_timer(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            return await ctx.promise("answer", timeout=0.3)
        except StepTimeout:
            return "timed out"

    async with open_engine(inline_sleep_limit=0.05) as engine:
        out = await engine.run(agent, id="lt")
        assert out.status == Status.SUSPENDED and out.waiting == "answer" and out.wake_at is not None
        await until(lambda: engine.runnable() == ["lt"], "the timeout's timer to fall due")
        assert (await engine.resume("lt")).result == "timed out"


async def test_select_over_a_promise_and_a_short_timer_lets_the_timer_win(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("answer"), ctx.sleep(0.1)))

    async with open_engine() as engine:
        out = await engine.run(agent, id="race")
    assert out.result == [1, None]


async def test_a_timeout_error_raised_by_the_step_itself_is_an_ordinary_failure(open_engine):
    from runtime import RetryPolicy

    attempts = []

    def flaky_socket():
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError("read timed out")
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("fetch", flaky_socket, retry=RetryPolicy(initial_interval=0.001))

    async with open_engine() as engine:
        assert (await engine.run(agent)).result == "ok"
    assert len(attempts) == 2


async def test_select_over_two_promises_wakes_on_either(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("a"), ctx.promise("b")))

    async with open_engine() as engine:
        out = await engine.run(agent, id="two")
        assert out.status == Status.SUSPENDED
        record = await engine.resolve("two", "b", "bee")
        assert record.status == Status.PENDING  # "b" woke it, though "a" is the first name
        assert (await engine.resume("two")).result == [1, "bee"]


async def test_select_over_a_promise_and_a_long_timer_wakes_on_the_promise(open_engine):
    async def agent(ctx: Context) -> list:
        return list(await ctx.select(ctx.promise("answer"), ctx.sleep(3600)))

    async with open_engine(inline_sleep_limit=0.05) as engine:
        out = await engine.run(agent, id="pt")
        assert out.status == Status.SUSPENDED and out.waiting == "answer" and out.wake_at is not None
        await engine.resolve("pt", "answer", 42)
        assert (await engine.resume("pt")).result == [0, 42]


async def test_a_crash_after_a_select_was_won_replays_the_same_winner(open_engine, calls):

    async def quick():
        return "quick"

    async def leisurely():
        await anyio.sleep_forever()  # loses the race whatever the load: select cancels it

    async def racer(ctx: Context) -> list:
        won = list(await ctx.select(ctx.run("leisurely", leisurely), ctx.run("quick", quick)))
        await ctx.run("crash", crash_once)
        return won

    armed["on"] = True
    outcome, entries = await crash_then_resume(open_engine, racer, racer)
    assert outcome.result == [1, "quick"]
