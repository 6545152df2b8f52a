"""A parent suspended in ctx.call: the message names the child's own wait, and the parent's
`child:` promise cannot be settled by hand."""

import json
import signal
from pathlib import Path

from ..waiting import wait_until
from .conftest import target


def test_a_parent_waiting_on_a_child_names_the_childs_wait_and_following_it_completes_both(journal):
    run = journal("run", target("waiting_parent"), "--input", "20", "--id", "p")
    assert run.exit_code == 3
    assert "waiting for child invocation p.kid, which waits for promise 'approval'" in run.stderr
    assert "journal resolve p.kid approval true" in run.stderr
    assert "journal resume p" in run.stderr
    assert "child:" not in run.stderr  # nothing suggests settling the parent's own wait

    # Following the message: the child's approval, then the parent, which runs the child first.
    assert journal("resolve", "p.kid", "approval", "true").exit_code == 0
    resumed = journal("resume", "p", "--json")
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == 41
    assert json.loads(journal("show", "p.kid", "--json").stdout)["status"] == "completed"


def test_resolve_refuses_a_child_promise_and_leaves_both_untouched(journal):
    journal("run", target("waiting_parent"), "--input", "20", "--id", "p")
    before = [journal("show", i, "--json").stdout for i in ("p", "p.kid")]
    for args in (["child:p.kid", "7"], ["child:p.kid", "--reject", "no"]):
        refused = journal("resolve", "p", *args)
        assert refused.exit_code == 2
        assert "settled only when the child finishes" in refused.stderr
        assert "journal resolve p.kid approval JSON" in refused.stderr
    assert [journal("show", i, "--json").stdout for i in ("p", "p.kid")] == before


def test_a_parent_waits_for_a_child_that_another_worker_runs(sh, tmp_path):
    """Worker A has only the parent's handler, worker B only the child's: A leaves the child
    to B and the parent waits for it, instead of failing for want of its handler."""
    agents = str(Path(__file__).with_name("cli_agents.py"))
    started = sh("start", "parent", "--id", "p", "--input", "20")
    assert started.returncode == 0, started.stderr
    parents = sh.popen("worker", "--handler", f"parent={agents}:name_parent")
    wait_until(lambda: _status(sh, "p") == "suspended", "the parent to wait for its child")
    assert _status(sh, "p.kid") == "pending"  # A did not run it: not its handler
    children = sh.popen("worker", "--handler", f"child={agents}:child")
    wait_until(lambda: _status(sh, "p") == "completed", "the parent to complete once B ran the child")
    for worker in (parents, children):
        sh.stopped(worker, signal.SIGTERM)
    assert json.loads(sh("show", "p", "--json").stdout)["result"] == 41
    kid = json.loads(sh("show", "p.kid", "--json").stdout)
    assert kid["status"] == "completed" and kid["handler"] == "child" and kid["result"] == 40


def _status(sh, invocation_id):
    shown = sh("show", invocation_id, "--json")
    return json.loads(shown.stdout)["status"] if shown.returncode == 0 else None
