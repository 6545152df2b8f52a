"""A LangGraph process restarting on its checkpointer: `python -m bench._lg_restart SAVER PATH`.

It imports LangGraph and the saver, opens the store at PATH (`journal`: a JournalSaver
directory; `sqlite`: a SqliteSaver file), builds a one-node graph, reads the thread's last
state and runs one more super-step on it, then exits. The first run on a path creates the
thread (20 super-steps); `bench.startup` times the runs after that.
"""

from __future__ import annotations

import sys
from typing import TypedDict


class _State(TypedDict):
    count: int


def main(saver_name: str, path: str) -> None:
    from langgraph.graph import END, START, StateGraph

    if saver_name == "journal":
        from runtime.langgraph import JournalSaver

        saver = JournalSaver(path)
    else:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    builder = StateGraph(_State)
    builder.add_node("tick", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", lambda state: END if state["count"] % 20 == 0 else "tick")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "restart"}}
    state = graph.get_state(config)
    count = state.values.get("count", 0) if state.values else 0
    graph.invoke({"count": count + 19}, config, durability="sync")  # one super-step: 20 more is a multiple of 20


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
