"""`journal start|run --priority/--delay/--at` and `POST /invocations` with `priority`,
`delay` and `start_at`: what a user types, and what `ls --json` and `show --json` say."""

from __future__ import annotations

import datetime
import json

import pytest

from ..waiting import wait_until
from .conftest import target
from .serving import Server


def test_start_records_priority_and_a_delay_and_ls_shows_them(journal):
    done = journal("start", target("greet"), "--input", '"ada"', "--id", "urgent", "--priority", "7", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["priority"] == 7
    later = journal("start", target("greet"), "--input", '"bob"', "--id", "later", "--delay", "1h", "--json")
    assert later.exit_code == 0, later.stderr
    start_at = json.loads(later.stdout)["start_at"]
    assert start_at is not None
    listed = {row["id"]: row for row in json.loads(journal("ls", "--json").stdout)}
    assert listed["urgent"]["priority"] == 7 and listed["urgent"]["start_at"] is None
    assert listed["later"]["status"] == "pending" and listed["later"]["start_at"] == start_at
    shown = json.loads(journal("show", "later", "--json").stdout)
    assert shown["start_at"] == start_at
    # The worker runs the urgent one and leaves the delayed one for its time.
    assert journal("worker", "--until-idle").exit_code == 0
    listed = {row["id"]: row["status"] for row in json.loads(journal("ls", "--json").stdout)}
    assert listed == {"urgent": "completed", "later": "pending"}


def test_at_takes_an_iso_time_and_bad_options_exit_2_writing_nothing(journal):
    at = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)).replace(microsecond=0)
    done = journal("start", target("greet"), "--input", '"x"', "--id", "a", "--at", at.isoformat(), "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["start_at"] == at.isoformat().replace("+00:00", "Z")
    for args, said in [(["--delay", "soon"], "--delay 'soon' is not a duration"),
                       (["--at", "tomorrow"], "--at 'tomorrow' is not an ISO 8601 time"),
                       (["--delay", "1m", "--at", at.isoformat()], "--delay or --at, not both"),
                       (["--priority", "9999999999"], "out of range")]:
        bad = journal("start", target("greet"), "--input", '"x"', "--id", "b", *args)
        assert bad.exit_code == 2 and said in bad.stderr, (args, bad.stderr)
    assert [row["id"] for row in json.loads(journal("ls", "--json").stdout)] == ["a"]


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--workers", "1")
    yield s
    s.stop()


def test_http_start_takes_priority_delay_and_start_at(server):
    answer = server.client.post("/invocations", json={"handler": "echo", "input": "x", "id": "d", "delay": 3600,
                                                      "priority": 3})
    assert answer.status_code == 201, answer.text
    doc = server.status("d")
    assert doc["status"] == "pending" and doc["priority"] == 3 and doc["start_at"] is not None
    assert doc["waiting_on"] == [{"kind": "timer", "until": doc["start_at"]}]
    answer = server.client.post("/invocations", json={"handler": "echo", "input": "x", "id": "e",
                                                      "start_at": "2000-01-01T00:00:00Z"})
    assert answer.status_code == 201, answer.text
    assert server.wait_status("e", "completed")["start_at"] is None  # a time already past: at once
    bad = server.client.post("/invocations", json={"handler": "echo", "input": "x", "start_at": "noon"})
    assert bad.status_code == 422 and "start_at" in bad.json()["error"]["message"]
    assert server.status("d")["status"] == "pending"


def test_debounced_starts_print_one_id_and_the_run_takes_the_last_input(journal):
    ids = []
    for name in ("ann", "ben", "cy"):
        done = journal("start", target("greet"), "--input", json.dumps(name), "--key", "k", "--debounce", "50ms")
        assert done.exit_code == 0, done.stderr
        ids.append(done.stdout.strip())
    assert len(set(ids)) == 1
    start_at = json.loads(journal("show", ids[0], "--json").stdout)["start_at"]
    due = datetime.datetime.fromisoformat(start_at)
    wait_until(lambda: datetime.datetime.now(datetime.UTC) > due, "the debounced start's time")
    assert journal("worker", "--until-idle").exit_code == 0
    shown = json.loads(journal("show", ids[0], "--json").stdout)
    assert shown["status"] == "completed" and shown["input"] == "cy" and "cy" in json.dumps(shown["result"])
    bad = journal("start", target("greet"), "--input", '"x"', "--debounce", "1s")
    assert bad.exit_code == 2 and "needs a key" in bad.stderr


def test_two_processes_starting_with_if_busy_reject_on_one_key_never_both_win(db, tmp_path):
    import subprocess
    import sys

    for round_ in range(3):
        key = f"race-{round_}"
        procs = [subprocess.Popen([sys.executable, "-m", "cli", "start", target("greet"), "--input", '"x"',
                                   "--key", key, "--if-busy", "reject", "--db", db],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = []
        for p in procs:
            _, err = p.communicate(timeout=60)
            results.append((p.returncode, err))
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], results
        assert any("KeyBusy" in err or "is busy" in err for code, err in results if code == 2)


def test_http_start_with_if_busy_reject_answers_409_key_busy(server):
    answer = server.client.post("/invocations", json={"handler": "approve", "input": {"order": "A"}, "id": "a",
                                                      "key": "shop"})
    assert answer.status_code == 201, answer.text
    server.wait_status("a", "suspended")
    refused = server.client.post("/invocations", json={"handler": "echo", "input": "x", "id": "b", "key": "shop",
                                                       "if_busy": "reject"})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["type"] == "KeyBusy" and "'a'" in error["message"]
    assert server.client.get("/invocations/b").status_code == 404
