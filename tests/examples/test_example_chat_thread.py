"""The chat thread of examples/chat.py through the real `journal` command: a conversation as
one invocation, talked to while a worker runs it, its worker killed mid-conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not Path(sys.executable).with_name("journal").exists(),
                                reason="the journal command is not installed")
THREAD = str(Path(__file__).resolve().parents[2] / "examples" / "chat.py") + ":thread"


def test_a_thread_takes_messages_answers_status_and_publishes_progress_through_a_kill(workspace):
    assert workspace.finish(workspace.journal("start", THREAD, "--id", "thread-7", "--key", "thread-7"))[0] == 0
    worker = workspace.journal("worker")
    try:
        code, out, err = workspace.finish(workspace.journal("send", "thread-7", "user", '"Hello, I am Ada."'))
        assert code == 0, err
        answer = workspace.outcome(workspace.journal("request", "thread-7", "user", '"What do you know about me?"',
                                                     "--wait", "60", "--json"))
        assert answer["replied"] and '"Hello, I am Ada."' in answer["reply"]
        status = workspace.outcome(workspace.journal("request", "thread-7", "status", "{}", "--json"))
        assert status["reply"]["turns"] == 2
    finally:
        workspace.kill_when(worker, lambda: True)  # SIGKILL: the thread is left as it was
    # The progress is read from the store with no worker running.
    progress = workspace.outcome(workspace.journal("get", "thread-7", "progress", "--json"))
    assert progress["value"] == {"turns": 2, "state": "waiting"}
    # A message sent while no worker runs waits in the inbox; a new worker goes on from the journal.
    assert workspace.finish(workspace.journal("send", "thread-7", "user", '"/bye"'))[0] == 0
    worker = workspace.journal("worker")
    try:
        wait_until(lambda: json.loads(workspace.finish(workspace.journal(
            "get", "thread-7", "progress", "--json"))[1])["value"]["state"] == "ended", "the thread to end")
    finally:
        workspace.kill_when(worker, lambda: True)
    shown = workspace.outcome(workspace.journal("show", "thread-7", "--json"))
    assert shown["status"] == "completed" and shown["result"]["turns"] == 2
    assert [e["kind"] for e in shown["entries"]].count("received") == 4  # two turns, one status, the /bye
