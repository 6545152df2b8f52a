"""`if_busy`: what a start does to a key whose thread has an unfinished turn (here a turn
suspended on an approval, the case of a user writing again while the agent waits)."""

import anyio
import pytest

from journal import Status, decode_value
from runtime import Cancelled, Context, Engine, KeyBusy

from ..waiting import until

pytestmark = pytest.mark.anyio

compensated: list[str] = []


async def turn(ctx: Context, message: str) -> str:
    ctx.state.set("last", message)
    await ctx.run("draft", lambda: f"draft for {message}")
    try:
        await ctx.promise("approve")  # waits for a human who may never come
    except Cancelled:
        await ctx.run("compensate", lambda: compensated.append(message) or "undone")
        raise
    return f"sent {message}"


async def quick(ctx: Context, message: str) -> str:
    ctx.state.set("last", message)
    return f"answered {message}"


def _state(store, key):
    return {name: decode_value(raw) for name, raw in store.state(key).items()}


async def _suspended_turn(engine, invocation_id="t1"):
    out = await engine.run(turn, "first", id=invocation_id, key="chat")
    assert out.status == Status.SUSPENDED


async def test_reject_refuses_while_a_turn_waits_on_an_approval_and_records_nothing(open_engine):
    async with open_engine() as engine:
        await _suspended_turn(engine)
        with pytest.raises(KeyBusy, match="'t1'") as caught:
            await engine.start(quick, "second", id="t2", key="chat", if_busy="reject")
        assert caught.value.busy == ("t1",) and engine.store.get("t2") is None
        # A free key takes it.
        record = await engine.start(quick, "other", id="o1", key="other-chat", if_busy="reject")
        assert record.status == Status.PENDING


async def test_enqueue_waits_behind_the_unfinished_turn(open_engine):
    async with open_engine() as engine:
        await _suspended_turn(engine)
        await engine.start(quick, "second", id="t2", key="chat", if_busy="enqueue")
        assert engine.store.key_queue("chat") == ["t1", "t2"]
        assert engine.store.get("t1").status == Status.SUSPENDED and not engine.store.get("t1").cancel_requested


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
async def test_interrupt_cancels_the_waiting_turn_runs_its_compensation_and_runs_the_new_one(open_engine, strategy):
    compensated.clear()
    async with open_engine(poll_interval=0.02) as engine:
        await _suspended_turn(engine)
        await engine.start(quick, "second", id="t2", key="chat", if_busy=strategy)
        assert engine.store.get("t1").cancel_requested
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: engine.store.get("t2").finished, "the new turn to run")
            tg.cancel_scope.cancel()
        assert engine.store.get("t1").status == Status.CANCELLED
        assert compensated == ["first"]
        assert (await engine.get("t2")).result == "answered second"
        assert _state(engine.store, "chat") == {"last": "second"}


async def test_rollback_restores_the_keys_state_from_before_the_interrupted_turn(open_engine):
    async def reads(ctx: Context) -> dict:
        return {name: await ctx.state.get(name) for name in await ctx.state.keys()}

    async with open_engine(poll_interval=0.02) as engine:
        assert (await engine.run(quick, "zero", id="t0", key="chat")).status == Status.COMPLETED
        await _suspended_turn(engine)
        assert _state(engine.store, "chat") == {"last": "first"}
        await engine.start(reads, id="t2", key="chat", if_busy="rollback")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: engine.store.get("t2").finished, "the new turn to run")
            tg.cancel_scope.cancel()
        assert (await engine.get("t2")).result == {"last": "zero"}  # t1's change was undone


async def test_interrupt_keeps_the_state_changes_of_the_interrupted_turn(open_engine):
    async def reads(ctx: Context) -> dict:
        return {name: await ctx.state.get(name) for name in await ctx.state.keys()}

    async with open_engine(poll_interval=0.02) as engine:
        await _suspended_turn(engine)
        await engine.start(reads, id="t2", key="chat", if_busy="interrupt")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            await until(lambda: engine.store.get("t2").finished, "the new turn to run")
            tg.cancel_scope.cancel()
        assert (await engine.get("t2")).result == {"last": "first"}


async def test_two_concurrent_rejecting_starts_on_an_idle_key_never_both_win(open_engine, db):
    async with open_engine() as first, Engine.open(db) as second:
        outcomes: dict[str, object] = {}

        async def one(engine, name):
            try:
                outcomes[name] = (await engine.start(quick, name, id=name, key="race", if_busy="reject")).id
            except KeyBusy as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, first, "a")
            tg.start_soon(one, second, "b")
        won = [name for name, got in outcomes.items() if isinstance(got, str)]
        assert len(won) == 1, outcomes
        assert first.store.key_queue("race") == won


async def test_if_busy_needs_a_key_and_a_known_strategy(open_engine):
    async with open_engine() as engine:
        with pytest.raises(ValueError, match="needs a key"):
            await engine.start(quick, "x", if_busy="reject")
        with pytest.raises(ValueError, match="not one of"):
            await engine.start(quick, "x", key="k", if_busy="replace")
