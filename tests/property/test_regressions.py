"""Runtime bugs the determinism checker found, kept fixed."""

from __future__ import annotations

import anyio
import pytest

from journal import MemoryStore, Status
from runtime import Cancelled, Context, Engine
from runtime.testing import check_determinism


async def sleep_then_wait(ctx: Context, log: list) -> list:
    seen = []
    try:
        await ctx.sleep(0)
        seen.append("slept")
        await ctx.promise("go")
    except Cancelled:
        seen.append("cancelled")
        await ctx.run("undo", lambda n: n, len(seen))
        raise
    return seen


def test_cancel_delivered_after_a_finished_sleep_replays_at_the_same_operation():
    # The CancelReceived entry that follows a sleep used to be replayed as if it had cut the
    # sleep short, so after a crash the handler saw Cancelled one operation early and the
    # compensating step got other arguments than when recorded.
    report = check_determinism(sleep_then_wait, [], cancel="suspended", promises={"go": 1})
    assert report.status == Status.CANCELLED


async def long_timer(ctx: Context) -> str:
    try:
        await ctx.sleep(3600)
    except Cancelled:
        await ctx.run("undo", lambda: "undone")
        raise
    return "woke"


@pytest.mark.anyio
async def test_cancelling_an_invocation_suspended_on_a_durable_timer_delivers_cancelled():
    # It used to suspend again at once on resume (the timer was not due) and, since the
    # cancel request made it runnable, loop without end.
    engine = Engine(MemoryStore())
    assert (await engine.run(long_timer, id="t")).status == Status.SUSPENDED
    with anyio.fail_after(5):
        outcome = await engine.cancel("t")
    assert outcome.status == Status.CANCELLED


def test_cancelling_a_timer_suspended_invocation_is_deterministic_under_crashes():
    report = check_determinism(long_timer, cancel="suspended")
    assert report.status == Status.CANCELLED and report.crash_points > 0
