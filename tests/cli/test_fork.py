"""`journal fork` and the storage-level `journal.fork` under it."""

import json
import re

import pytest

from journal import ForkError, MemoryStore, Status, fork
from runtime import Engine

from . import cli_agents as agents
from .conftest import target


@pytest.fixture
def finished(journal, log):
    """A pipeline run to completion: steps a, b, c(b), d, each logged once."""
    result = journal("run", target("pipeline"), "--input", json.dumps({"log": log.path}), "--id", "p")
    assert result.exit_code == 0, result.stderr
    assert log.lines() == ["a", "b", "c(b)", "d"]
    return "p"


def show(journal, invocation_id):
    return json.loads(journal("show", invocation_id, "--json").stdout)


def test_fork_then_resume_reruns_only_what_follows_the_fork_point(journal, finished, log):
    original = show(journal, finished)
    forked = journal("fork", finished, "--at", "3", "--new-id", "p2")
    assert forked.exit_code == 0, forked.stderr
    assert forked.stdout == "p2\n"
    assert "3 entries copied" in forked.stderr and "journal resume p2" in forked.stderr

    copy = show(journal, "p2")
    assert copy["status"] == "pending" and copy["parent"] == finished
    assert copy["entries"][1:] == original["entries"][1:3]  # steps a and b, exactly as recorded

    resumed = journal("resume", "p2", "--json")
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == ["a", "b", "c(b)", "d"]
    assert log.lines() == ["a", "b", "c(b)", "d", "c(b)", "d"]  # only c and d ran again
    assert show(journal, finished) == original  # the original is untouched


def test_fork_with_set_replaces_a_recorded_result_before_going_on(journal, finished, log):
    forked = journal("fork", finished, "--at", "3", "--set", '2="B!"', "--json")
    assert forked.exit_code == 0, forked.stderr
    out = json.loads(forked.stdout)
    assert out["parent"] == finished and out["at"] == 3 and out["entries"] == 3 and out["status"] == "pending"
    assert re.fullmatch(r"p-fork-[0-9a-f]{6}", out["id"])

    resumed = journal("resume", out["id"], "--json")
    assert json.loads(resumed.stdout)["result"] == ["a", "B!", "c(B!)", "d"]
    assert log.lines()[4:] == ["c(B!)", "d"]
    assert show(journal, out["id"])["entries"][2]["value"] == "B!"


def test_fork_of_a_suspended_invocation_waits_again_for_its_promise(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a")
    assert journal("fork", "a", "--at", "2", "--new-id", "a2").exit_code == 0
    result = journal("resume", "a2")
    assert result.exit_code == 3 and "journal resolve a2 approval" in result.stderr
    assert log.lines() == ["draft about x"]  # the draft is replayed in the fork, not redone


@pytest.mark.parametrize(
    "args, message",
    [
        (["--at", "0"], "pick a fork point from 1 to 5"),
        (["--at", "6"], "pick a fork point from 1 to 5"),
        (["--at", "3", "--set", "3=1"], "the fork copies only seqs below 3"),
        (["--at", "3", "--set", "0=1"], "seq 0 is the start entry"),
        (["--at", "3", "--set", "2={oops"], "--set 2: the value is not valid JSON"),
        (["--at", "3", "--set", "two=1"], "is not SEQ=JSON"),
        (["--at", "3", "--new-id", "p"], "already exists"),
    ],
)
def test_a_fork_that_does_not_fit_the_journal_exits_2_and_creates_nothing(journal, finished, args, message):
    result = journal("fork", finished, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert [i["id"] for i in json.loads(journal("ls", "--json").stdout)] == [finished]


def test_fork_of_an_unknown_invocation_exits_2(journal, finished):
    result = journal("fork", "nope", "--at", "1")
    assert result.exit_code == 2 and "no invocation 'nope'" in result.stderr


async def _pipeline_store(log):  # the pipeline run to completion in memory
    store = MemoryStore()
    async with Engine.open(store=store) as engine:
        await engine.run(agents.pipeline, {"log": log.path}, id="src")
    return store


@pytest.mark.anyio
async def test_an_interrupted_fork_is_parked_not_runnable(log, monkeypatch):
    store = await _pipeline_store(log)

    def crash(ops):
        raise OSError("power lost")

    monkeypatch.setattr(store, "apply", crash)
    with pytest.raises(OSError):
        fork(store, "src", at=2, new_id="half")
    record = store.get("half")
    assert record.status == Status.DIVERGED and "being copied" in record.divergence
    monkeypatch.undo()
    async with Engine.open(store=store) as engine:
        assert "half" not in engine.runnable()


async def _clock(ctx) -> int:
    ctx.now()
    return await ctx.run("one", lambda: 1)


@pytest.mark.anyio
async def test_a_value_can_only_replace_a_step_or_promise():
    store = MemoryStore()
    async with Engine.open(store=store) as engine:
        await engine.run(_clock, id="src")
    with pytest.raises(ForkError, match="it is a now entry; only step and promise values can be replaced"):
        fork(store, "src", at=3, values={1: b"\xc0"})
    assert [r.id for r in store.list()] == ["src"]
    copy = fork(store, "src", at=3, values={2: b"\x02"}, new_id="two")
    async with Engine.open(store=store) as engine:
        assert (await engine.resume(copy.id)).result == 2


@pytest.fixture
def anyio_backend():
    return "asyncio"
