"""The ReAct research agent: answers offline, runs its tool calls concurrently, and survives kill -9."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from journal import Status
from runtime import Engine, InvocationConflict, idempotency_key, load_handler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESEARCH = f"{EXAMPLES / 'research.py'}:research"
QUESTION = {"question": "Why does LMDB need fsync?"}


def expected_report(question: str = QUESTION["question"]) -> dict:
    return {
        "question": question,
        "answer": "LMDB is an embedded key-value store built on a memory-mapped B+tree; it allows one writer at "
                  "a time and readers never block. [lmdb] fsync asks the operating system to put written data "
                  "on stable storage; until it returns, a power loss can still lose the write. [fsync]",
        "sources": ["lmdb", "fsync"],
        "rounds": 2,
    }


@pytest.mark.anyio
async def test_research_agent_answers_offline_citing_its_sources(workspace):
    async with Engine.open() as engine:
        outcome = await engine.run(RESEARCH, QUESTION, id="r1")
    assert outcome.status == Status.COMPLETED, outcome
    assert msgspec.to_builtins(outcome.result) == expected_report()
    # think, then three searches at once (the third word, "fsync"... finds two sources), then think again
    assert [line.split(maxsplit=1)[1] for line in workspace.calls()] == [
        "think scripted", "search lmdb", "search fsync", "think scripted",
    ]


@pytest.mark.anyio
async def test_finished_research_is_returned_from_the_journal_not_run_again(workspace):
    async with Engine.open() as engine:
        first = await engine.run(RESEARCH, QUESTION, id="r1")
        calls = workspace.calls()
        again = await engine.run(RESEARCH, QUESTION, id="r1")
    assert msgspec.to_builtins(again.result) == msgspec.to_builtins(first.result)
    assert workspace.calls() == calls


@pytest.mark.anyio
async def test_reusing_an_id_with_another_question_is_a_conflict(workspace):
    async with Engine.open() as engine:
        await engine.run(RESEARCH, QUESTION, id="r1")
        with pytest.raises(InvocationConflict):
            await engine.run(RESEARCH, {"question": "What is a lease?"}, id="r1")


@pytest.mark.anyio
async def test_tool_calls_of_one_round_run_concurrently(workspace, monkeypatch):
    research = load_handler(RESEARCH)
    module = __import__("sys").modules[research.__module__]
    started = 0
    all_started = anyio.Event()

    async def search(query: str) -> list:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        with anyio.fail_after(60):  # run one at a time, and the first would wait here forever
            await all_started.wait()
        return []

    monkeypatch.setitem(module.TOOLS, "search", search)
    async with Engine.open() as engine:
        outcome = await engine.run(research, {"question": "LMDB fsync lease"}, id="r2")
    assert outcome.status == Status.COMPLETED, outcome
    assert started == 3


def test_research_killed_mid_run_resumes_without_redoing_finished_steps(workspace):
    proc = workspace.driver("run", RESEARCH, msgspec.json.encode(QUESTION).decode(), "r-kill", EXAMPLE_LATENCY="0.4")
    # Kill once the first model call and at least one search are journaled: work is in flight.
    workspace.kill_when(proc, lambda: len(workspace.calls()) >= 2 and len(workspace.journaled_steps("r-kill")) >= 2)
    done_before = workspace.journaled_steps("r-kill")
    calls_before = workspace.keys()

    outcome = workspace.outcome(workspace.driver("resume", "r-kill", EXAMPLE_LATENCY="0.05"))

    assert outcome["status"] == "completed"
    assert outcome["result"] == expected_report()
    counts = workspace.keys()
    for seq, step in done_before.items():
        key = idempotency_key("r-kill", step)
        assert counts[key] == 1, f"step {step.name!r} (seq {seq}) was journaled yet ran again"
    # Only what was in flight at the kill may have run twice (at-least-once for that one step).
    for key, n in counts.items():
        assert n <= calls_before[key] + 1
    assert set(counts) == {idempotency_key("r-kill", step) for step in workspace.journaled_steps("r-kill").values()}
