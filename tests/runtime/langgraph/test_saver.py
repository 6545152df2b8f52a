"""What LangGraph relies on from a checkpointer beyond the conformance suite, and the saver's own
promises (reopening, strict deserialisation, closing)."""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import threading
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.graph import END, START, StateGraph

from journal import LmdbStore, MemoryStore
from journal.errors import StoreError
from runtime.langgraph import CheckpointError, JournalSaver


def put_one(saver, thread="t", values=None, parent=None):
    config = generate_config(thread)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    values = values or {}
    versions = {k: saver.get_next_version(None) for k in values}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(config, checkpoint, generate_metadata(), versions)


def test_writes_may_arrive_before_their_checkpoint_and_from_threads(tmp_path):
    with JournalSaver(tmp_path / "db") as saver:
        checkpoint = generate_checkpoint()
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}}
        workers = [
            threading.Thread(target=saver.put_writes, args=(config, [("ch", f"v{i}")], f"task-{i}", f"path-{i}"))
            for i in range(8)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert saver.get_tuple(config) is None  # no checkpoint yet
        saver.put(generate_config("t"), checkpoint, generate_metadata(), {})
        found = saver.get_tuple(config)
        assert sorted(found.pending_writes) == [(f"task-{i}", "ch", f"v{i}") for i in range(8)]


def test_pending_writes_come_back_ordered_by_task_path_task_id_and_index():
    saver = JournalSaver(MemoryStore())
    stored = put_one(saver)
    saver.put_writes(stored, [("a", 1), ("b", 2)], "task-z", "~path-1")
    saver.put_writes(stored, [("c", 3)], "task-a", "~path-2")
    saver.put_writes(stored, [("__error__", "boom"), ("d", 4)], "task-b", "~path-1")
    saver.put_writes(stored, [("e", 5)], "task-q", "")
    writes = saver.get_tuple(stored).pending_writes
    assert writes == [
        ("task-q", "e", 5),
        ("task-b", "__error__", "boom"), ("task-b", "d", 4),  # the error write has index -1
        ("task-z", "a", 1), ("task-z", "b", 2),
        ("task-a", "c", 3),
    ]


def test_a_retried_task_keeps_its_first_regular_writes_and_its_latest_error():
    saver = JournalSaver(MemoryStore())
    stored = put_one(saver)
    saver.put_writes(stored, [("a", "first"), ("__error__", "e1")], "task", "p")
    saver.put_writes(stored, [("a", "second"), ("__error__", "e2")], "task", "p")
    assert saver.get_tuple(stored).pending_writes == [("task", "__error__", "e2"), ("task", "a", "first")]


def test_checkpoints_survive_reopening_the_store(tmp_path):
    with JournalSaver(tmp_path / "db") as saver:
        first = put_one(saver, values={"messages": ["hello"]})
        second = put_one(saver, values={"messages": ["hello", "world"]}, parent=first)
        saver.put_writes(second, [("messages", "pending")], "task")
    with JournalSaver(tmp_path / "db") as saver:
        found = saver.get_tuple(generate_config("t"))
        assert found.config["configurable"]["checkpoint_id"] == second["configurable"]["checkpoint_id"]
        assert found.checkpoint["channel_values"] == {"messages": ["hello", "world"]}
        assert found.parent_config["configurable"]["checkpoint_id"] == first["configurable"]["checkpoint_id"]
        assert found.pending_writes == [("task", "messages", "pending")]
        assert len(list(saver.list(generate_config("t")))) == 2


class _NoIo:
    """A store whose every method fails: proves a call touches no storage."""

    def __getattr__(self, name):
        raise AssertionError(f"get_next_version touched the store ({name})")


def test_get_next_version_does_no_io_and_increases():
    saver = JournalSaver(MemoryStore())
    saver.store = _NoIo()
    versions = [None]
    for _ in range(20):
        versions.append(saver.get_next_version(versions[-1]))
    assert versions[1:] == sorted(versions[1:])
    assert len(set(versions)) == 21
    assert saver.get_next_version(7).startswith(f"{8:032}.")


@dataclasses.dataclass
class Note:
    text: str
    built: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        CONSTRUCTED.append(self.text)


CONSTRUCTED: list[str] = []


def test_deserialisation_rebuilds_only_allowed_classes():
    saver = JournalSaver(MemoryStore())
    stored = put_one(saver, values={"note": Note("hi")})
    CONSTRUCTED.clear()
    value = saver.get_tuple(stored).checkpoint["channel_values"]["note"]
    assert not isinstance(value, Note) and CONSTRUCTED == []
    # The shallow copy a compiled graph makes for its state types shares the store and reads them.
    allowed = saver.with_allowlist([Note])
    assert allowed is not saver and allowed.store is saver.store
    assert allowed.get_tuple(stored).checkpoint["channel_values"]["note"] == Note("hi")
    put_one(allowed, thread="u", values={"x": 1})
    assert saver.get_tuple(generate_config("u")).checkpoint["channel_values"] == {"x": 1}


class State(TypedDict):
    items: Annotated[list, operator.add]
    note: Note | None


def _graph(saver):
    builder = StateGraph(State)
    builder.add_node("add", lambda state: {"items": [len(state["items"])], "note": Note(f"n{len(state['items'])}")})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def test_a_compiled_graph_keeps_its_state_across_processes_worth_of_reopening(tmp_path):
    config = {"configurable": {"thread_id": "chat"}}
    with JournalSaver(tmp_path / "db") as saver:
        assert _graph(saver).invoke({"items": ["start"]}, config)["items"] == ["start", 1]
    with JournalSaver(tmp_path / "db") as saver:
        graph = _graph(saver)  # compiling allows the state's types (the with_allowlist copy)
        out = graph.invoke({"items": ["again"]}, config)
        assert out["items"] == ["start", 1, "again", 3]
        assert out["note"] == Note("n3")
        assert len(list(graph.get_state_history(config))) == 6


def test_the_async_api_runs_a_graph_with_every_durability(tmp_path):
    async def main():
        async with JournalSaver(tmp_path / "db") as saver:
            graph = _graph(saver)
            for i, durability in enumerate(["sync", "async", "exit"]):
                config = {"configurable": {"thread_id": f"t{i}"}}
                out = await graph.ainvoke({"items": ["x"]}, config, durability=durability)
                assert out["items"] == ["x", 1]
                assert (await graph.aget_state(config)).values["items"] == ["x", 1]

    asyncio.run(main())


def test_closing_closes_only_a_store_the_saver_opened(tmp_path):
    store = LmdbStore(tmp_path / "db")
    with JournalSaver(store) as saver:
        put_one(saver)
    assert store.table_scan("lg_checkpoints")  # still open
    store.close()
    saver = JournalSaver(tmp_path / "db2")
    saver.close()
    saver.close()  # idempotent
    assert saver.store._closed


@pytest.mark.parametrize(("db", "message"), [
    ("postgresql://127.0.0.1:1/x", r"cannot reach the journal store at postgresql://127.0.0.1:1/x \(tried for 0 s"),
    (42, "cannot open 42"),
])
def test_a_db_it_cannot_open_is_a_clear_error(db, message, monkeypatch):
    monkeypatch.setenv("JOURNAL_RECONNECT_FOR", "0")  # (it would try for 30 s, then say the same)
    with pytest.raises(StoreError, match=message):
        JournalSaver(db)


def test_bad_prune_strategy_and_oversized_thread_ids_are_clear_errors():
    saver = JournalSaver(MemoryStore())
    with pytest.raises(CheckpointError, match="unknown prune strategy 'newest'"):
        saver.prune(["t"], strategy="newest")
    with pytest.raises(StoreError, match="table key must be 1 to 480 bytes"):
        put_one(saver, thread="x" * 600)


def test_checkpoints_and_pending_writes_survive_sigkill(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    script = f"""
import sys, time
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from runtime.langgraph import JournalSaver
saver = JournalSaver({str(tmp_path / "db")!r})
stored = saver.put(generate_config("t"), generate_checkpoint(channel_values={{"a": 1}}, channel_versions={{"a": "1"}}),
                   generate_metadata(), {{"a": "1"}})
saver.put_writes(stored, [("a", 2)], "task", "path")
print(stored["configurable"]["checkpoint_id"], flush=True)
sys.stdin.read()  # hold on until killed
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    checkpoint_id = proc.stdout.readline().strip()  # waits for the line: the writes returned
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()  # reap it and close its pipes
    with JournalSaver(tmp_path / "db") as saver:
        found = saver.get_tuple(generate_config("t"))
    assert found.config["configurable"]["checkpoint_id"] == checkpoint_id
    assert found.checkpoint["channel_values"] == {"a": 1}
    assert found.pending_writes == [("task", "a", 2)]


@pytest.mark.parametrize("damage", ["record-garbage", "record-a-map", "blob-garbage", "write-garbage"])
def test_a_damaged_checkpoint_is_a_corrupt_entry_naming_the_thread_and_checkpoint(damage):
    import msgspec

    from journal import TablePut
    from journal.errors import CorruptEntry
    from runtime.langgraph._saver import BLOBS, CHECKPOINTS, WRITES

    store = MemoryStore()
    saver = JournalSaver(store)
    stored = put_one(saver, thread="support-7", values={"messages": ["hi"]})
    saver.put_writes(stored, [("messages", "more")], "task-1", "")
    checkpoint_id = stored["configurable"]["checkpoint_id"]
    table = {"record": CHECKPOINTS, "blob": BLOBS, "write": WRITES}[damage.split("-")[0]]
    [(key, raw)] = store.table_scan(table, b"")
    if damage == "record-a-map":  # what decoded as `Expected array, got object`
        value = msgspec.msgpack.encode({"type": "msgpack"})
    elif damage == "blob-garbage":  # the blob's frame decodes; the value inside it does not (ormsgpack)
        value = msgspec.msgpack.encode(["msgpack", b"\xc1\xc1\xc1"])
    else:
        value = b"\xde\xad\xbe\xef"
    store.table_write([TablePut(table, key, value)], durable=False)
    for read in (lambda: saver.get_tuple(stored), lambda: saver.get_tuple(generate_config("support-7")),
                 lambda: list(saver.list(generate_config("support-7")))):
        with pytest.raises(CorruptEntry) as caught:
            read()
        assert "thread 'support-7'" in str(caught.value) and repr(checkpoint_id) in str(caught.value)
        assert caught.value.invocation_id == "support-7"
