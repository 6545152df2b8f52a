"""A plain step function runs off the event loop (on the engine's step threads), so a
blocking call holds up no other invocation and no lease renewal; `inline=True` keeps one
on the loop; `timeout=` bounds a plain function too; `current_step()` works inside it."""

import threading

import anyio
import pytest

from journal import Status
from runtime import Context, RetryPolicy, StepTimeout, current_step

from ..waiting import until

pytestmark = pytest.mark.anyio


async def test_a_blocking_plain_step_holds_up_no_other_invocation(open_engine):
    others_done = threading.Event()

    def blocking_sdk_call() -> bool:
        # A synchronous client waiting on the network: returns whether the other
        # invocation finished while it waited (it cannot, if this blocks the loop).
        return others_done.wait(timeout=30)

    async def slow(ctx: Context) -> bool:
        return await ctx.run("llm", blocking_sdk_call)

    async def quick(ctx: Context) -> int:
        for i in range(10):
            await ctx.run(f"step-{i}", lambda i=i: i)
        others_done.set()
        return 10

    async with open_engine() as engine:
        await engine.start(slow, id="slow")
        await engine.start(quick, id="quick")
        outcomes = {o.id: o for o in await engine.recover()}
    assert outcomes["quick"].result == 10
    assert outcomes["slow"].status == Status.COMPLETED and outcomes["slow"].result is True


async def test_the_lease_is_renewed_while_a_plain_step_blocks_past_its_ttl(open_engine):
    release = threading.Event()

    def hold() -> str:
        release.wait(timeout=60)
        return "done"

    async def agent(ctx: Context) -> str:
        return await ctx.run("hold", hold)

    async with open_engine(lease_ttl=0.6, poll_interval=0.02) as engine:
        async def watch_renewals():
            first = await until_leased(engine, "a")
            # Renewed twice past its first expiry: the loop kept running the lease watcher.
            await until(lambda: engine.store.lease("a").expires_at > first + 1_200_000, "two renewals")
            release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_renewals)
            outcome = await engine.run(agent, id="a")
    assert outcome.result == "done" and outcome.status == Status.COMPLETED


async def until_leased(engine, invocation_id):
    await until(lambda: (lease := engine.store.lease(invocation_id)) is not None and lease.owner, "the lease")
    return engine.store.lease(invocation_id).expires_at


async def test_a_timeout_bounds_a_plain_step_function(open_engine):
    release = threading.Event()

    def never_answers() -> str:
        release.wait(timeout=60)
        return "late"

    async def agent(ctx: Context) -> str:
        try:
            return await ctx.run("call", never_answers, timeout=0.2, retry=RetryPolicy(max_attempts=1))
        finally:
            release.set()  # the abandoned thread ends

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="t")
    assert outcome.status == Status.FAILED and outcome.error.type == "StepTimeout"
    assert StepTimeout.__name__ in outcome.error.type


async def test_current_step_works_on_the_step_thread_and_inline_stays_on_the_loop(open_engine):
    loop_thread = threading.get_ident()

    def where() -> list:
        info = current_step()
        return [info.name, info.attempt, threading.get_ident() == loop_thread]

    async def agent(ctx: Context) -> list:
        return [await ctx.run("threaded", where), await ctx.run("inline", where, inline=True)]

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="w")
    assert outcome.result == [["threaded", 1, False], ["inline", 1, True]]


async def test_what_a_plain_step_raises_on_its_thread_is_the_steps_failure(open_engine):
    def refuses() -> str:
        raise ValueError("no such order: 42")

    def exhausted() -> str:
        raise StopIteration  # an iterator run dry inside a step: not something an awaitable may carry

    async def agent(ctx: Context) -> list:
        out = []
        for name, fn in (("refuses", refuses), ("exhausted", exhausted)):
            try:
                await ctx.run(name, fn, retry=RetryPolicy(max_attempts=1))
            except Exception as exc:
                out.append(f"{type(exc).__name__}: {exc}")
        return out

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="raises")
    assert outcome.status == Status.COMPLETED
    assert outcome.result[0].endswith("no such order: 42")
    assert "StopIteration" in outcome.result[1]
