"""JournalStore, LangGraph's long-term memory on journal stores: the scenarios of LangGraph's own
BaseStore tests (basic operations, batches, search filters, namespace listing, TTL), written
afresh and run over both stores."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp

from journal import LmdbStore, MemoryStore
from runtime.langgraph import JournalStore


@pytest.fixture(params=["memory", "lmdb"])
def store(request, tmp_path):
    db = MemoryStore() if request.param == "memory" else LmdbStore(tmp_path / "db")
    with JournalStore(db) as s:
        yield s
    db.close()


def test_put_get_update_delete(store):
    ns = ("users", "ada")
    assert store.get(ns, "prefs") is None
    store.put(ns, "prefs", {"tone": "brief"})
    first = store.get(ns, "prefs")
    assert (first.namespace, first.key, first.value) == (ns, "prefs", {"tone": "brief"})
    store.put(ns, "prefs", {"tone": "warm"})
    second = store.get(ns, "prefs")
    assert second.value == {"tone": "warm"}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    store.delete(ns, "prefs")
    assert store.get(ns, "prefs") is None
    store.delete(ns, "never")  # deleting what is not there is fine


def test_namespaces_are_separate_and_labels_are_checked(store):
    store.put(("a", "b"), "k", {"v": 1})
    store.put(("a",), "k", {"v": 2})
    store.put(("ab",), "k", {"v": 3})
    assert store.get(("a", "b"), "k").value == {"v": 1}
    assert store.get(("a",), "k").value == {"v": 2}
    assert [i.namespace for i in store.search(("a",))] == [("a",), ("a", "b")]
    for bad in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 0})


def test_a_batch_returns_results_in_order_and_applies_puts_after_reads(store):
    store.put(("docs",), "old", {"n": 1})
    results = store.batch([
        PutOp(("docs",), "new", {"n": 2}),
        GetOp(("docs",), "old"),
        GetOp(("docs",), "new"),  # not yet: puts land at the end of the batch
        SearchOp(("docs",)),
        ListNamespacesOp(),
        PutOp(("docs",), "old", None),
    ])
    assert results[0] is None and results[5] is None
    assert results[1].value == {"n": 1} and results[2] is None
    assert [i.key for i in results[3]] == ["old"]
    assert results[4] == [("docs",)]
    assert store.get(("docs",), "old") is None and store.get(("docs",), "new").value == {"n": 2}


def test_search_filters_fields_operators_and_nested_values(store):
    for i in range(6):
        store.put(("items", f"g{i % 2}"), f"k{i}", {"n": i, "kind": "odd" if i % 2 else "even",
                                                     "meta": {"tag": f"t{i % 3}"}, "tags": ["a", str(i)]})
    def keys(**kw):
        return [i.key for i in store.search(("items",), limit=100, **kw)]
    assert keys(filter={"kind": "odd"}) == ["k1", "k3", "k5"]
    assert keys(filter={"n": {"$gte": 2, "$lt": 5}}) == ["k2", "k4", "k3"]
    assert keys(filter={"n": {"$ne": 0}, "kind": "even"}) == ["k2", "k4"]
    assert keys(filter={"meta": {"tag": "t0"}}) == ["k0", "k3"]
    assert keys(filter={"tags": ["a", "4"]}) == ["k4"]
    assert keys(filter={"n": {"$gt": "x"}}) == []  # not comparable: no match, no error
    assert keys(filter={"missing": 1}) == []
    assert [i.key for i in store.search(("items", "g0"))] == ["k0", "k2", "k4"]


def test_search_pages_with_limit_and_offset(store):
    for i in range(7):
        store.put(("p",), f"k{i}", {"i": i})
    assert [i.key for i in store.search(("p",), limit=3)] == ["k0", "k1", "k2"]
    assert [i.key for i in store.search(("p",), limit=3, offset=3)] == ["k3", "k4", "k5"]
    assert [i.key for i in store.search(("p",), limit=3, offset=6)] == ["k6"]
    assert store.search(("p",), offset=10) == []
    # A query needs a vector index, which this store has not: it is ignored, filters still apply.
    assert [i.key for i in store.search(("p",), query="anything", filter={"i": 1})] == ["k1"]


@pytest.fixture
def tree(store):
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
               ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")]:
        store.put(ns, "k", {"x": 1})
    return store


def test_list_namespaces_by_prefix_suffix_wildcard_and_depth(tree):
    assert tree.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert tree.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert tree.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert tree.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert tree.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert tree.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert tree.list_namespaces(max_depth=1) == [("a",), ("admin",), ("b",), ("users",)]
    assert tree.list_namespaces(prefix=("users",)) == [("users", "123"), ("users", "456", "settings")]
    assert tree.list_namespaces(prefix=("nope",)) == []


def test_list_namespaces_pages(tree):
    everything = tree.list_namespaces(limit=100)
    assert len(everything) == 9 and everything == sorted(everything)
    assert tree.list_namespaces(limit=4) + tree.list_namespaces(limit=4, offset=4) + tree.list_namespaces(offset=8) == everything


def test_a_deleted_items_namespace_disappears_from_listings(store):
    store.put(("x", "y"), "k", {"v": 1})
    store.delete(("x", "y"), "k")
    assert store.list_namespaces() == []


def _expire_soon(store, monkeypatch, minutes):
    """Move the store's clock forward by `minutes` (TTLs are minutes; tests cannot wait them)."""
    import runtime._handler._memory_table as table
    real = table._now_us
    monkeypatch.setattr(table, "_now_us", lambda: real() + int(minutes * 60e6))


def test_ttl_hides_expired_items_and_sweeping_removes_them(tmp_path, monkeypatch):
    with JournalStore(LmdbStore(tmp_path / "db"), ttl={"default_ttl": 1, "refresh_on_read": False}) as store:
        store.put(("s",), "short", {"v": 1})
        store.put(("s",), "long", {"v": 2}, ttl=10)
        store.put(("s",), "forever", {"v": 3}, ttl=None)
        _expire_soon(store, monkeypatch, 2)
        assert store.get(("s",), "short") is None
        assert [i.key for i in store.search(("s",))] == ["forever", "long"]
        assert store.sweep_ttl() == 1
        _expire_soon(store, monkeypatch, 11)
        assert [i.key for i in store.search(("s",))] == ["forever"]
        assert store.sweep_ttl() == 1
        store.db.close()


def test_reading_refreshes_a_ttl_unless_told_not_to(tmp_path, monkeypatch):
    import runtime._handler._memory_table as table
    real = table._now_us
    with JournalStore(MemoryStore(), ttl={"default_ttl": 1}) as store:
        store.put(("s",), "k", {"v": 1})
        store.put(("s",), "q", {"v": 2})
        monkeypatch.setattr(table, "_now_us", lambda: real() + int(50e6))  # 50 s later
        assert store.get(("s",), "k") is not None  # refreshed: lives another minute from now
        assert store.get(("s",), "q", refresh_ttl=False) is not None
        monkeypatch.setattr(table, "_now_us", lambda: real() + int(100e6))  # 100 s after the put
        assert store.get(("s",), "k") is not None
        assert store.get(("s",), "q") is None


def test_the_async_api_and_memory_surviving_reopening(tmp_path):
    async def main():
        async with JournalStore(tmp_path / "db") as store:
            await store.aput(("users", "ada"), "prefs", {"tone": "brief"})
            assert (await store.aget(("users", "ada"), "prefs")).value == {"tone": "brief"}
            assert [i.key for i in await store.asearch(("users",))] == ["prefs"]
            assert await store.alist_namespaces() == [("users", "ada")]

    asyncio.run(main())
    with JournalStore(tmp_path / "db") as store:
        assert store.get(("users", "ada"), "prefs").value == {"tone": "brief"}


def test_values_that_cannot_be_stored_are_clear_errors(store):
    from runtime import JournalError
    with pytest.raises(JournalError, match="cannot be stored"):
        store.put(("x",), "k", {"f": object()})


def test_a_graph_node_reads_and_writes_memory_through_the_runtime(tmp_path):
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    from runtime.langgraph import JournalSaver

    class State(TypedDict):
        user: str
        seen: int

    def remember(state: State, runtime: Runtime) -> dict:
        ns = ("visits", state["user"])
        item = runtime.store.get(ns, "count")
        seen = (item.value["n"] if item else 0) + 1
        runtime.store.put(ns, "count", {"n": seen})
        return {"seen": seen}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    with JournalSaver(tmp_path / "db") as saver, JournalStore(tmp_path / "db") as memory:
        graph = builder.compile(checkpointer=saver, store=memory)
        for thread, expected in [("t1", 1), ("t2", 2), ("t1", 3)]:  # memory is shared across threads
            assert graph.invoke({"user": "ada", "seen": 0}, {"configurable": {"thread_id": thread}})["seen"] == expected
