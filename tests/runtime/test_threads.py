"""Keyed threads: durable state, one turn at a time in arrival order, and divergences in it."""

import anyio
import pytest

from journal import Status, decode_value
from runtime import Context

from .crashing import armed, crash_flag, crash_once, crash_then_resume, kinds, program

pytestmark = pytest.mark.anyio


def append(messages, message):
    return [*(messages or []), message]


async def chat(ctx: Context, message: str) -> list:
    history = await ctx.state.get("history", default=[])
    reply = await ctx.run("reply", lambda: f"echo({message}) after {len(history)} turns")
    return ctx.state.update("history", [message, reply], reducer=append)


async def test_a_thread_remembers_earlier_turns(open_engine):
    async with open_engine() as engine:
        await engine.run(chat, "hi", key="thread-1")
        await engine.run(chat, "again", key="thread-1")
        third = await engine.run(chat, "third", key="thread-1")
        other = await engine.run(chat, "elsewhere", key="thread-2")
        state = engine.store.state("thread-1")
    assert [turn[0] for turn in third.result] == ["hi", "again", "third"]
    assert third.result[2][1] == "echo(third) after 2 turns"
    assert len(other.result) == 1
    assert [t[0] for t in decode_value(state["history"])] == ["hi", "again", "third"]


async def test_state_changes_commit_with_their_entry_and_replay_returns_the_same_reads(open_engine):
    seen = []

    async def agent(ctx: Context) -> int:
        count = await ctx.state.get("count", default=0)
        seen.append(count)
        ctx.state.set("count", count + 1)
        await ctx.promise("go")
        return await ctx.state.get("count")

    async with open_engine() as engine:
        assert (await engine.run(agent, key="k", id="a")).status == Status.SUSPENDED
        assert decode_value(engine.store.state("k")["count"]) == 1
        await engine.resolve("a", "go", True)
        done = await engine.resume("a")
        assert kinds(engine.store, "a") == ["started", "state_get", "state_set", "promise", "state_get", "completed"]
    assert done.result == 1 and set(seen) == {0}  # the replayed read saw 0 again, not the 1 it wrote


async def test_state_keys_clear_and_the_missing_key_error(open_engine):
    async def agent(ctx: Context) -> list:
        ctx.state.set("a", 1)
        ctx.state.set("b", 2)
        ctx.state.clear("a")
        return await ctx.state.keys()

    async def keyless(ctx: Context) -> None:
        await ctx.state.get("x")

    async with open_engine() as engine:
        assert (await engine.run(agent, key="k")).result == ["b"]
        assert list(engine.store.state("k")) == ["b"]
        out = await engine.run(keyless)
        assert out.status == Status.FAILED and "needs a key" in out.error.message


async def test_invocations_of_one_key_run_one_at_a_time_in_arrival_order(open_engine):
    async def waits(ctx: Context, n: int) -> int:
        await ctx.promise("go")
        ctx.state.update("order", n, reducer=append)
        return n

    async with open_engine() as engine:
        assert (await engine.run(waits, 1, key="q", id="first")).status == Status.SUSPENDED
        await engine.start(waits, 2, key="q", id="second")
        assert engine.store.key_queue("q") == ["first", "second"]
        with pytest.raises(Exception, match="queued behind 'first'"):
            await engine.resume("second")
        await engine.resolve("second", "go", True, early=True)  # queued: it has not asked yet
        await engine.resolve("first", "go", True)
        assert (await engine.resume("first")).result == 1
        assert engine.store.key_queue("q") == ["second"]
        assert (await engine.resume("second")).result == 2
        assert decode_value(engine.store.state("q")["order"]) == [1, 2]


async def test_a_changed_state_name_is_a_divergence(open_engine):
    async def old(ctx: Context) -> None:
        await ctx.state.get("history")
        await ctx.run("crash", crash_once)

    async def new(ctx: Context) -> None:
        await ctx.state.get("messages")

    armed["on"] = True
    outcome, _ = await crash_then_resume(open_engine, old, new, key="t")
    assert outcome.status == Status.DIVERGED and "'history'" in outcome.divergence and "'messages'" in outcome.divergence


async def test_a_replayed_state_read_returns_the_value_not_its_bytes(open_engine):

    seen = []

    async def writer(ctx: Context) -> None:
        ctx.state.set("history", ["hi"])
        await ctx.run("noop", lambda: None)

    async def reader(ctx: Context) -> list:
        history = await ctx.state.get("history", default=[])
        seen.append(history)
        await ctx.run("crash", crash_once)
        return history

    async with open_engine() as engine:
        await engine.run(writer, key="t")
    armed["on"] = True
    outcome, _ = await crash_then_resume(open_engine, reader, reader, key="t")
    assert outcome.result == ["hi"]
    assert len(seen) >= 2 and all(s == ["hi"] for s in seen)  # the live read and the replayed one


async def test_run_of_an_invocation_queued_behind_a_suspended_one_returns_pending(open_engine):
    async def waits(ctx: Context, n: int) -> int:
        await ctx.promise("go")
        return n

    async with open_engine() as engine:
        await engine.run(waits, 1, key="q", id="first")
        with anyio.fail_after(60):  # a hang guard
            out = await engine.run(waits, 2, key="q", id="second")
    assert out.status == Status.PENDING and out.waiting == "turn:first"


async def test_a_keyed_diverged_invocation_is_forked_and_the_fork_runs_once_the_source_is_cancelled(open_engine):
    from journal import fork

    crash_flag["armed"] = True
    outcome, _ = await crash_then_resume(open_engine, program("plan", "search"), program("plan", "renamed"),
                                          key="thread")
    assert outcome.status == Status.DIVERGED
    async with open_engine() as engine:
        from runtime._handler._handlers import _by_path

        _by_path[engine.store.get("inv").handler] = program("plan", "renamed")
        forked = fork(engine.store, "inv", at=2, new_id="inv-fixed")
        assert forked.status == Status.PENDING
        assert engine.store.key_queue("thread") == ["inv", "inv-fixed"]
        assert (await engine.cancel("inv")).status == Status.CANCELLED  # abandon the diverged one
        done = await engine.resume("inv-fixed")
    assert done.status == Status.COMPLETED and done.result == ["plan", "renamed"]
