"""The check that keeps `/openapi.json` true (`openapi_check.py`) catches what it must; the
document is collected from the operations the routes declare, and stays as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from starlette.routing import Route

from runtime.http import _openapi, models
from runtime.http.routes import all_routes

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


# The document served, kept in tests/golden/views/ (sorted, for a diff to review): each route
# declares its own operation beside its endpoint, and this keeps what they add up to as it was.
# A route added or changed on purpose: JOURNAL_WRITE_GOLDEN=1 writes it again.
GOLDEN = Path(__file__).parents[1] / "golden" / "views" / "openapi.json"


def test_the_document_is_as_it_was(document):
    doc, _ = document
    if os.environ.get("JOURNAL_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(doc.doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    assert doc.doc == json.loads(GOLDEN.read_text(encoding="utf-8"))  # key order aside


async def _undocumented(request):
    return None


async def _page(request):
    return None


def test_the_document_is_collected_from_the_routes_and_refuses_one_without_its_operation():
    paths = _openapi.document(all_routes())["paths"]
    assert "/" not in paths and "/i/{id}" not in paths  # the console's pages are not the API
    assert set(paths["/invocations"]) == {"get", "post"}  # a route's methods, HEAD aside
    assert set(paths["/schedules/{name}"]) == {"get", "put", "delete"}
    assert _openapi.document([Route("/page", _page, include_in_schema=False)])["paths"] == {}
    with pytest.raises(LookupError, match="/undocumented has no OpenAPI operation"):
        _openapi.document([Route("/undocumented", _undocumented)])
    documented = _openapi.operation("Nothing", responses={"204": {"description": "nothing"}})(_undocumented)
    assert _openapi.document([Route("/documented", documented, methods=["POST"])])["paths"] == {
        "/documented": {"post": {"summary": "Nothing", "responses": {"204": {"description": "nothing"}}}}}
