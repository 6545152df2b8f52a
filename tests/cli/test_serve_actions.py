"""The operator actions of `journal serve` over HTTP (cancel, resume, fork, retry), against a
real server process; the same rules and errors as the commands."""

from __future__ import annotations

import signal

import pytest

from .serving import Server, wait_for


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log")
    yield s
    s.stop()


def _error(response, status):
    assert response.status_code == status, response.text
    return response.json()["error"]


def _result(server, invocation_id):
    return server.client.get(f"/invocations/{invocation_id}/result", params={"wait": 20}).json()


def _entries(server, invocation_id):
    return server.client.get(f"/invocations/{invocation_id}/entries").json()["entries"]


def test_cancel_with_rollback_puts_the_keys_state_back(server):
    server.client.post("/invocations", json={"handler": "drafting", "input": "first draft", "id": "d", "key": "k"})
    server.wait_status("d", "suspended")
    assert server.client.get("/keys/k/state").json()["state"] == {"draft": "first draft"}
    answer = server.client.post("/invocations/d/cancel", json={"rollback": True})
    assert answer.status_code == 202, answer.text
    assert _result(server, "d")["status"] == "cancelled"
    assert server.client.get("/keys/k/state").json()["state"] == {}
    assert _entries(server, "d")[-1]["kind"] == "cancelled"


def test_cancel_refuses_an_unknown_field_and_an_unknown_invocation(server):
    assert _error(server.client.post("/invocations/ghost/cancel", json={}), 404)["type"] == "InvocationNotFound"
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "C"}, "id": "c"})
    server.wait_status("c", "suspended")
    assert _error(server.client.post("/invocations/c/cancel", json={"rolback": True}), 422)["type"] == "InvalidBody"
    assert server.status("c")["status"] == "suspended"  # nothing was recorded


def test_fork_with_an_edited_value_runs_from_the_fork_point_with_it(server):
    server.client.post("/invocations", json={"handler": "planned", "input": "tea", "id": "p"})
    assert _result(server, "p")["result"] == "wrote from: plan for tea"
    answer = server.client.post("/invocations/p/fork", json={"at": 2, "set": {"1": "a better plan"}, "new_id": "p2"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["id"] == "p2" and answer.json()["status"] == "pending"
    # The workers run the pending fork: the plan is replayed as edited, the writing runs live.
    assert _result(server, "p2") == {"id": "p2", "status": "completed", "result": "wrote from: a better plan",
                                     "error": None}
    assert [(e["name"], e.get("value")) for e in _entries(server, "p2") if e["kind"] == "step"] == [
        ("plan", "a better plan"), ("write", "wrote from: a better plan")]
    assert _result(server, "p")["result"] == "wrote from: plan for tea"  # the original is untouched


def test_fork_refuses_what_journal_fork_refuses(server):
    server.client.post("/invocations", json={"handler": "planned", "input": "tea", "id": "q"})
    _result(server, "q")
    error = _error(server.client.post("/invocations/q/fork", json={"at": 9}), 422)
    assert error["type"] == "ForkError" and "pick a fork point from 1 to 3" in error["message"]
    error = _error(server.client.post("/invocations/q/fork", json={"at": 2, "set": {"plan": 1}}), 422)
    assert "'plan' is not a seq" in error["message"]
    error = _error(server.client.post("/invocations/q/fork", json={"at": 2, "set": {"0": 1}}), 422)
    assert "seq 0 is the start entry" in error["message"]
    assert _error(server.client.post("/invocations/q/fork", json={}), 422)["type"] == "InvalidBody"
    error = _error(server.client.post("/invocations/q/fork", json={"at": 2, "new_id": "q"}), 409)
    assert error["type"] == "InvocationConflict"
    assert [i["id"] for i in server.client.get("/invocations").json()["invocations"]] == ["q"]


def test_retry_forks_a_failed_run_before_its_failing_step_and_runs_it(server, tmp_path):
    marker = tmp_path / "card-fixed"
    server.client.post("/invocations", json={"handler": "checkout", "input": str(marker), "id": "buy"})
    failed = _result(server, "buy")
    assert failed["status"] == "failed" and "declined" in failed["error"]["message"]
    assert _error(server.client.post("/invocations/ghost/retry"), 404)["type"] == "InvocationNotFound"

    marker.write_text("the card works now")
    answer = server.client.post("/invocations/buy/retry")
    assert answer.status_code == 201, answer.text
    retried = answer.json()["id"]
    assert retried.startswith("buy-retry-")
    assert _result(server, retried)["result"] == "reserved, charged"
    steps = [e for e in _entries(server, retried) if e["kind"] == "step"]
    assert [s["name"] for s in steps] == ["reserve", "charge"]  # the reserve was copied, the charge ran again
    assert server.status(retried)["forked_from"] == "buy"

    error = _error(server.client.post(f"/invocations/{retried}/retry"), 409)
    assert error["type"] == "NotRetryable" and "only a failed invocation" in error["message"]


def test_resume_runs_a_pending_invocation_in_an_api_only_server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--workers", "0")
    try:
        s.client.post("/invocations", json={"handler": "echo", "input": "later", "id": "e"})
        assert s.status("e")["status"] == "pending"  # no workers: nobody runs it
        answer = s.client.post("/invocations/e/resume")
        assert answer.status_code == 202, answer.text
        assert _result(s, "e")["result"] == "later"
        error = _error(s.client.post("/invocations/e/resume"), 409)
        assert error["type"] == "NotResumable" and "completed" in error["message"]
    finally:
        s.stop()


def test_resume_takes_over_a_running_invocation_whose_server_was_killed(tmp_path):
    db = str(tmp_path / "db")
    entered, marker = tmp_path / "entered", tmp_path / "go"
    first = Server(db, tmp_path / "first.log")
    first.client.post("/invocations", json={"handler": "gate", "id": "g",
                                            "input": {"entered": str(entered), "marker": str(marker)}})
    wait_for(entered.exists, what="the handler to be in flight")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    first.client.close()
    marker.write_text("go")

    second = Server(db, tmp_path / "second.log", "--workers", "0")
    try:
        assert second.status("g")["status"] == "running"  # as the killed server left it
        answer = second.client.post("/invocations/g/resume")
        assert answer.status_code == 202, answer.text
        assert _result(second, "g") == {"id": "g", "status": "completed", "result": "after", "error": None}
        kinds = [(e["kind"], e["name"]) for e in _entries(second, "g")]
        assert kinds == [("started", None), ("step", "before"), ("step", "after"), ("completed", None)]
    finally:
        second.stop()


def test_resume_refuses_a_suspended_invocation_and_says_what_it_waits_for(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "W"}, "id": "w"})
    server.wait_status("w", "suspended")
    error = _error(server.client.post("/invocations/w/resume"), 409)
    assert error["type"] == "NotResumable" and "resolve the promise" in error["message"]


def test_the_actions_are_in_the_openapi_document(server):
    paths = server.client.get("/openapi.json").json()["paths"]
    for action, answer in (("cancel", "202"), ("resume", "202"), ("fork", "201"), ("retry", "201")):
        assert answer in paths[f"/invocations/{{id}}/{action}"]["post"]["responses"]
    assert paths["/invocations/{id}/fork"]["post"]["requestBody"]["required"] is True
