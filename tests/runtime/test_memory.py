"""`ctx.memory`: long-term memory shared across invocations, whose reads and writes are journaled."""

import pytest

from journal import Status, decode_entry, kind_of, name_of
from runtime import Context, MemoryItem, MemoryTable

pytestmark = pytest.mark.anyio


async def test_memory_is_shared_across_invocations_and_journaled_as_steps(open_engine):
    async def remember(ctx: Context, fact: str) -> list[str]:
        item = await ctx.memory.get(("users", "ada"), "facts")
        facts = (item.value["facts"] if item else []) + [fact]
        await ctx.memory.put(("users", "ada"), "facts", {"facts": facts})
        return facts

    async with open_engine() as engine:
        assert (await engine.run(remember, "likes tea", id="one")).result == ["likes tea"]
        assert (await engine.run(remember, "codes in Python", id="two")).result == ["likes tea", "codes in Python"]
        entries = [decode_entry(d) for _, d in engine.store.entries("two")]
        assert [(kind_of(e), name_of(e)) for e in entries] == [
            ("started", None), ("step", "memory.get users/ada/facts"), ("step", "memory.put users/ada/facts"),
            ("completed", None)]


async def test_replay_sees_what_the_first_run_read_and_does_not_write_again(open_engine):
    async def handler(ctx: Context) -> str:
        item = await ctx.memory.get(("cfg",), "model")
        await ctx.memory.put(("log",), ctx.invocation_id, {"model": item.value["name"]})
        await ctx.promise("go")  # suspends: the resume replays the read and the write
        return item.value["name"]

    async with open_engine() as engine:
        table = MemoryTable(engine.store)
        table.put(("cfg",), "model", {"name": "small"})
        assert (await engine.run(handler, id="h")).status == Status.SUSPENDED
        written = table.get(("log",), "h")
        table.put(("cfg",), "model", {"name": "large"})  # changed since the first run read it
        table.delete(("log",), "h")
        await engine.resolve("h", "go", True)
        outcome = await engine.resume("h")
        assert outcome.result == "small"
        assert table.get(("log",), "h") is None  # the journaled write was not repeated
        assert written.value == {"model": "small"}


async def test_search_list_namespaces_and_delete(open_engine):
    async def handler(ctx: Context) -> list:
        await ctx.memory.put(("notes", "a"), "1", {"topic": "tea", "n": 1})
        await ctx.memory.put(("notes", "b"), "2", {"topic": "code", "n": 2})
        found = await ctx.memory.search(("notes",), filter={"n": {"$gt": 1}})
        spaces = await ctx.memory.list_namespaces(prefix=("notes",))
        await ctx.memory.delete(("notes", "a"), "1")
        gone = await ctx.memory.get(("notes", "a"), "1")
        return [[(i.namespace, i.key) for i in found], spaces, gone]

    async with open_engine() as engine:
        result = (await engine.run(handler, id="s")).result
    assert result == [[[["notes", "b"], "2"]], [["notes", "a"], ["notes", "b"]], None]


async def test_items_come_back_typed(open_engine):
    async def handler(ctx: Context) -> bool:
        await ctx.memory.put(("t",), "k", {"v": 1})
        item = await ctx.memory.get(("t",), "k")
        return isinstance(item, MemoryItem) and item.namespace == ("t",) and item.created_at.tzinfo is not None

    async with open_engine() as engine:
        assert (await engine.run(handler, id="t")).result is True


async def test_a_bad_namespace_is_a_clear_error(open_engine):
    async def handler(ctx: Context) -> None:
        await ctx.memory.put(("a.b",), "k", {"v": 1})

    async with open_engine() as engine:
        outcome = await engine.run(handler, id="bad")
    assert outcome.status == Status.FAILED
    assert "labels are non-empty strings without '.'" in outcome.error.message
