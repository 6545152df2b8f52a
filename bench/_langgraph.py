"""LG: LangGraph savers on a one-node graph that loops on itself for 1,000 super-steps.

Each super-step LangGraph saves the node's writes (`put_writes`) and a checkpoint (`put`).
The same graph runs with `JournalSaver`, `SqliteSaver` (SQLite in WAL mode, as LangGraph
sets it up; SQLite fsyncs every commit) and `InMemorySaver`, in LangGraph's `sync`,
`async` and `exit` durability, through the sync API (`graph.invoke`), each on a fresh store.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from runtime.langgraph import JournalSaver

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
