"""The check that keeps `/openapi.json` true (`openapi_check.py`) catches what it must."""

from __future__ import annotations

import pytest

from .openapi_check import Document, Mismatch
from .serving import Server


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openapi")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    try:
        yield Document(s.client.get("/openapi.json").json()), s
    finally:
        s.stop()


def test_the_servers_answers_are_checked_against_its_document(document):
    _, server = document
    before = server.answers.checked
    started = server.client.post("/invocations", json={"handler": "echo", "input": "hello", "id": "o1"})
    assert started.status_code == 201
    server.wait_status("o1", "completed")
    assert server.client.get("/invocations", params={"limit": 2}).status_code == 200
    assert server.client.get("/invocations/o1/entries").status_code == 200
    assert server.client.get("/invocations/nobody").status_code == 404
    assert server.answers.checked >= before + 5


def test_a_wrong_answer_does_not_fit(document):
    doc, _ = document
    _, op = doc.operation("GET", "/invocations/a/b")  # an id may hold slashes
    fits = op["responses"]["200"]["content"]["application/json"]["schema"]
    with pytest.raises(Mismatch, match="is not"):
        doc.check({"id": 7, "status": "completed"}, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="is not one of"):
        doc.check({"id": "x", "status": "finished"}, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="lacks the required 'error'"):
        doc.check({}, {"$ref": "#/components/schemas/Error"}, "an error")
    with pytest.raises(Mismatch, match="not in /openapi.json"):
        doc.operation("DELETE", "/invocations/x")
