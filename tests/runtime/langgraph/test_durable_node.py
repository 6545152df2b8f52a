"""Durable nodes in real graphs compiled with JournalSaver: LangGraph runs the node again after
an interrupt() or a crash, and the node's finished ctx.run steps are replayed, not repeated."""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from journal import Status
from runtime.langgraph import DurableNodeError, JournalSaver, durable_node, node_invocation_id

from ...waiting import wait_while_alive


class State(TypedDict, total=False):
    question: str
    answer: str


class Fan(TypedDict, total=False):
    results: Annotated[list, operator.add]


def build(saver, node):
    builder = StateGraph(State)
    builder.add_node("agent", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def test_three_calls_then_interrupt_each_call_runs_once_after_the_resume(tmp_path):
    calls = Counter()

    def llm(prompt: str) -> str:
        calls[prompt] += 1
        return f"<{prompt}>"

    @durable_node
    async def agent(state, ctx):
        draft = await ctx.run("draft", llm, state["question"])
        critique = await ctx.run("critique", llm, draft)
        final = await ctx.run("final", llm, critique)
        verdict = interrupt({"approve": final})
        return {"answer": f"{final} {verdict}"}

    async def main():
        config = {"configurable": {"thread_id": "t1"}}
        with JournalSaver(tmp_path / "db") as saver:
            graph = build(saver, agent)
            first = await graph.ainvoke({"question": "q"}, config)
            assert first["__interrupt__"][0].value == {"approve": "<<<q>>>"}
            assert dict(calls) == {"q": 1, "<q>": 1, "<<q>>": 1}
            ns = (await graph.aget_state(config)).tasks[0]
            invocation = saver.store.get(node_invocation_id("t1", f"agent:{ns.id}"))
            assert invocation.status == Status.SUSPENDED  # parked: no worker picks it up
            assert saver.store.lease(invocation.id).owner == ""
            done = await graph.ainvoke(Command(resume="approved"), config)
            assert done["answer"] == "<<<q>>> approved"
            assert dict(calls) == {"q": 1, "<q>": 1, "<<q>>": 1}
            assert saver.store.get(invocation.id).status == Status.COMPLETED

    asyncio.run(main())


def test_a_completed_node_rerun_returns_its_journaled_update_without_running(tmp_path):
    ran = Counter()

    @durable_node
    async def agent(state, ctx):
        ran["node"] += 1
        return {"answer": await ctx.run("a", lambda: "x")}

    async def main():
        with JournalSaver(tmp_path / "db") as saver:
            graph = build(saver, agent)
            config = {"configurable": {"thread_id": "t"}}
            await graph.ainvoke({"question": "q"}, config)
            # Replay the node's task as LangGraph would after losing its writes: same thread and namespace.
            history = [s async for s in graph.aget_state_history(config)]
            before_node = next(s for s in history if s.next == ("agent",))
            out = await graph.ainvoke(None, before_node.config)
            assert out["answer"] == "x"
        return ran["node"]

    # Time travel forks a new checkpoint, so the task id (and journal) is new: the node runs again.
    assert asyncio.run(main()) == 2


def test_a_graph_without_journal_saver_gets_a_clear_error():
    @durable_node
    async def agent(state, ctx):
        return {}

    graph = build(InMemorySaver(), agent)
    with pytest.raises(DurableNodeError, match="checkpointer=JournalSaver"):
        asyncio.run(graph.ainvoke({"question": "q"}, {"configurable": {"thread_id": "t"}}))


def test_long_ids_get_a_digest_that_is_a_valid_invocation_id():
    long_id = node_invocation_id("t" * 300, "agent:1234")
    assert long_id.startswith("lg.agent.") and len(long_id) < 100
    assert node_invocation_id("t" * 300, "agent:1234") == long_id
    assert node_invocation_id("t\x01", "agent:1") != node_invocation_id("t\x02", "agent:1")


CRASH_SCRIPT = '''
import asyncio, os, sys, time
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from runtime.langgraph import JournalSaver, durable_node

db, log = sys.argv[1], sys.argv[2]

class State(TypedDict, total=False):
    answers: list

def llm(i: int) -> str:
    time.sleep(0.01)  # the call's latency
    with open(log, "a") as f:
        f.write(f"{i}\\n")
        f.flush()
        os.fsync(f.fileno())
    return f"answer {i}"

@durable_node
async def agent(state, ctx):
    return {"answers": [await ctx.run(f"call-{i}", llm, i) for i in range(40)]}

async def main():
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    config = {"configurable": {"thread_id": "crash"}}
    with JournalSaver(db) as saver:
        graph = builder.compile(checkpointer=saver)
        if (await graph.aget_state(config)).next:
            out = await graph.ainvoke(None, config)  # resume the interrupted super-step
        else:
            out = await graph.ainvoke({"answers": []}, config)
    print(len(out["answers"]), out["answers"][-1])

asyncio.run(main())
'''


def test_a_node_killed_mid_way_resumes_in_a_new_process_repeating_at_most_the_call_in_flight(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    script, db, log = tmp_path / "graph.py", tmp_path / "db", tmp_path / "calls.log"
    script.write_text(CRASH_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(log)])
    try:
        wait_while_alive(proc, lambda: log.exists() and len(log.read_text().split()) >= 12,
                         "the node made its 12th call")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = [int(x) for x in log.read_text().split()]
    assert 12 <= len(before) < 40

    done = subprocess.run([sys.executable, str(script), str(db), str(log)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["40", "answer", "39"]
    calls = Counter(int(x) for x in log.read_text().split())
    assert set(calls) == set(range(40))
    repeated = [i for i, n in calls.items() if n > 1]
    assert len(repeated) <= 1 and all(calls[i] == 2 for i in repeated)
    assert not repeated or repeated[0] == before[-1]  # only the call in flight at the kill


def test_resuming_a_node_invocation_outside_its_graph_leaves_it_for_the_graph(tmp_path):
    from runtime import Engine

    calls = Counter()

    def llm(prompt: str) -> str:
        calls[prompt] += 1
        return prompt.upper()

    @durable_node
    async def agent(state, ctx):
        first = await ctx.run("first", llm, state["question"])
        return {"answer": f"{first} {interrupt('ok?')}"}

    async def main():
        config = {"configurable": {"thread_id": "w"}}
        with JournalSaver(tmp_path / "db") as saver:
            graph = build(saver, agent)
            await graph.ainvoke({"question": "q"}, config)
            task = (await graph.aget_state(config)).tasks[0]
            invocation_id = node_invocation_id("w", f"agent:{task.id}")
            entries = saver.store.entry_count(invocation_id)
            async with Engine.open(store=saver.store) as engine:  # as `journal resume` or a worker would
                outcome = await engine.resume(invocation_id)
            assert outcome.status == Status.SUSPENDED
            assert saver.store.entry_count(invocation_id) == entries  # nothing journaled, nothing ran
            done = await graph.ainvoke(Command(resume="yes"), config)
            assert done["answer"] == "Q yes" and calls == {"q": 1}

    asyncio.run(main())


def test_a_node_waiting_on_a_promise_is_a_clear_error(tmp_path):
    @durable_node
    async def agent(state, ctx):
        await ctx.promise("never")
        return {}

    async def main():
        with JournalSaver(tmp_path / "db") as saver:
            await build(saver, agent).ainvoke({"question": "q"}, {"configurable": {"thread_id": "p"}})

    with pytest.raises(DurableNodeError, match="use LangGraph's interrupt"):
        asyncio.run(main())


def test_durable_nodes_side_by_side_in_one_super_step_each_keep_their_own_journal(tmp_path):
    calls = Counter()

    def work(name: str, i: int) -> str:
        calls[(name, i)] += 1
        return f"{name}{i}"

    def branch(name):
        @durable_node
        async def node(state, ctx):
            done = [await ctx.run(f"w{i}", work, name, i) for i in range(3)]
            approval = interrupt(f"{name}?")
            return {"results": [f"{'+'.join(done)}:{approval}"]}
        node.__name__ = name
        return node

    async def main():
        builder = StateGraph(Fan)
        for name in ("a", "b"):
            builder.add_node(name, branch(name))
            builder.add_edge(START, name)
            builder.add_edge(name, END)
        config = {"configurable": {"thread_id": "fan"}}
        with JournalSaver(tmp_path / "db") as saver:
            graph = builder.compile(checkpointer=saver)
            first = await graph.ainvoke({"results": []}, config)
            assert sorted(i.value for i in first["__interrupt__"]) == ["a?", "b?"]
            answers = {i.id: i.value.upper() for i in first["__interrupt__"]}
            done = await graph.ainvoke(Command(resume=answers), config)
        return sorted(done["results"])

    assert asyncio.run(main()) == ["a0+a1+a2:A?", "b0+b1+b2:B?"]
    assert set(calls.values()) == {1} and len(calls) == 6


def test_a_durable_nodes_ctx_memory_is_the_graphs_long_term_memory(tmp_path):
    from runtime.langgraph import JournalStore

    @durable_node
    async def agent(state, ctx):
        await ctx.memory.put(("facts",), "q", {"question": state["question"]})
        item = await ctx.memory.get(("facts",), "q")
        return {"answer": item.value["question"].upper()}

    async def main():
        with JournalSaver(tmp_path / "db") as saver:
            out = await build(saver, agent).ainvoke({"question": "q1"}, {"configurable": {"thread_id": "m"}})
        with JournalStore(tmp_path / "db") as memory:
            return out["answer"], memory.get(("facts",), "q").value

    assert asyncio.run(main()) == ("Q1", {"question": "q1"})
