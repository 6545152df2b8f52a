"""Talking to a running invocation over HTTP, against a real `journal serve`: messages,
requests and replies, published values; every answer checked against /openapi.json."""

from __future__ import annotations

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


def _talking(server, invocation_id="t"):
    answer = server.client.post("/invocations", json={"handler": "talk", "input": "hi", "id": invocation_id})
    assert answer.status_code == 201, answer.text
    doc = server.wait_status(invocation_id, "suspended")
    assert doc["waiting_on"][0]["kind"] == "message" and doc["waiting_on"][0]["topic"] == "chat"
    return doc


def test_messages_are_received_in_order_once_and_a_retried_send_is_dropped(server):
    _talking(server)
    for word, mid in (("one", "m1"), ("one", "m1"), ("two", "m2")):
        answer = server.client.post("/invocations/t/messages/chat", json={"value": word, "id": mid})
        assert answer.status_code == 202, answer.text
        assert answer.json()["message_id"] == mid
    wait_for(lambda: server.client.get("/invocations/t/values/count").json()["value"] == 2, what="two words counted")
    server.client.post("/invocations/t/messages/chat", json={"value": "bye"})
    result = server.client.get("/invocations/t/result", params={"wait": 20}).json()
    assert result["status"] == "completed" and result["result"] == ["one", "two"]
    # A finished invocation takes no more messages.
    assert _error(server.client.post("/invocations/t/messages/chat", json={"value": "late"}), 409)["type"] == \
        "MessageRefused"


def test_a_value_that_does_not_fit_the_topic_is_refused_and_the_run_goes_on(server):
    _talking(server)
    error = _error(server.client.post("/invocations/t/messages/chat", json={"value": 7}), 422)
    assert error["type"] == "MessageValueRefused" and "as str" in error["message"]
    assert server.status("t")["status"] == "suspended"
    assert _error(server.client.post("/invocations/ghost/messages/chat", json={"value": "x"}), 404)["type"] == \
        "InvocationNotFound"
    assert _error(server.client.post("/invocations/t/messages/chat", json={"valu": "x"}), 422)["type"] == "InvalidBody"


def test_a_request_is_answered_with_200_or_202_and_the_reply_is_read_later(server):
    _talking(server)
    answer = server.client.post("/invocations/t/requests/chat", params={"wait": 20}, json={"value": "status?"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == {"greeting": "hi", "count": 1}
    # Never answered within no wait at all: 202 and its id, then the reply once it is there.
    answer = server.client.post("/invocations/t/requests/chat", json={"value": "again", "id": "q-2"})
    assert answer.status_code in (200, 202), answer.text
    reply = server.client.get("/invocations/t/replies/q-2", params={"wait": 20})
    assert reply.status_code == 200 and reply.json() == {"message_id": "q-2", "reply": {"greeting": "hi", "count": 2}}
    assert _error(server.client.get("/invocations/t/replies/nothing-sent"), 404)["type"] == "MessageNotFound"


def test_a_request_to_an_invocation_that_never_replies_is_202_and_can_be_read_later(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "A"}, "id": "a"})
    server.wait_status("a", "suspended")
    answer = server.client.post("/invocations/a/requests/anything", params={"wait": 0.2}, json={"value": 1})
    assert answer.status_code == 202, answer.text
    message_id = answer.json()["message_id"]
    later = server.client.get(f"/invocations/a/replies/{message_id}")
    assert later.status_code == 202 and later.json()["message_id"] == message_id


def test_published_values_are_read_by_name_and_a_wait_returns_a_newer_one(server):
    _talking(server)
    values = server.client.get("/invocations/t/values").json()["values"]
    assert values["count"]["value"] == 0
    seen = values["count"]["seq"]
    server.client.post("/invocations/t/messages/chat", json={"value": "one"})
    newer = server.client.get("/invocations/t/values/count", params={"wait": 20, "after": seen})
    assert newer.status_code == 200 and newer.json()["value"] == 1 and newer.json()["seq"] > seen
    assert _error(server.client.get("/invocations/t/values/none"), 404)["type"] == "ValueNotPublished"
