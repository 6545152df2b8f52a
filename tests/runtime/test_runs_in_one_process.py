"""One invocation run twice in one process, and exit durability interrupted."""

import anyio
import pytest

from journal import Status
from runtime import Context

from .crashing import kinds

pytestmark = pytest.mark.anyio


async def test_two_runs_of_one_invocation_in_one_process_run_each_step_once(open_engine, calls):
    async def slow_pay(ctx: Context) -> str:
        await anyio.sleep(0.05)
        return await ctx.run("pay", calls("pay"))

    async with open_engine() as engine:
        results = []

        async def attach():
            results.append(await engine.run(slow_pay, id="order-7"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(attach)
            tg.start_soon(attach)
    assert [r.status for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert calls.counts == {"pay": 1}


async def test_exit_durability_keeps_finished_steps_when_interrupted(open_engine, calls):
    import functools

    started = anyio.Event()

    async def agent(ctx: Context) -> str:
        await ctx.run("llm", calls("llm"))
        started.set()
        await ctx.run("slow", anyio.sleep, 5)
        return "done"

    async with open_engine(durability="exit") as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.run, agent, id="ex"))
            await started.wait()
            tg.cancel_scope.cancel()
        assert kinds(engine.store, "ex") == ["started", "step"]
    assert calls.counts == {"llm": 1}
