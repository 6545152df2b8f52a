"""`journal cancel ID --rollback`: the key's state goes back to what it was before the invocation."""

import json

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
