"""Tags: set at start and by `ctx.tag`, journaled once, kept through replay, found by tag."""

import pytest

from journal import Query, Status, decode_entry, kind_of
from runtime import Context, TerminalError

pytestmark = pytest.mark.anyio


async def tagging(ctx: Context, customer: str) -> str:
    await ctx.tag("customer", customer)
    await ctx.run("plan", lambda: "planned")
    approved = await ctx.promise("approval")
    await ctx.tag("stage", "approved" if approved else "refused")
    return "done"


def _kinds(store, invocation_id):
    return [kind_of(decode_entry(d)) for _, d in store.entries(invocation_id)]


async def test_a_tag_set_by_the_handler_survives_replay_without_being_written_twice(open_engine):
    async with open_engine() as engine:
        first = await engine.run(tagging, "acme", id="t1", tags={"team": "support"})
        assert first.status == Status.SUSPENDED
        assert engine.store.get("t1").tags == {"team": "support", "customer": "acme"}
        await engine.resolve("t1", "approval", True)
        again = await engine.resume("t1")  # replays the first tag and the step, then goes on live
        assert again.status == Status.COMPLETED
        record = engine.store.get("t1")
        kinds = _kinds(engine.store, "t1")
        found = [r.id for r in engine.store.page(Query(tags=(("customer", "acme"), ("stage", "approved")))).items]
    assert record.tags == {"team": "support", "customer": "acme", "stage": "approved"}
    assert kinds == ["started", "tagged", "step", "promise", "tagged", "completed"]
    assert found == ["t1"]


async def test_tags_written_at_exit_durability_reach_the_record(open_engine):
    async def agent(ctx: Context, x: int) -> int:
        await ctx.tag("batch", f"b{x}")
        return await ctx.run("double", lambda: x * 2)

    async with open_engine(durability="exit") as engine:
        outcome = await engine.run(agent, 4, id="e1")
        assert outcome.status == Status.COMPLETED
        assert engine.store.get("e1").tags == {"batch": "b4"}
        assert [r.id for r in engine.store.page(Query(tags=(("batch", "b4"),))).items] == ["e1"]


async def test_a_bad_tag_fails_the_invocation_saying_what_a_tag_may_be(open_engine):
    async def agent(ctx: Context) -> None:
        await ctx.tag("customer id", "acme")

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="bad")
        with pytest.raises(Exception, match="tag key 'a=b' is not allowed"):
            await engine.start(agent, id="bad2", tags={"a=b": "c"})
    assert outcome.status == Status.FAILED and "tag key 'customer id' is not allowed" in outcome.error.message
    assert TerminalError.__name__ == outcome.error.type
