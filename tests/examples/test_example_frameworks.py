"""examples/pydantic_ai_agent.py, openai_agents_agent.py, langchain_agent.py and adk_agent.py, as their docs walk through
them with the real `journal` command: run, killed with SIGKILL mid-run, resumed, asked for an
approval, resolved, resumed again; nothing journaled is done twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runtime import idempotency_key

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PYDANTIC_AI = f"{EXAMPLES / 'pydantic_ai_agent.py'}:plan_trip"
OPENAI_AGENTS = f"{EXAMPLES / 'openai_agents_agent.py'}:support"


def _walk_through(workspace, target: str, request: str, inv: str, kill_after: int) -> tuple[dict, str]:
    """Run until `kill_after` calls ran, SIGKILL, resume to the approval, approve it, resume to the end."""
    proc = workspace.journal("run", target, "--input", json.dumps(request), "--id", inv, EXAMPLE_LATENCY="0.3")
    workspace.kill_when(proc, lambda: len(workspace.calls()) >= kill_after and len(workspace.journaled_steps(inv)) >= kill_after)
    done_before = workspace.journaled_steps(inv)
    calls_before = workspace.keys()

    code, out, err = workspace.finish(workspace.journal("resume", inv))
    assert code == 3, f"exit {code}: the run should wait for its approval\n{out}\n{err}"
    command = re.search(r"journal resolve \S+ (\S+) (true|'.*')", out + err)
    assert command is not None, out + err
    value = command.group(2).strip("'")
    code, out, err = workspace.finish(workspace.journal("resolve", inv, command.group(1), value))
    assert code == 0, err
    result = workspace.outcome(workspace.journal("resume", inv, "--json"))

    counts = workspace.keys()
    for seq, step in done_before.items():
        assert counts[idempotency_key(inv, step)] == 1, f"step {step.name!r} (seq {seq}) was journaled yet ran again"
    for key, n in counts.items():
        assert n <= calls_before[key] + 1  # only what was in flight at the kill ran twice
    return result, value


@pytest.mark.slow
def test_the_pydantic_ai_example_killed_resumed_and_approved(workspace):
    result, value = _walk_through(workspace, PYDANTIC_AI, "A weekend in Lisbon", "trip-1", kill_after=3)
    assert json.loads(value) == {"approvals": {"book-1": True}}
    assert result["status"] == "completed"
    assert result["result"] == "Sunny and 24 °C in Lisbon. Booked TP1351 08:05, have a good trip."
    details = [line.split(maxsplit=2)[2] for line in workspace.calls()]
    assert details.count("weather Lisbon") == 1 and details.count("book TP1351 08:05") == 1


@pytest.mark.slow
def test_the_openai_agents_example_killed_resumed_and_approved(workspace):
    result, value = _walk_through(workspace, OPENAI_AGENTS, "Refund order A-17", "desk-1", kill_after=3)
    assert value == "true"
    assert result["status"] == "completed"
    assert result["result"] == "Done: refunded 40 EUR on order A-17. Sorry about the kettle."
    details = [line.split(maxsplit=2)[2] for line in workspace.calls()]
    assert details.count("lookup A-17") == 1 and details.count("refund A-17 40") == 1


LANGCHAIN = f"{EXAMPLES / 'langchain_agent.py'}:plan_trip"
ADK = f"{EXAMPLES / 'adk_agent.py'}:refund_desk"


@pytest.mark.slow
def test_the_langchain_example_killed_resumed_and_approved(workspace):
    result, value = _walk_through(workspace, LANGCHAIN, "A weekend in Oslo", "trip-1", kill_after=3)
    assert value == "true"
    assert result["status"] == "completed"
    assert result["result"] == ("Crisp and clear, 4 °C in Oslo. Booked SK4035 08:10 and Hotel Continental, "
                                "have a good trip.")
    details = [line.split(maxsplit=2)[2] for line in workspace.calls()]
    assert details.count("weather Oslo") == 1 and details.count("book SK4035 08:10 Hotel Continental") == 1


@pytest.mark.slow
def test_the_adk_example_killed_resumed_and_confirmed(workspace):
    result, value = _walk_through(workspace, ADK, "Refund order A-17", "desk-1", kill_after=3)
    assert value == "true"
    assert result["status"] == "completed"
    assert result["result"] == "Done: refunded 40 EUR on order A-17. Sorry about the kettle, Ada."
    details = [line.split(maxsplit=2)[2] for line in workspace.calls()]
    assert details.count("lookup A-17") == 1 and details.count("refund A-17 40") == 1
