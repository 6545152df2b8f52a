"""What the operator's console reads over HTTP from a real `journal serve`: a typed promise's
schema and a fitting value, a mistyped answer refused with 422 while the run stays
suspended, a failure's traceback, and a pending run no worker here has the handler for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .serving import Server, wait_for
from .test_console import AGENTS


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", agents=AGENTS,
               handlers=("approval=approval", "missing=missing_key"))
    yield s
    s.stop()


def test_a_typed_promise_offers_its_schema_and_refuses_a_mistyped_value_with_422(server, tmp_path):
    args = {"log": str(tmp_path / "log"), "hold": "", "broken": ""}
    assert server.client.post("/invocations", json={"handler": "approval", "input": args, "id": "a"}).status_code == 201
    doc = server.wait_status("a", "suspended")
    [item] = doc["waiting_on"]
    assert item["kind"] == "promise" and item["name"] == "approval"
    assert item["type"] == "console_agents.py:Approval"
    assert item["example"] == {"approved": False, "by": ""}
    approval = item["schema"]["$defs"]["Approval"]
    assert approval["required"] == ["approved", "by"] and approval["properties"]["approved"] == {"type": "boolean"}

    refused = server.client.post("/invocations/a/promises/approval", json={"value": True})
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["type"] == "PromiseValueRefused"
    assert "expects console_agents.py:Approval" in error["message"] and "stays pending" in error["message"]
    assert server.status("a")["status"] == "suspended"

    accepted = server.client.post("/invocations/a/promises/approval", json={"value": {"approved": True, "by": "ada"}})
    assert accepted.status_code == 200, accepted.text
    result = server.client.get("/invocations/a/result", params={"wait": 20}).json()
    assert result["result"] == "approved=True by ada", result


def test_a_failure_answers_with_its_traceback(server):
    assert server.client.post("/invocations", json={"handler": "missing", "input": {}, "id": "m"}).status_code == 201
    doc = server.wait_status("m", "failed")
    [frame] = doc["error"]["traceback"]
    assert frame["file"] == str(AGENTS) and frame["function"] == "missing_key"
    assert 'return d["missing"]' in AGENTS.read_text().splitlines()[frame["line"] - 1]


def test_a_pending_run_whose_handler_this_server_lacks_waits_on_the_handler(server, tmp_path):
    started = subprocess.run([sys.executable, "-m", "cli", "start", "summarize", "--input", "{}", "--id", "s",
                              "--db", str(tmp_path / "db")], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    doc = wait_for(lambda: (d := server.status("s"))["status"] == "pending" and d)
    assert doc["waiting_on"] == [{"kind": "handler", "name": "summarize"}]
