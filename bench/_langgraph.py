"""LG: LangGraph savers on a one-node graph that loops on itself for 1,000 super-steps.

Each super-step LangGraph saves the node's writes (`put_writes`) and a checkpoint (`put`).
The same graph runs with `JournalSaver`, `SqliteSaver` (SQLite in WAL mode, as LangGraph
sets it up; SQLite fsyncs every commit) and `InMemorySaver`, in LangGraph's `sync`,
`async` and `exit` durability, through the sync API (`graph.invoke`), each on a fresh store.

`floors` measures, in the same repetition, what a super-step's saving cannot do without:
one raw LMDB put+commit+fsync, and the saver's own bytes written raw (the same keys and
values in the same two transactions, one fsync), beside the saver's calls made directly,
with no graph around them. JournalSaver's own cost is its time per super-step minus
InMemorySaver's, which does the same LangGraph work and no I/O.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from typing import Any, TypedDict

import lmdb
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from runtime.langgraph import JournalSaver

from . import _raw
from ._workloads import fresh_dir

SAVERS = ("journal", "sqlite", "memory")
DURABILITIES = ("sync", "async", "exit")
STEPS = 1000


class _State(TypedDict):
    count: int


def _graph(saver):
    builder = StateGraph(_State)
    builder.add_node("tick", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", lambda state: END if state["count"] >= STEPS else "tick")
    return builder.compile(checkpointer=saver)


def _open(saver: str, parent: str):
    if saver == "journal":
        return JournalSaver(fresh_dir(parent, "lg-journal"))
    if saver == "sqlite":
        path = os.path.join(fresh_dir(parent, "lg-sqlite"), "checkpoints.sqlite")
        return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    return InMemorySaver()


def loop(parent: str, saver: str, durability: str) -> dict:
    checkpointer = _open(saver, parent)
    try:
        graph = _graph(checkpointer)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": STEPS + 10}
        started = time.perf_counter()
        out = graph.invoke({"count": 0}, config, durability=durability)
        seconds = time.perf_counter() - started
        assert out["count"] == STEPS, out
        checkpoints = sum(1 for _ in checkpointer.list(config))
    finally:
        if saver == "sqlite":
            checkpointer.conn.close()
        elif saver == "journal":
            checkpointer.close()
    return {"seconds": seconds, "us_per_step": seconds / STEPS * 1e6, "checkpoints": checkpoints}


# -- floors -----------------------------------------------------------------------------------

_FLOOR_STEPS = 200
_recorded: list[tuple[str, tuple[Any, ...]]] = []


class _Recording(JournalSaver):
    """Keeps the arguments of every put and put_writes, to make the same calls again."""

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        _recorded.append(("put", (config, checkpoint, metadata, new_versions)))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):  # type: ignore[no-untyped-def]
        _recorded.append(("put_writes", (config, writes, task_id, task_path)))
        return super().put_writes(config, writes, task_id, task_path)


def _calls(parent: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The saver calls of `_FLOOR_STEPS` super-steps of the graph above, in `sync` durability."""
    if not _recorded:
        saver = _Recording(fresh_dir(parent, "lg-record"))
        try:
            graph = _graph(saver)
            config = {"configurable": {"thread_id": "bench"}, "recursion_limit": _FLOOR_STEPS + 10}
            graph.invoke({"count": STEPS - _FLOOR_STEPS}, config, durability="sync")
        finally:
            saver.close()
    return _recorded


def _direct_us(parent: str, calls: list[tuple[str, tuple[Any, ...]]]) -> float:
    """Microseconds per super-step of JournalSaver's calls made one after another, no graph."""
    saver = JournalSaver(fresh_dir(parent, "lg-direct"))
    try:
        started = time.perf_counter()
        for name, args in calls:
            getattr(saver, name)(*args)
        return (time.perf_counter() - started) / _steps(calls) * 1e6
    finally:
        saver.close()


def _raw_shaped_us(parent: str, calls: list[tuple[str, tuple[Any, ...]]]) -> float:
    """Microseconds per super-step to write the saver's bytes with bare LMDB: the same keys
    and values in one sub-database, a transaction per call, an fsync after each checkpoint."""
    encoder = JournalSaver(fresh_dir(parent, "lg-encode"), durable=False)
    try:
        txns = [(name == "put", [(op.table.encode() + b"\x00" + op.key, op.value) for op in (
            encoder._put_ops(*args) if name == "put" else encoder._writes_ops(*args))]) for name, args in calls]
    finally:
        encoder.close()
    env = lmdb.open(fresh_dir(parent, "lg-raw"), map_size=1 << 30, max_dbs=8, sync=False, metasync=False,
                    readahead=False)
    try:
        db = env.open_db(b"tables")
        started = time.perf_counter()
        for fsync, items in txns:
            with env.begin(write=True) as txn:
                for key, value in items:
                    txn.put(key, value, db=db)
            if fsync:
                env.sync(True)
        return (time.perf_counter() - started) / _steps(calls) * 1e6
    finally:
        env.close()


def _steps(calls: list[tuple[str, tuple[Any, ...]]]) -> int:
    return sum(1 for name, _ in calls if name == "put")


def floors(parent: str) -> dict:
    calls = _calls(parent)
    return {
        "fsynced_commit_us": _raw.fsynced_commit_us(_FLOOR_STEPS, parent=parent),
        "raw_shaped_us": _raw_shaped_us(parent, calls),
        "direct_us": _direct_us(parent, calls),
    }


# -- on PostgreSQL ----------------------------------------------------------------------------

PG_STEPS = 200  # each super-step is a WAL flush and several round trips


def loop_postgres(url: str, saver: str, durability: str = "sync", steps: int = PG_STEPS) -> dict:
    """The same graph, `steps` super-steps, with JournalSaver on PostgreSQL ("journal"),
    LangGraph's own PostgresSaver ("postgres", from `langgraph-checkpoint-postgres`) or
    InMemorySaver ("memory"), each on a fresh database of the same server."""
    with contextlib.ExitStack() as stack:
        if saver == "journal":
            checkpointer: Any = stack.enter_context(JournalSaver(url))
        elif saver == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            checkpointer = stack.enter_context(PostgresSaver.from_conn_string(url))
            checkpointer.setup()
        else:
            checkpointer = InMemorySaver()
        graph = _graph(checkpointer)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
        started = time.perf_counter()
        out = graph.invoke({"count": STEPS - steps}, config, durability=durability)
        seconds = time.perf_counter() - started
        assert out["count"] == STEPS, out
    return {"seconds": seconds, "us_per_step": seconds / steps * 1e6}
