"""The LangGraph example: checkpointer, durable node answered by `journal resolve`, shared memory,
and a kill in the middle of the graph's durable node."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from journal import Status
from runtime import Engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
AGENT = f"{EXAMPLES / 'langgraph_agent.py'}:agent"


def steps(workspace) -> Counter[str]:
    """How many times each model call of the durable node really ran, by step name."""
    return Counter(line.split()[1] for line in workspace.calls())


@pytest.mark.anyio
async def test_the_graph_waits_for_review_replays_its_calls_and_remembers(workspace):
    async with Engine.open() as engine:
        waiting = await engine.run(AGENT, {"user": "ada", "question": "Why replay?"}, id="q1")
        assert (waiting.status, waiting.waiting) == (Status.SUSPENDED, "review")
        assert steps(workspace) == {"outline": 1, "draft": 1, "polish": 1}

        await engine.resolve("q1", "review", {"approved": True, "note": "ship it"})
        done = await engine.resume("q1")
        assert done.status == Status.COMPLETED, done
        assert done.result["note"] == "ship it" and "Why replay?" in done.result["answer"]
        # The resumed node replayed its three calls from the journal.
        assert steps(workspace) == {"outline": 1, "draft": 1, "polish": 1}

        # A later question by the same user: the graph recalls what ctx.memory saved.
        await engine.run(AGENT, {"user": "ada", "question": "And forks?"}, id="q2")
        await engine.resolve("q2", "review", {"approved": False, "note": "too short"})
        second = await engine.resume("q2")
    assert second.result == {"answer": "", "note": "too short", "recalled": ["Why replay?"]}


def test_killed_inside_the_durable_node_resumes_without_repeating_finished_calls(workspace):
    run = workspace.driver("run", AGENT, json.dumps({"user": "bo", "question": "What is a lease?"}), "k1",
                           EXAMPLE_LATENCY="0.3")
    # Two calls logged: the first is journaled (the second started after its commit).
    workspace.kill_when(run, lambda: len(workspace.calls()) >= 2)
    waiting = workspace.outcome(workspace.driver("resume", "k1"))
    assert (waiting["status"], waiting["waiting"]) == ("suspended", "review")

    code, out, err = workspace.finish(workspace.journal("resolve", "k1", "review", '{"approved": true}'))
    assert code == 0, err
    done = workspace.outcome(workspace.driver("resume", "k1"))
    assert done["status"] == "completed" and "What is a lease?" in done["result"]["answer"]
    counts = steps(workspace)
    assert counts["outline"] == 1 and counts["polish"] == 1
    assert counts["draft"] in (1, 2)  # only the call in flight at the kill may run twice
