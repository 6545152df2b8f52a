"""The chat example through the real `journal` command: three turns of one thread, one of them killed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from journal import LmdbStore
from runtime import idempotency_key

pytestmark = pytest.mark.skipif(not Path(sys.executable).with_name("journal").exists(),
                                reason="the journal command is not installed")
CHAT = str(Path(__file__).resolve().parents[2] / "examples" / "chat.py") + ":chat"
TURNS = ["Hello, I am Ada.", "I am writing a compiler in Rust.", "What do you know about me?"]


def entries(workspace, invocation_id: str) -> int:
    store = LmdbStore(workspace.db)
    try:
        return store.entry_count(invocation_id)
    finally:
        store.close()


def turn(workspace, n: int, **env: str):
    return workspace.journal("run", CHAT, "--key", "thread-42", "--id", f"turn-{n}",
                             "--input", json.dumps(TURNS[n - 1]), "--json", **env)


@pytest.mark.parametrize("killed", [1, 2])
def test_chat_remembers_earlier_turns_across_processes_and_a_kill(workspace, killed):
    replies = {}
    for n in (1, 2, 3):
        if n == killed:
            # The model is slow on this turn: kill -9 the process while it waits for the answer,
            # after the turn has read (and journaled) the thread's history.
            proc = turn(workspace, n, EXAMPLE_LATENCY="5")
            workspace.kill_when(proc, lambda n=n: entries(workspace, f"turn-{n}") >= 2)
            assert len(workspace.calls()) == n - 1  # the killed call never answered
            out = workspace.outcome(workspace.journal("resume", f"turn-{n}", "--json"))
        else:
            out = workspace.outcome(turn(workspace, n))
        assert out["status"] == "completed", out
        replies[n] = out["result"]

    assert replies[1] == 'You said "Hello, I am Ada." That is the first thing you told me.'
    assert replies[3] == ('You said "What do you know about me?" Before that you said "Hello, I am Ada." '
                          'and "I am writing a compiler in Rust.".')

    state = workspace.outcome(workspace.journal("state", "thread-42", "--json"))
    assert state["key"] == "thread-42" and state["queue"] == []
    history = state["state"]["history"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 3
    assert [m["content"] for m in history if m["role"] == "user"] == TURNS
    assert [m["content"] for m in history if m["role"] == "assistant"] == [replies[1], replies[2], replies[3]]

    # One paid model call per turn: the killed one had not answered, and nothing that had ran again.
    reply_steps = {n: [s for s in workspace.journaled_steps(f"turn-{n}").values() if s.name == "reply"] for n in (1, 2, 3)}
    assert workspace.keys() == {idempotency_key(f"turn-{n}", reply_steps[n][0]): 1 for n in (1, 2, 3)}
    again = workspace.outcome(turn(workspace, 1))  # attaching to a finished turn runs nothing
    assert again["result"] == replies[1] and len(workspace.calls()) == 3


def test_chat_state_table_and_a_turn_without_a_key(workspace):
    workspace.outcome(turn(workspace, 1))
    code, out, err = workspace.finish(workspace.journal("state", "thread-42"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["key", "thread-42"]
    assert any(line.startswith("history ") and "…" in line for line in lines)
    assert all(len(line) <= 80 for line in lines)

    code, out, err = workspace.finish(workspace.journal("run", CHAT, "--input", '"hi"'))
    assert code == 1 and "needs a key" in err and "--key" in err
