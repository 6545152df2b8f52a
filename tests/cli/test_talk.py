"""`journal send`, `journal request`, `journal get`: real processes on a real store."""

from __future__ import annotations

import json

from .conftest import target


def _talker(sh):
    done = sh("run", target("talker"), "--input", '"hi"', "--id", "t")
    assert done.returncode == 3, done.stderr  # suspended in its receive
    assert "waiting for a message on topic 'chat'" in done.stderr and "journal send t chat" in done.stderr


def test_send_delivers_once_per_message_id_and_refuses_what_does_not_fit(sh):
    _talker(sh)
    for _ in range(2):
        sent = sh("send", "t", "chat", '"one"', "--message-id", "m-1", "--json")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout) == {"id": "t", "topic": "chat", "message_id": "m-1", "status": "pending"}
    refused = sh("send", "t", "chat", "42")
    assert refused.returncode == 2 and "receives topic 'chat' as str" in refused.stderr
    assert sh("send", "t", "chat", "not json").returncode == 2
    assert sh("send", "t", "chat", '"bye"').returncode == 0
    assert json.loads(sh("resume", "t", "--json").stdout)["result"] == ["one"]
    finished = sh("send", "t", "chat", '"late"')
    assert finished.returncode == 2 and "already completed" in finished.stderr


def test_request_prints_the_reply_or_exits_3_with_the_command_that_waits_again(sh):
    _talker(sh)
    pending = sh("request", "t", "chat", '"status?"', "--wait", "0", "--message-id", "q-1")
    assert pending.returncode == 3 and "--message-id q-1" in pending.stderr
    worker = sh.popen("worker", "--concurrency", "1")
    answered = sh("request", "t", "chat", "--wait", "30", "--message-id", "q-1", "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout) == {"id": "t", "message_id": "q-1", "replied": True,
                                           "reply": {"greeting": "hi", "count": 1}}
    sh.stopped(worker)


def test_get_answers_with_every_worker_stopped_and_wait_returns_a_newer_value(sh):
    _talker(sh)  # it ran, published, and suspended: no process runs anything now
    got = sh("get", "t", "count", "--json")
    assert got.returncode == 0, got.stderr
    first = json.loads(got.stdout)
    assert first["value"] == 0 and first["name"] == "count"
    assert sh("get", "t").stdout.split() == ["count", "0"]
    missing = sh("get", "t", "nothing")
    assert missing.returncode == 2 and "no value 'nothing'" in missing.stderr
    waiting = sh.popen("get", "t", "count", "--wait", "30", "--after", str(first["seq"]), "--json")
    assert sh("send", "t", "chat", '"one"').returncode == 0
    assert sh("resume", "t").returncode == 3  # it counted the word, and waits for the next
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    newer = json.loads(out)
    assert newer["value"] == 1 and newer["seq"] > first["seq"]
