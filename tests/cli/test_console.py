"""The operator's actions from the command line, in real processes: a killed run shown with its
owner gone and taken over, a fork with an edited value, a retry after the cause is fixed, a
mistyped approval refused, and a failure's traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..waiting import wait_while_alive

AGENTS = Path(__file__).parent / "console_agents.py"


def target(name: str) -> str:
    return f"{AGENTS}:{name}"


@pytest.fixture
def world(tmp_path):
    """The files the handlers of console_agents.py read: the log, `hold` and `broken`."""

    class World:
        log = tmp_path / "effects.log"
        hold = tmp_path / "hold"
        broken = tmp_path / "broken"

        def args(self) -> str:
            return json.dumps({"log": str(self.log), "hold": str(self.hold), "broken": str(self.broken)})

        def lines(self) -> list[str]:
            return self.log.read_text().splitlines() if self.log.exists() else []

    return World()


def _show(sh, invocation_id: str) -> dict:
    done = sh("show", invocation_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_killed_run_shows_its_owner_gone_and_resume_takes_it_over_without_repeating_a_step(sh, world):
    world.hold.touch()
    proc = sh.popen("run", target("three_steps"), "--id", "k", "--input", world.args())
    wait_while_alive(proc, lambda: "two started" in world.lines(), "step two started")

    # While its owner lives, the run is running with a live owner, and resume is refused.
    shown = _show(sh, "k")
    assert shown["status"] == "running"
    assert shown["owner"] == {"host": shown["owner"]["host"], "pid": proc.pid, "alive": True}
    refused = sh("resume", "k")
    assert refused.returncode == 2
    assert f"running in process {proc.pid}" in refused.stderr and "alive" in refused.stderr

    proc.kill()  # SIGKILL, inside step two
    proc.wait(timeout=30)
    shown = _show(sh, "k")
    assert shown["status"] == "running" and shown["owner"]["alive"] is False
    assert shown["owner"]["pid"] == proc.pid
    [listed] = json.loads(sh("ls", "--json").stdout)
    assert listed["owner"]["alive"] is False
    assert "running (owner gone)" in sh("ls").stdout
    human = sh("show", "k").stdout
    assert "owner gone" in human and "journal resume k" in human

    world.hold.unlink()
    resumed = sh("resume", "k", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == ["one", "two", "three"]
    # Step one had finished before the kill: it was replayed, not run again; two was in flight.
    assert world.lines().count("one") == 1 and world.lines().count("three") == 1
    assert world.lines().count("two started") == 2
    assert "owner" not in _show(sh, "k")  # finished: nobody owns it


def test_a_fork_with_an_edited_step_value_runs_on_from_it(sh, world):
    assert sh("run", target("plan_and_use"), "--id", "p", "--input", world.args()).returncode == 0
    forked = sh("fork", "p", "--at", "2", "--set", '1="a better plan"', "--new-id", "p2")
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.strip() == "p2"
    resumed = sh("resume", "p2", "--json")
    assert json.loads(resumed.stdout)["result"] == "used: a better plan", resumed.stderr
    assert world.lines() == ["a first plan"]  # the edited step was not run again
    assert _show(sh, "p")["result"] == "used: a first plan"  # the original is untouched


def test_retry_runs_a_failed_invocation_again_from_its_failing_step_once_the_cause_is_fixed(sh, world):
    world.broken.touch()
    failed = sh("run", target("payment"), "--id", "pay", "--input", world.args())
    assert failed.returncode == 1
    assert "journal retry pay" in sh("show", "pay").stdout

    still = sh("retry", "pay")  # the cause is not fixed yet: the retry fails the same way
    assert still.returncode == 1
    assert still.stdout.splitlines()[0] == "pay-retry-1"

    world.broken.unlink()
    retried = sh("retry", "pay")
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.splitlines() == ["pay-retry-2", '["fetch","charged"]']
    assert world.lines() == ["fetch", "charge", "charge", "charge"]  # fetch ran once, for all three
    assert _show(sh, "pay")["status"] == "failed"  # the failed one is untouched

    assert sh("retry", "pay-retry-2").returncode == 2  # only a failed invocation is retried


def test_retry_no_run_leaves_it_pending_and_says_how_to_run_it(sh, world):
    world.broken.touch()
    assert sh("run", target("payment"), "--id", "pay", "--input", world.args()).returncode == 1
    made = sh("retry", "pay", "--no-run", "--new-id", "again", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {"id": "again", "status": "pending", "retry_of": "pay", "at": 2}
    assert "journal resume again" in made.stderr
    assert _show(sh, "again")["status"] == "pending"


def test_a_mistyped_approval_is_refused_and_the_run_stays_suspended_until_a_fitting_one(sh, world):
    run = sh("run", target("approval"), "--id", "a", "--input", world.args())
    assert run.returncode == 3
    assert 'Deliver a value of type console_agents.py:Approval (for example {"approved":false,"by":""})' in run.stderr

    for wrong in ("true", '{"approved": "yes", "by": "ada"}', '{"approved": true}'):
        refused = sh("resolve", "a", "approval", wrong)
        assert refused.returncode == 2, wrong
        assert "expects console_agents.py:Approval" in refused.stderr and "stays pending" in refused.stderr
        assert _show(sh, "a")["status"] == "suspended"
    assert "value.approved: expected boolean" in sh("resolve", "a", "approval", '{"approved": 1, "by": "x"}').stderr

    assert sh("resolve", "a", "approval", '{"approved": true, "by": "ada"}').returncode == 0
    done = sh("resume", "a", "--json")
    assert json.loads(done.stdout)["result"] == "approved=True by ada", done.stderr
    assert world.lines() == ["draft"]


def test_a_pydantic_model_and_a_bool_are_checked_when_resolved(sh, world):
    assert sh("run", target("verdict"), "--id", "v", "--input", "{}").returncode == 3
    refused = sh("resolve", "v", "verdict", '{"ok": true, "score": "high"}')
    assert refused.returncode == 2 and "value.score: expected integer" in refused.stderr
    assert sh("resolve", "v", "verdict", '{"ok": true, "score": 3}').returncode == 0
    assert json.loads(sh("resume", "v", "--json").stdout)["result"] == "ok=True score=3"

    assert sh("run", target("yes_or_no"), "--id", "b", "--input", "{}").returncode == 3
    assert sh("resolve", "b", "answer", "1").returncode == 2  # 1 is no bool in JSON
    assert sh("resolve", "b", "answer", '"yes"').returncode == 2
    assert sh("resolve", "b", "answer", "false").returncode == 0
    assert json.loads(sh("resume", "b", "--json").stdout)["result"] is False


def test_a_failure_shows_the_file_and_line_of_the_users_code(sh, world):
    failed = sh("run", target("missing_key"), "--id", "m", "--input", "{}")
    assert failed.returncode == 1
    line = next(n for n, text in enumerate(AGENTS.read_text().splitlines(), 1) if 'return d["missing"]' in text)
    error = _show(sh, "m")["error"]
    assert error["type"] == "KeyError"
    assert error["traceback"] == [{"file": str(AGENTS), "line": line, "function": "missing_key"}]
    assert f"{AGENTS}:{line} in missing_key" in sh("show", "m").stdout
    entries = _show(sh, "m")["entries"]
    assert entries[-1]["kind"] == "failed" and entries[-1]["traceback"] == error["traceback"]


def test_a_failed_steps_traceback_ends_in_the_step_function(sh, world):
    world.broken.touch()
    assert sh("run", target("payment"), "--id", "pay", "--input", world.args()).returncode == 1
    frames = _show(sh, "pay")["error"]["traceback"]
    assert [f["function"] for f in frames] == ["payment", "_charge"]
    assert all(f["file"] == str(AGENTS) for f in frames)
    assert not any(os.sep + "runtime" + os.sep in f["file"] for f in frames)
