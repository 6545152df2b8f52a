"""A promise the invocation neither waits on nor has recorded (a typo) is refused the same
way on the command line as over HTTP, unless it is resolved --early on purpose."""

from __future__ import annotations

import json

from .serving import AGENTS, Server


def test_a_mistyped_promise_is_refused_by_the_cli_and_the_api_alike(tmp_path, sh, db):
    server = Server(db, tmp_path / "serve.log")
    try:
        server.client.post("/invocations", json={"handler": "approve", "input": {"order": "T"}, "id": "typo"})
        server.wait_status("typo", "suspended")

        over_http = server.client.post("/invocations/typo/promises/aproval", json={"value": True})
        assert over_http.status_code == 404, over_http.text
        error = over_http.json()["error"]
        assert error["type"] == "PromiseNotFound"
        assert "'aproval'" in error["message"] and "it waits on 'approval'" in error["message"]

        on_cli = sh("resolve", "typo", "aproval", "true")
        assert on_cli.returncode == 2, on_cli.stderr
        assert error["message"] in on_cli.stderr
        rejected = sh("resolve", "typo", "aproval", "--reject", "no")
        assert rejected.returncode == 2 and error["message"] in rejected.stderr
        assert server.status("typo")["status"] == "suspended"
        assert server.client.get("/invocations/typo/entries").json()["entries"][-1]["kind"] == "emitted"

        # Meant ahead of time: kept until the handler asks for it.
        early = server.client.post("/invocations/typo/promises/later", json={"value": 1, "early": True})
        assert early.status_code == 200, early.text
        assert sh("resolve", "typo", "later-too", "2", "--early").returncode == 0
        assert server.status("typo")["status"] == "suspended"

        # The right name completes it.
        assert sh("resolve", "typo", "approval", json.dumps({"approved": True, "by": "cli"})).returncode == 0
        assert server.client.get("/invocations/typo/result", params={"wait": 20}).json()["status"] == "completed"
        # Settled or recorded promises are known: the same value again is accepted, both ways.
        assert sh("resolve", "typo", "approval", json.dumps({"approved": True, "by": "cli"})).returncode == 0
        again = server.client.post("/invocations/typo/promises/approval", json={"value": {"approved": True, "by": "cli"}})
        assert again.status_code == 200, again.text
    finally:
        server.stop()


def test_an_invocation_that_never_asks_refuses_the_promise_unless_early(sh, db):
    assert sh("start", f"{AGENTS}:echo", "--input", '"x"', "--id", "e1").returncode == 0
    refused = sh("resolve", "e1", "approval", "true")
    assert refused.returncode == 2
    assert "has no promise 'approval': it is pending" in refused.stderr and "--early" in refused.stderr
    assert sh("resolve", "e1", "approval", "true", "--early").returncode == 0


def test_a_conflict_over_http_names_no_command_line_option(tmp_path, db):
    server = Server(db, tmp_path / "serve.log")
    try:
        server.client.post("/invocations", json={"handler": "echo", "input": "a", "id": "c1"})
        conflict = server.client.post("/invocations", json={"handler": "echo", "input": "b", "id": "c1"})
        assert conflict.status_code == 409
        message = conflict.json()["error"]["message"]
        assert "--id" not in message and "another id" in message
    finally:
        server.stop()
