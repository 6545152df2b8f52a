"""A LangGraph agent made durable by journal, three ways at once.

    journal run examples/langgraph_agent.py:agent --id q1 \\
        --input '{"user": "ada", "question": "Why does replay need determinism?"}'
    # exit code 3: suspended; the graph's `research` node called interrupt() for a review
    journal resolve q1 review '{"approved": true, "note": "ship it"}'
    journal resume q1

- The graph is compiled with `JournalSaver`: its checkpoints live in the journal store.
- `research` is a `durable_node`: its three model calls are journaled steps. When LangGraph
  runs the node again (after a crash, or to resume after its `interrupt()`), the calls it
  had finished are replayed from the journal, not paid for again.
- The journal handler `agent` runs the graph inside durable steps ("use both"): the graph's
  interrupt becomes the promise `review`, which `journal resolve` answers, even days later
  and from another process; then the graph resumes with the reviewer's decision.
- Long-term memory: the graph's `recall` node reads, through `JournalStore`, the answers
  that earlier runs for the same user saved with `ctx.memory`. Both are one memory.

The model is the offline scripted one from `llm.py` (or a real endpoint, see there). The
graph's store is the journal's: `$JOURNAL_DB`, or `./.journal`, as for `journal run`.
"""

from __future__ import annotations

import os
from typing import Any, Required, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from llm import chat_model

from runtime import Context, default_path
from runtime.langgraph import JournalSaver, JournalStore, durable_node


class State(TypedDict, total=False):
    user: str
    question: str
    recalled: list[str]
    answer: str
    note: str


class Review(TypedDict, total=False):
    """A reviewer's answer to the graph's interrupt: `journal resolve ID review '{"approved": true}'`."""

    approved: Required[bool]
    note: str


def recall(state: State, runtime: Runtime) -> dict[str, Any]:
    earlier = runtime.store.search(("answers", state["user"]), limit=5)
    return {"recalled": [item.value["question"] for item in earlier]}


@durable_node
async def research(state: State, ctx: Context) -> dict[str, Any]:
    model = chat_model()
    context = "; ".join(state.get("recalled") or []) or "nothing yet"
    ask = [{"role": "user", "content": f"{state['question']} (asked before: {context})"}]
    outline = await ctx.run("outline", model.complete, ask)
    draft = await ctx.run("draft", model.complete, [{"role": "user", "content": outline.content}])
    polished = await ctx.run("polish", model.complete, [{"role": "user", "content": draft.content}])
    # The graph stops here until a reviewer answers; on the way back in, the three calls
    # above replay from the journal and interrupt() returns the reviewer's decision.
    decision = interrupt({"review": polished.content})
    if not decision.get("approved"):
        return {"answer": "", "note": decision.get("note", "rejected")}
    return {"answer": polished.content, "note": decision.get("note", "")}


def build(saver: JournalSaver, memory: JournalStore):
    builder = StateGraph(State)
    builder.add_node("recall", recall)
    builder.add_node("research", research)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "research")
    builder.add_edge("research", END)
    return builder.compile(checkpointer=saver, store=memory)


async def run_graph(thread_id: str, start: dict[str, Any] | None = None, decision: Any = None) -> dict[str, Any]:
    """Run the graph on `thread_id` until it ends or interrupts, and return where it stands.

    A step may run again after a crash, so this starts the thread only if it never
    started, resumes it if it stopped half-way, and answers its interrupt only if there is
    one waiting and a `decision` to answer it with."""
    db = os.environ.get("JOURNAL_DB") or default_path()
    with JournalSaver(db) as saver, JournalStore(db) as memory:
        graph = build(saver, memory)
        config = {"configurable": {"thread_id": thread_id}}
        state = await graph.aget_state(config)
        waiting = any(task.interrupts for task in state.tasks)
        if state.created_at is None:
            await graph.ainvoke(start, config)
        elif state.next and not waiting:
            await graph.ainvoke(None, config)  # killed half-way: carry on from the last checkpoint
        elif waiting and decision is not None:
            await graph.ainvoke(Command(resume=decision), config)
        state = await graph.aget_state(config)
        interrupts = [i.value for task in state.tasks for i in task.interrupts]
        return {"waiting": interrupts[0] if interrupts else None, "state": dict(state.values)}


async def agent(ctx: Context, request: dict[str, str]) -> dict[str, Any]:
    thread = f"graph-{ctx.invocation_id}"
    result = await ctx.run("graph", run_graph, thread, {"user": request["user"], "question": request["question"]})
    if result["waiting"] is not None:
        # Typed: a value that is not a Review (`journal resolve ID review true`) is refused
        # when it is resolved, and the promise stays pending, instead of failing the graph.
        decision = await ctx.promise("review", type=Review)
        result = await ctx.run("graph-resume", run_graph, thread, None, decision)
    state = result["state"]
    if state.get("answer"):
        await ctx.memory.put(("answers", request["user"]), ctx.invocation_id,
                             {"question": request["question"], "answer": state["answer"]})
    return {"answer": state.get("answer", ""), "note": state.get("note", ""), "recalled": state.get("recalled", [])}
