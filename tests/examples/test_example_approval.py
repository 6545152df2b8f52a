"""The refund agent: suspends on a promise, resumes on `resolve`, and never pays twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Status
from runtime import Engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REFUND = f"{EXAMPLES / 'approval.py'}:refund"
REQUEST = {"order": "A-1001", "amount": 42.5, "reason": "arrived broken"}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request) -> str:
    return request.param


def kinds(workspace) -> list[str]:
    return [line.split(maxsplit=1)[1] for line in workspace.calls()]


@pytest.mark.anyio
async def test_refund_waits_for_approval_then_pays_once(workspace):
    async with Engine.open() as engine:
        waiting = await engine.run(REFUND, REQUEST, id="refund-1")
        assert waiting.status == Status.SUSPENDED
        assert waiting.waiting == "approval"
        assert kinds(workspace) == ["draft scripted"]

        await engine.resolve("refund-1", "approval", {"approved": True, "by": "dana"})
        done = await engine.resume("refund-1")

    assert done.status == Status.COMPLETED, done
    assert done.result["status"] == "refunded"
    assert done.result["by"] == "dana"
    assert done.result["refund_id"].startswith("rf_")
    # The draft was replayed from the journal, not written again.
    assert kinds(workspace) == ["draft scripted", "refund A-1001 42.50", "email customer@example.com"]


@pytest.mark.anyio
async def test_declined_refund_moves_no_money(workspace):
    async with Engine.open() as engine:
        await engine.run(REFUND, REQUEST, id="refund-2")
        await engine.resolve("refund-2", "approval", {"approved": False, "by": "dana", "note": "used item"})
        done = await engine.resume("refund-2")
    assert done.result == {"order": "A-1001", "status": "declined", "by": "dana", "note": "used item"}
    assert kinds(workspace) == ["draft scripted"]


@pytest.mark.anyio
async def test_rejected_approval_fails_the_invocation(workspace):
    async with Engine.open() as engine:
        await engine.run(REFUND, REQUEST, id="refund-3")
        await engine.reject("refund-3", "approval", "not our order")
        done = await engine.resume("refund-3")
    assert done.status == Status.FAILED
    assert done.error.type == "PromiseRejected"
    assert "not our order" in done.error.message
    assert kinds(workspace) == ["draft scripted"]


@pytest.mark.anyio
async def test_invalid_refund_fails_before_any_call(workspace):
    async with Engine.open() as engine:
        done = await engine.run(REFUND, {**REQUEST, "amount": -1}, id="refund-4")
    assert done.status == Status.FAILED
    assert done.error.type == "TerminalError"
    assert workspace.calls() == []


def test_refund_approved_in_another_process_and_killed_after_paying_pays_once(workspace):
    request = '{"order": "A-1001", "amount": 42.5, "reason": "arrived broken"}'
    first = workspace.outcome(workspace.driver("run", REFUND, request, "refund-k"))
    assert first["status"] == "suspended" and first["waiting"] == "approval"

    resolved = workspace.outcome(workspace.driver("resolve", "refund-k", "approval", '{"approved": true}'))
    assert resolved["status"] == "pending"

    # The email step is slow; kill the process once the refund is journaled.
    proc = workspace.driver("resume", "refund-k", EXAMPLE_LATENCY="1")
    workspace.kill_when(proc, lambda: any(s.name == "refund" for s in workspace.journaled_steps("refund-k").values()))
    assert kinds(workspace) == ["draft scripted", "refund A-1001 42.50"]

    done = workspace.outcome(workspace.driver("resume", "refund-k"))
    assert done["status"] == "completed"
    assert done["result"]["status"] == "refunded"
    assert kinds(workspace) == ["draft scripted", "refund A-1001 42.50", "email customer@example.com"]
