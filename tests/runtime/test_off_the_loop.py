"""With a store whose calls wait on the network (`blocking`, as PostgreSQL's), no store call
a handler's context makes runs on the event loop's thread."""

import threading

import pytest

from runtime import Context, Engine

from ..journal.helpers import NetworkStore

pytestmark = pytest.mark.anyio

@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_state_and_memory_reach_a_network_store_only_off_the_loop():
    async def agent(ctx: Context, text: str) -> list:
        ctx.state.set("seen", True)
        history = ctx.state.update("history", text, reducer=lambda old, new: [*old, new], default=[])
        await ctx.state.get("seen")
        await ctx.memory.put(("notes",), "last", {"text": text})
        item = await ctx.memory.get(("notes",), "last")
        await ctx.memory.search(("notes",))
        await ctx.memory.list_namespaces()
        await ctx.memory.delete(("notes",), "last")
        await ctx.run("step", lambda: item.value["text"])
        return history

    store = NetworkStore()
    store.loop_thread = threading.get_ident()
    async with Engine.open(store=store) as engine:
        first = await engine.run(agent, "hello", key="thread-1")
        second = await engine.run(agent, "again", key="thread-1")
    assert first.result == ["hello"] and second.result == ["hello", "again"]
    assert store.on_loop == []
