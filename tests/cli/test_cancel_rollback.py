"""`journal cancel ID --rollback`: the key's state goes back to what it was before the invocation."""

import json

from ..waiting import wait_while_alive
from .conftest import target


def _state(journal, key):
    result = journal("state", key, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_cancel_rollback_restores_the_thread_state_for_its_next_turn(journal):
    assert journal("run", target("turn"), "--input", '"hi"', "--key", "t", "--id", "a").exit_code == 0
    before = _state(journal, "t")
    assert journal("run", target("drafting_turn"), "--input", '"draft me"', "--key", "t", "--id", "b").exit_code == 3
    assert _state(journal, "t") != before

    result = journal("cancel", "b", "--rollback")
    assert result.exit_code == 0, result.stderr
    assert _state(journal, "t") == before
    entries = json.loads(journal("show", "b", "--json").stdout)["entries"]
    assert entries[-1]["kind"] == "cancelled"
    # The next turn of the thread continues from the state before the cancelled one.
    nxt = journal("run", target("turn"), "--input", '"again"', "--key", "t", "--id", "c", "--json")
    assert json.loads(nxt.stdout)["result"][:2] == ["hi", "hi, after 0 turns"]
    assert len(json.loads(nxt.stdout)["result"]) == 4


def test_a_cancel_with_rollback_killed_in_its_compensation_rolls_back_once_resumed(sh, tmp_path):
    # Real processes: `journal cancel --rollback` is SIGKILLed while the compensating step
    # runs; the request survives in the store, and `journal resume` finishes the cancellation
    # with the state restored, in one transaction with the `cancelled` entry.
    import os
    import signal
    import subprocess

    assert sh("run", target("turn"), "--input", '"hi"', "--key", "t", "--id", "a").returncode == 0
    before = json.loads(sh("state", "t", "--json").stdout)
    marker = tmp_path / "undo-started"
    job = json.dumps({"message": "draft me", "marker": str(marker)})
    assert sh("run", target("compensating_turn"), "--input", job, "--key", "t", "--id", "b").returncode == 3

    proc = subprocess.Popen(sh.argv("cancel", "b", "--rollback"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path, env=sh.env)
    try:
        wait_while_alive(proc, marker.exists, "the compensating step started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    mid = json.loads(sh("state", "t", "--json").stdout)
    assert mid != before and json.loads(sh("show", "b", "--json").stdout)["status"] == "running"

    resumed = sh("resume", "b", "--json")
    assert json.loads(resumed.stdout)["status"] == "cancelled", resumed.stderr
    assert json.loads(sh("state", "t", "--json").stdout) == before
    entries = json.loads(sh("show", "b", "--json").stdout)["entries"]
    assert entries[-1]["kind"] == "cancelled"
