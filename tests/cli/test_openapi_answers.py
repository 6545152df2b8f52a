"""The check that keeps `/openapi.json` true (`openapi_check.py`) catches what it must."""

from __future__ import annotations

import msgspec
import pytest

from runtime.http import models

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
    doc, server = document
    server.client.post("/invocations", json={"handler": "echo", "input": "right", "id": "o3"})
    server.wait_status("o3", "completed")
    right = server.client.get("/invocations/o3").json()
    _, op = doc.operation("GET", "/invocations/a/b")  # an id may hold slashes
    fits = op["responses"]["200"]["content"]["application/json"]["schema"]
    doc.check(right, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="is not"):
        doc.check({**right, "id": 7}, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="is not one of"):
        doc.check({**right, "status": "finished"}, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="lacks the required 'status'"):
        doc.check({k: v for k, v in right.items() if k != "status"}, fits, "GET /invocations/{id}")
    with pytest.raises(Mismatch, match="lacks the required 'error'"):
        doc.check({}, {"$ref": "#/components/schemas/Error"}, "an error")
    with pytest.raises(Mismatch, match="not in /openapi.json"):
        doc.operation("DELETE", "/invocations/x")


def test_the_documents_schemas_are_the_body_types_the_routes_use(document):
    doc, _ = document
    _, generated = msgspec.json.schema_components(models.REQUESTS + models.ANSWERS,
                                                  ref_template="#/components/schemas/{name}")
    assert doc.doc["components"]["schemas"] == generated
    start = doc.operation("POST", "/invocations")[1]["requestBody"]["content"]["application/json"]["schema"]
    assert start == {"$ref": "#/components/schemas/StartRequest"}
    assert generated["StartRequest"]["additionalProperties"] is False  # the route refuses what it does not know


def test_every_field_of_an_answer_is_documented(document):
    doc, server = document
    server.client.post("/invocations", json={"handler": "echo", "input": "fields", "id": "o2"})
    server.wait_status("o2", "completed")
    for path, model in (("/invocations/o2", "Invocation"), ("/invocations/o2/result", "Result")):
        answer = server.client.get(path).json()
        schema = doc.doc["components"]["schemas"][model]
        assert set(answer) <= set(schema["properties"]), f"{path} sends fields its type does not have"
        assert set(schema["required"]) <= set(answer)
    listed = server.client.get("/invocations", params={"limit": 1}).json()["invocations"][0]
    assert set(listed) <= set(doc.doc["components"]["schemas"]["Summary"]["properties"])
