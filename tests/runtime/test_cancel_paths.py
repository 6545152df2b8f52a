"""Cancellation of a waiting compensation and of a diverged invocation."""

import pytest

from journal import Status
from runtime import Context

from .crashing import crash_flag, crash_then_resume, kinds, program

pytestmark = pytest.mark.anyio


async def test_compensation_that_waits_for_a_promise_suspends_then_ends_cancelled(open_engine, calls):
    from runtime import Cancelled

    async def agent(ctx: Context) -> str:
        await ctx.run("book", calls("book"))
        try:
            await ctx.promise("confirm")
        except Cancelled:
            if await ctx.promise("refund-approved"):  # a person signs off the compensation
                await ctx.run("refund", calls("refund"))
            raise
        return "booked"

    async with open_engine() as engine:
        await engine.run(agent, id="comp")
        waiting = await engine.cancel("comp")
        assert waiting.status == Status.SUSPENDED and waiting.waiting == "refund-approved"
        assert not engine.store.get("comp").cancel_requested  # delivered: the request is consumed
        await engine.resolve("comp", "refund-approved", True)
        done = await engine.resume("comp")
    assert done.status == Status.CANCELLED
    assert calls.counts == {"book": 1, "refund": 1}


async def test_cancelling_a_diverged_invocation_abandons_it(open_engine):

    crash_flag["armed"] = True
    outcome, _ = await crash_then_resume(open_engine, program("plan", "search"), program("plan", "renamed"))
    assert outcome.status == Status.DIVERGED
    async with open_engine() as engine:
        from runtime._handler._handlers import _by_path

        _by_path[engine.store.get("inv").handler] = program("plan", "renamed")
        out = await engine.cancel("inv")
        assert out.status == Status.CANCELLED
        assert kinds(engine.store, "inv")[-1] == "cancelled"
