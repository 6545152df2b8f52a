"""With a store whose calls wait on the network (`blocking`, as PostgreSQL's), the async
methods of the checkpointer and of the LangGraph store call it off the event loop."""

import threading

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import GetOp, PutOp, SearchOp

from runtime.langgraph import JournalSaver, JournalStore

from ...journal.helpers import NetworkStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_the_checkpointer_and_the_store_reach_a_network_store_only_off_the_loop():
    store = NetworkStore()
    store.loop_thread = threading.get_ident()
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with JournalSaver(store) as saver:
        saved = await saver.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        found = await saver.aget_tuple(saved)
        listed = [item async for item in saver.alist(config)]
    assert found is not None and len(listed) == 1
    memory = JournalStore(store)
    await memory.abatch([PutOp(("users",), "ada", {"tone": "brief"})])
    got, searched = await memory.abatch([GetOp(("users",), "ada"), SearchOp(("users",))])
    assert got.value == {"tone": "brief"} and len(searched) == 1
    assert store.on_loop == []
