"""`Engine.cancel(id, rollback=True)`: the state changes of a cancelled invocation are undone
with its `cancelled` entry, so the key's next invocation sees the state as it was before."""

import pytest

from journal import Cancelled as CancelledEntry
from journal import MemoryStore, Renew, Status, decode_entry, decode_value
from runtime import Cancelled, Context, Engine
from runtime.errors import RollbackImpossible

pytestmark = pytest.mark.anyio


def _append(history: list, items: list) -> list:
    return [*history, *items]


async def first_turn(ctx: Context) -> str:
    ctx.state.set("topic", "tides")
    ctx.state.update("history", ["hello"], reducer=_append, default=[])
    ctx.state.set("untouched", 1)
    await ctx.run("noop", lambda: None)
    return "ok"


_compensations: list[str] = []


def _compensate(crash: bool) -> str:
    _compensations.append("ran")
    if crash and len(_compensations) == 1:
        raise ProcessDied()
    return "undone"


class ProcessDied(BaseException):
    """Stands in for the process dying in the middle of the compensating step."""


async def second_turn(ctx: Context, crash: bool) -> str:
    ctx.state.set("topic", "storms")  # had a value: restored
    ctx.state.update("history", ["more"], reducer=_append, default=[])
    ctx.state.set("draft", "half-written")  # did not exist: removed again
    ctx.state.update("history", ["and more"], reducer=_append, default=[])  # a second change of one name
    await ctx.run("work", lambda: "done")
    try:
        await ctx.promise("approve")
    except Cancelled:
        ctx.state.set("compensated", True)  # a compensation's change is undone too
        await ctx.run("compensate", _compensate, crash)
        raise
    return "approved"


async def reads_state(ctx: Context) -> dict:
    return {name: await ctx.state.get(name) for name in await ctx.state.keys()}


def _state(store, key: str) -> dict:
    return {name: decode_value(raw) for name, raw in store.state(key).items()}


BEFORE = {"topic": "tides", "history": ["hello"], "untouched": 1}


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_cancel_with_rollback_restores_the_keys_state_atomically_with_the_cancelled_entry(anyio_backend):
    _compensations.clear()
    store = MemoryStore()
    engine = Engine(store)
    await engine.run(first_turn, key="k", id="one")
    assert (await engine.run(second_turn, False, key="k", id="two")).status == Status.SUSPENDED
    assert _state(store, "k")["draft"] == "half-written"

    outcome = await engine.cancel("two", rollback=True)
    assert outcome.status == Status.CANCELLED
    assert _state(store, "k") == BEFORE
    last = decode_entry(store.entries("two")[-1][1])
    assert isinstance(last, CancelledEntry) and last.rolled_back == ["compensated", "draft", "history", "topic"]
    assert _compensations == ["ran"]
    # The key's next invocation sees the state as it was before the cancelled one.
    assert (await engine.run(reads_state, key="k", id="three")).result == BEFORE


async def test_cancel_without_rollback_keeps_the_changes():
    store = MemoryStore()
    engine = Engine(store)
    await engine.run(first_turn, key="k", id="one")
    await engine.run(second_turn, False, key="k", id="two")
    assert (await engine.cancel("two")).status == Status.CANCELLED
    state = _state(store, "k")
    assert state["topic"] == "storms" and state["draft"] == "half-written" and state["compensated"] is True
    assert decode_entry(store.entries("two")[-1][1]).rolled_back == []


async def test_a_crash_in_the_compensation_after_a_rollback_request_still_rolls_back_once_resumed():
    _compensations.clear()
    store = MemoryStore()
    engine = Engine(store)
    await engine.run(first_turn, key="k", id="one")
    await engine.run(second_turn, True, key="k", id="two")
    await engine.cancel("two", run=False, rollback=True)  # recorded; the next run receives it
    with pytest.raises(ProcessDied):
        await Engine(store).resume("two")
    assert _state(store, "k")["compensated"] is True  # the crashed run's buffered change was written
    lease = store.lease("two")
    store.apply_one(Renew("two", lease.epoch, 0, 0))  # the dead owner's lease lapses
    outcome = await Engine(store).resume("two")
    assert outcome.status == Status.CANCELLED
    assert _compensations == ["ran", "ran"]  # caught in flight by the crash: run once more
    assert _state(store, "k") == BEFORE


async def test_rollback_of_changes_journaled_without_their_prior_values_is_refused_before_anything():
    from journal import Acquire, Append, StateSet, encode_entry, encode_value

    store = MemoryStore()
    engine = Engine(store)
    await engine.start(second_turn, False, key="k", id="old")
    epoch, _ = store.apply_one(Acquire("old", "dead-process", "host", 1, 10**9, 0))
    change = StateSet("topic", 1, encode_value("storms"), prev=0)  # as older versions journaled it
    store.apply_one(Append("old", epoch, [(1, encode_entry(change))], state=[("topic", bytes(encode_value("storms")))]))
    with pytest.raises(RollbackImpossible, match="'topic'"):
        await engine.cancel("old", rollback=True)
    assert not store.require("old").cancel_requested
