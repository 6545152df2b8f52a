"""`journal state KEY`, `run --key` and its queue, and the links `journal show` draws between invocations."""

import json
import signal

from journal import LmdbStore

from ..waiting import Lines, wait_until
from .conftest import target


def _state(journal, key, *args):
    result = journal("state", key, "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _links(journal, invocation_id):
    out = json.loads(journal("show", invocation_id, "--json").stdout)
    return {k: out[k] for k in ("parent", "children", "continued_from", "continued_as", "forked_from")}


# -- journal state ------------------------------------------------------------------------------


def test_state_json_has_each_name_decoded_and_an_empty_queue_after_the_turns(journal):
    for n, message in enumerate(["hi", "again", "third"], 1):
        result = journal("run", target("turn"), "--key", "thread-42", "--input", json.dumps(message), "--id", f"t{n}")
        assert result.exit_code == 0, result.stderr
    out = _state(journal, "thread-42")
    assert out == {
        "key": "thread-42",
        "state": {
            "history": ["hi", "hi, after 0 turns", "again", "again, after 1 turns", "third", "third, after 2 turns"],
            "turns": 3,
        },
        "queue": [],
    }


def test_state_table_fits_80_columns_and_cuts_long_values(journal):
    journal("run", target("turn"), "--key", "k", "--input", json.dumps("x" * 300))
    result = journal("state", "k")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["key", "k"]
    assert lines[1].startswith("queue  empty")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["NAME"])
    assert lines[header].split() == ["NAME", "SIZE", "VALUE"]
    rows = {line.split()[0]: line for line in lines[header + 1:]}
    assert set(rows) == {"history", "turns"}
    assert rows["history"].endswith("…") and " B  " in rows["history"]
    assert rows["turns"].split()[-1] == "1"
    assert all(len(line) <= 80 for line in lines)


def test_state_of_a_key_never_used_is_empty_and_says_so(journal):
    journal("run", target("turn"), "--key", "used", "--input", '"x"')
    assert _state(journal, "never-used") == {"key": "never-used", "state": {}, "queue": []}
    human = journal("state", "never-used")
    assert human.exit_code == 0 and human.stdout == ""
    assert "no invocation in this store was run with key 'never-used'" in human.stderr


def test_state_of_a_key_whose_handler_set_nothing_shows_its_queue(journal):
    journal("run", target("waiting_turn"), "--key", "k", "--input", '"first"', "--id", "w1")
    result = journal("state", "k")
    assert result.exit_code == 0
    assert "queue  w1 (suspended on promise 'go')" in result.stdout
    assert "no state" in result.stdout
    assert "journal resolve w1 go" in result.stderr


def test_state_of_an_invalid_key_exits_2(journal):
    journal("run", target("turn"), "--key", "k", "--input", '"x"')
    result = journal("state", "")
    assert result.exit_code == 2 and "key is empty" in result.stderr


def test_state_needs_an_existing_store(journal):
    result = journal("state", "k")
    assert result.exit_code == 2 and "no journal store" in result.stderr


# -- run --key: one at a time, in arrival order -------------------------------------------------


def test_run_behind_an_unfinished_invocation_of_its_key_exits_3_and_waits_in_the_queue(journal, db):
    assert journal("run", target("waiting_turn"), "--key", "k", "--input", '"first"', "--id", "w1").exit_code == 3
    second = journal("run", target("waiting_turn"), "--key", "k", "--input", '"second"', "--id", "w2")
    assert second.exit_code == 3
    assert "invocation w2 is queued on key 'k'" in second.stderr
    assert "the queue waits for w1, suspended on promise 'go'" in second.stderr
    assert f"then continue this one: journal resume w2 --db {db}" in second.stderr
    as_json = json.loads(journal("run", target("waiting_turn"), "--key", "k", "--input", '"second"', "--id", "w2",
                                 "--json").stdout)
    assert as_json["id"] == "w2" and as_json["status"] == "pending"
    assert _state(journal, "k")["queue"] == ["w1", "w2"]
    journal("resolve", "w2", "go", "--early")  # queued: it has not asked yet
    early = journal("resume", "w2")
    assert early.exit_code == 3 and "the queue waits for w1, suspended on promise 'go'" in early.stderr

    journal("resolve", "w1", "go")
    assert journal("resume", "w1").exit_code == 0
    assert _state(journal, "k")["queue"] == ["w2"]
    assert journal("resume", "w2").exit_code == 0
    assert _state(journal, "k") == {"key": "k", "state": {"history": ["first", "second"]}, "queue": []}


def _stop(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _wait_until_running(sh, invocation_id, proc):
    def running():
        assert proc.poll() is None, proc.communicate()
        shown = sh("show", invocation_id, "--json")
        return shown.returncode == 0 and json.loads(shown.stdout)["status"] == "running"

    wait_until(running, f"{invocation_id} to start running")


def _start_holder(sh, tmp_path):
    """`journal run` of a turn on key "k" (id "h") that holds the key until `release` exists."""
    release = tmp_path / "release"
    holder = sh.popen("run", target("held_turn"), "--key", "k", "--id", "h",
                    "--input", json.dumps({"release": str(release)}))
    return release, holder


def test_run_waits_while_an_earlier_invocation_of_its_key_runs_in_another_process(sh, tmp_path, db):
    release, holder = _start_holder(sh, tmp_path)
    _wait_until_running(sh, "h", holder)
    waiter = sh.popen("run", target("turn"), "--key", "k", "--id", "after", "--input", '"next"')
    err = Lines(waiter.stderr)
    err.wait_for("after waits for h, which runs first on key 'k'")
    assert waiter.poll() is None  # waiting its turn, not failing
    assert json.loads(sh("state", "k", "--json").stdout)["queue"] == ["h", "after"]
    release.touch()
    assert waiter.wait(timeout=60) == 0, err.text()
    assert json.loads(waiter.stdout.read()) == ["held", "next", "next, after 0 turns"]
    assert holder.wait(timeout=30) == 0
    state = json.loads(sh("state", "k", "--json").stdout)
    assert state["state"]["history"] == ["held", "next", "next, after 0 turns"] and state["queue"] == []


def test_ctrl_c_while_waiting_for_its_turn_leaves_the_invocation_queued(sh, tmp_path, db):
    release, holder = _start_holder(sh, tmp_path)
    _wait_until_running(sh, "h", holder)
    waiter = sh.popen("run", target("turn"), "--key", "k", "--id", "after", "--input", '"next"')
    # Once it says it waits, it is in the loop that Ctrl-C must leave cleanly.
    err = Lines(waiter.stderr)
    err.wait_for("after waits for h, which runs first on key 'k'")
    waiter.send_signal(signal.SIGINT)
    assert waiter.wait(timeout=60) == 130, err.text()
    assert f"journal resume after --db {db}" in err.text()
    assert json.loads(sh("state", "k", "--json").stdout)["queue"] == ["h", "after"]
    release.touch()
    assert holder.wait(timeout=30) == 0
    assert sh("resume", "after").returncode == 0


def test_run_behind_an_invocation_whose_process_died_names_it(sh, tmp_path, db):
    release = tmp_path / "release"
    holder = sh.popen("run", target("held_turn"), "--key", "k", "--id", "h",
                    "--input", json.dumps({"release": str(release)}))
    try:
        _wait_until_running(sh, "h", holder)
    finally:
        _stop(holder)  # SIGKILL: its lease is left behind, held by a dead process

    second = sh("run", target("turn"), "--key", "k", "--id", "next", "--input", '"next"', timeout=30)
    assert second.returncode == 3, second.stderr
    assert "the queue waits for h (its process is gone)" in second.stderr
    state = sh("state", "k")
    assert "h (running, but its process is gone), next (pending)" in state.stdout
    assert f"journal resume h --db {db}" in state.stderr

    release.touch()
    assert sh("resume", "h").returncode == 0
    assert sh("resume", "next").returncode == 0
    assert json.loads(sh("state", "k", "--json").stdout)["state"]["history"] == ["held", "next", "next, after 0 turns"]


# -- show: parent, children, forks and continue-as-new ------------------------------------------


def test_show_json_links_a_parent_and_its_children(journal):
    assert journal("run", target("parent"), "--input", "3", "--id", "p").exit_code == 0
    assert _links(journal, "p") == {"parent": None, "children": ["p.kid", "p.sent"], "continued_from": None,
                                    "continued_as": None, "forked_from": None}
    assert _links(journal, "p.kid") == {"parent": "p", "children": [], "continued_from": None,
                                        "continued_as": None, "forked_from": None}
    entries = json.loads(journal("show", "p", "--json").stdout)["entries"]
    called = [(e["seq"], e["child"], e["awaited"]) for e in entries if e["kind"] == "called"]
    assert called == [(1, "p.kid", True), (3, "p.sent", False)]


def test_show_prints_the_parent_and_the_children_with_their_status(journal):
    journal("run", target("parent"), "--input", "3", "--id", "p")
    text = journal("show", "p").stdout
    assert "children    p.kid (completed), p.sent (pending)" in text
    assert "called     cli_agents.py:child  child p.sent (not awaited)" in text
    kid = journal("show", "p.kid").stdout
    assert "parent      p (completed)" in kid and "forked from" not in kid


def test_show_tells_a_fork_from_a_child(journal):
    journal("run", target("parent"), "--input", "3", "--id", "p")
    journal("fork", "p.kid", "--at", "1", "--new-id", "kid-fork")
    assert _links(journal, "kid-fork")["forked_from"] == "p.kid"
    assert _links(journal, "kid-fork")["parent"] == "p.kid"  # `parent` keeps its meaning
    text = journal("show", "kid-fork").stdout
    assert "forked from  p.kid" in text and "\nparent" not in text


def test_show_json_and_text_follow_a_continue_as_new_chain(journal):
    result = journal("run", target("countdown"), "--input", "2", "--id", "c", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == "c~2"
    assert _links(journal, "c") == {"parent": None, "children": [], "continued_from": None,
                                    "continued_as": "c~1", "forked_from": None}
    assert _links(journal, "c~1")["continued_from"] == "c" and _links(journal, "c~1")["continued_as"] == "c~2"
    assert _links(journal, "c~2")["continued_from"] == "c~1" and _links(journal, "c~2")["continued_as"] is None
    text = journal("show", "c~1").stdout
    assert "continued from  c (completed)" in text
    assert "continued as    c~2 (completed)" in text
    assert "continued_as_new  -     continued as c~1" in journal("show", "c").stdout
    assert all(len(line) <= 80 for line in text.splitlines())


def test_show_json_keeps_the_documented_keys(journal):
    journal("run", target("turn"), "--key", "k", "--input", '"x"', "--id", "t")
    out = json.loads(journal("show", "t", "--json").stdout)
    assert set(out) == {"id", "handler", "status", "key", "parent", "created_at", "updated_at", "input", "result",
                        "error", "waiting", "wake_at", "entries", "children", "continued_from", "continued_as",
                        "forked_from", "priority", "start_at", "tags"}
    assert out["key"] == "k"
    kinds = [(e["kind"], e["name"]) for e in out["entries"]]
    assert kinds == [("started", None), ("state_get", "history"), ("step", "answer"), ("state_set", "turns"),
                     ("state_set", "history"), ("completed", None)]


def test_show_describes_state_entries(journal):
    journal("run", target("turn"), "--key", "k", "--input", '"x"', "--id", "t1")
    journal("run", target("turn"), "--key", "k", "--input", '"y"', "--id", "t2")
    rows = {(line.split()[0], line.split()[2]): line for line in journal("show", "t2").stdout.splitlines()
            if line[:3].strip().isdigit()}
    assert rows[("1", "state_get")].endswith('["x","x, after 0 turns"]')
    assert rows[("3", "state_set")].endswith("  2")
    first = {line.split()[0]: line for line in journal("show", "t1").stdout.splitlines() if line[:3].strip().isdigit()}
    assert first["1"].endswith("(not set)")


def test_ls_key_lists_the_turns_of_one_thread(journal):
    journal("run", target("turn"), "--key", "a", "--input", '"1"', "--id", "a1")
    journal("run", target("turn"), "--key", "b", "--input", '"1"', "--id", "b1")
    journal("run", target("turn"), "--key", "a", "--input", '"2"', "--id", "a2")
    assert [i["id"] for i in json.loads(journal("ls", "--key", "a", "--json").stdout)] == ["a1", "a2"]
    empty = journal("ls", "--key", "c")
    assert empty.exit_code == 0 and "no invocations of key 'c'" in empty.stderr


def test_turns_started_together_each_wait_for_their_own_turn_and_run_in_order(sh, db):
    """Four `journal run --key` at once, twenty times over: every run completes its own turn
    (exit 0), and the turns run in the order the key's queue gave them, however the
    hand-over from one turn to the next fell for the waiters looking at that moment."""
    for round_ in range(20):
        key = f"k{round_}"
        runs = {f"{key}-{n}": sh.popen("run", target("slow_turn"), "--key", key, "--id", f"{key}-{n}",
                                       "--input", json.dumps(f"m{n}")) for n in range(4)}
        results = {}
        for invocation_id, proc in runs.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"round {round_}: {invocation_id} exited {proc.returncode}: {err}"
            results[invocation_id] = json.loads(out)
        with LmdbStore(db, readonly=True) as store:  # the key's queue order, which each turn kept
            order = sorted(runs, key=lambda i: store.require(i).queued_at)
        history = json.loads(sh("state", key, "--json").stdout)["state"]["history"]
        assert history == [f"m{i.rsplit('-', 1)[1]}!" for i in order], f"round {round_}"
        for invocation_id, result in results.items():  # each saw the turns before its own
            assert result == history[:order.index(invocation_id) + 1]
