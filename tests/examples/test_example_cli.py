"""The examples through the real `journal` command: run, kill -9, resume, resolve, worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import idempotency_key

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOURNAL_CLI = Path(sys.executable).with_name("journal")


def cli_ready() -> bool:
    """True once the `journal` command is installed beside this Python and runs."""
    if not JOURNAL_CLI.exists():
        return False
    try:
        done = subprocess.run([str(JOURNAL_CLI), "run", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


pytestmark = pytest.mark.skipif(not cli_ready(), reason="the journal command is not installed")
RESEARCH = str(EXAMPLES / "research.py") + ":research"
REFUND = str(EXAMPLES / "approval.py") + ":refund"
QUESTION = '{"question": "Why does LMDB need fsync?"}'
REQUEST = '{"order": "A-1001", "amount": 42.5, "reason": "arrived broken"}'


def test_journal_run_research_example(workspace):
    out = workspace.outcome(workspace.journal("run", RESEARCH, "--input", QUESTION, "--id", "r1", "--json"))
    assert out["status"] == "completed"
    assert out["result"]["sources"] == ["lmdb", "fsync"]
    assert len(workspace.calls()) == 4


def test_journal_run_killed_then_resumed_does_not_redo_journaled_steps(workspace):
    proc = workspace.journal("run", RESEARCH, "--input", QUESTION, "--id", "r-kill", EXAMPLE_LATENCY="0.4")
    workspace.kill_when(proc, lambda: len(workspace.calls()) >= 2 and len(workspace.journaled_steps("r-kill")) >= 2)
    done_before = workspace.journaled_steps("r-kill")

    out = workspace.outcome(workspace.journal("resume", "r-kill", "--json"))

    assert out["status"] == "completed"
    assert out["result"]["sources"] == ["lmdb", "fsync"]
    counts = workspace.keys()
    assert all(counts[idempotency_key("r-kill", step)] == 1 for step in done_before.values()), (done_before, counts)
    assert set(counts) == {idempotency_key("r-kill", step) for step in workspace.journaled_steps("r-kill").values()}


def test_approval_with_journal_resolve_and_resume(workspace):
    code, out, err = workspace.finish(workspace.journal("run", REFUND, "--input", REQUEST, "--id", "refund-1"))
    assert code == 3, (out, err)  # suspended
    assert "journal resolve refund-1 approval" in out + err

    code, out, err = workspace.finish(workspace.journal("resolve", "refund-1", "approval", '{"approved": true, "by": "dana"}'))
    assert code == 0, (out, err)

    done = workspace.outcome(workspace.journal("resume", "refund-1", "--json"))
    assert done["status"] == "completed"
    assert done["result"]["status"] == "refunded" and done["result"]["by"] == "dana"
    assert [line.split(maxsplit=1)[1] for line in workspace.calls()] == [
        "draft scripted", "refund A-1001 42.50", "email customer@example.com",
    ]


def test_approval_accepts_the_bare_true_the_suspension_message_suggests(workspace):
    workspace.finish(workspace.journal("run", REFUND, "--input", REQUEST, "--id", "refund-2"))
    workspace.finish(workspace.journal("resolve", "refund-2", "approval", "true"))
    assert workspace.outcome(workspace.journal("resume", "refund-2", "--json"))["result"]["status"] == "refunded"


def test_approval_resumed_by_a_worker_after_a_kill_pays_once(workspace):
    workspace.finish(workspace.journal("run", REFUND, "--input", REQUEST, "--id", "refund-3"))
    workspace.finish(workspace.journal("resolve", "refund-3", "approval", "true"))
    # The email is slow: kill the process that resumed it once the refund is journaled.
    proc = workspace.journal("resume", "refund-3", EXAMPLE_LATENCY="1")
    workspace.kill_when(proc, lambda: any(s.name == "refund" for s in workspace.journaled_steps("refund-3").values()))

    code, out, err = workspace.finish(workspace.journal("worker", "--until-idle", "--quiet"))
    assert code == 0, (out, err)

    shown = workspace.outcome(workspace.journal("show", "refund-3", "--json"))
    assert shown["status"] == "completed"
    assert [line.split(maxsplit=1)[1] for line in workspace.calls()] == [
        "draft scripted", "refund A-1001 42.50", "email customer@example.com",
    ]


def test_declined_with_journal_resolve_moves_no_money(workspace):
    workspace.finish(workspace.journal("run", REFUND, "--input", REQUEST, "--id", "refund-4"))
    workspace.finish(workspace.journal("resolve", "refund-4", "approval", json.dumps({"approved": False, "note": "no"})))
    done = workspace.outcome(workspace.journal("resume", "refund-4", "--json"))
    assert done["result"]["status"] == "declined"
    assert len(workspace.calls()) == 1
