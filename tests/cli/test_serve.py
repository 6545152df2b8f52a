"""`journal serve` end to end: a real server process on loopback, driven over HTTP."""

from __future__ import annotations

import json
import signal

import pytest

from journal import LmdbStore, Status

from .serving import Server, wait_for


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log")
    yield s
    s.stop()


def test_run_service_flow_start_wait_for_approval_resolve_and_get_the_result(server):
    body = {"handler": "approve", "input": {"order": "A-1001"}, "id": "refund-1001"}
    started = server.client.post("/invocations", json=body)
    assert started.status_code == 201, started.text
    assert started.json()["id"] == "refund-1001"

    doc = server.wait_status("refund-1001", "suspended")
    assert doc["waiting_on"] == [{"kind": "promise", "name": "approval"}]
    assert doc["input"] == {"order": "A-1001"}
    assert doc["handler"] == "approve"  # the registered NAME: the record never names code to import
    assert "entries" not in doc

    resolved = server.client.post("/invocations/refund-1001/promises/approval",
                                  json={"value": {"approved": True, "by": "dana"}})
    assert resolved.status_code == 200, resolved.text

    result = server.client.get("/invocations/refund-1001/result", params={"wait": 20})
    assert result.status_code == 200
    assert result.json() == {
        "id": "refund-1001", "status": "completed", "error": None,
        "result": {"order": "A-1001", "status": "refunded", "by": "dana", "note": "refund for A-1001 issued"},
    }

    again = server.client.post("/invocations", json=body)
    assert again.status_code == 200
    assert again.json() == {"id": "refund-1001", "status": "completed"}
    other = server.client.post("/invocations", json={**body, "input": {"order": "B-2"}})
    assert other.status_code == 409
    assert other.json()["error"]["type"] == "InvocationConflict"
    assert other.json()["status"] == "completed"


def test_a_rejected_approval_fails_the_invocation_with_the_reason(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "X"}, "id": "r"})
    server.wait_status("r", "suspended")
    rejected = server.client.post("/invocations/r/promises/approval", json={"reject": "too expensive"})
    assert rejected.status_code == 200
    result = server.client.get("/invocations/r/result", params={"wait": 20}).json()
    assert result["status"] == "failed"
    assert "too expensive" in result["error"]["message"]
    # Settled once: the other outcome now conflicts, the same one is accepted again.
    assert server.client.post("/invocations/r/promises/approval", json={"value": True}).status_code == 409
    assert server.client.post("/invocations/r/promises/approval", json={"reject": "too expensive"}).status_code == 200


def test_result_without_wait_reports_where_the_invocation_stands(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "W"}, "id": "w"})
    server.wait_status("w", "suspended")
    assert server.client.get("/invocations/w/result", params={"wait": 0.1}).json() == {
        "id": "w", "status": "suspended", "result": None, "error": None}


def test_events_stream_entries_emitted_events_and_status_until_the_end(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "E"}, "id": "ev"})
    server.wait_status("ev", "suspended")
    server.client.post("/invocations/ev/promises/approval", json={"value": {"approved": True}})
    events = []
    with server.client.stream("GET", "/invocations/ev/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: "):])))
    kinds = [name for name, _ in events]
    assert kinds[-1] == "end" and events[-1][1]["status"] == "completed"
    emitted = [data for name, data in events if name == "emitted"]
    assert emitted == [{"seq": 2, "value": {"waiting_for": "approval", "draft": "refund for E"},
                        "at": emitted[0]["at"]}]
    seqs = [data["seq"] for name, data in events if name == "entry"]
    assert seqs == sorted(set(seqs)) and seqs[0] == 0 and len(seqs) == 6
    assert ("status", {"id": "ev", "status": "completed", "waiting_on": [], "continued_as": None}) in events


def test_listing_filters_by_status_and_pages_with_a_cursor(server):
    for n in range(5):
        server.client.post("/invocations", json={"handler": "echo", "input": f"t{n}", "id": f"e{n}"})
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "L"}, "id": "waits"})
    server.wait_status("waits", "suspended")
    for n in range(5):
        server.wait_status(f"e{n}", "completed")
    suspended = server.client.get("/invocations", params={"status": "suspended"}).json()
    assert [i["id"] for i in suspended["invocations"]] == ["waits"]
    assert suspended["invocations"][0]["entries"] == 3
    seen, cursor = [], None
    while True:
        params = {"status": "completed", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = server.client.get("/invocations", params=params).json()
        seen += [i["id"] for i in page["invocations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["e4", "e3", "e2", "e1", "e0"]  # newest first, each once


def test_cancel_is_accepted_and_the_workers_deliver_it(server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "C"}, "id": "c"})
    server.wait_status("c", "suspended")
    answer = server.client.post("/invocations/c/cancel")
    assert answer.status_code == 202
    assert server.client.get("/invocations/c/result", params={"wait": 20}).json()["status"] == "cancelled"


def test_entries_after_a_seq_and_the_openapi_document(server):
    server.client.post("/invocations", json={"handler": "echo", "input": "hi", "id": "h"})
    server.wait_status("h", "completed")
    entries = server.client.get("/invocations/h/entries", params={"after": 0}).json()["entries"]
    assert [(e["seq"], e["kind"], e["name"]) for e in entries] == [(1, "step", "echo"), (2, "completed", None)]
    assert entries[0]["value"] == "hi"
    spec = server.client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    for path in ("/invocations", "/invocations/{id}", "/invocations/{id}/result", "/invocations/{id}/events",
                 "/invocations/{id}/promises/{name}", "/invocations/{id}/cancel", "/invocations/{id}/entries"):
        assert path in spec["paths"]


def test_sigterm_stops_cleanly_and_the_invocation_in_flight_resumes_later(tmp_path):
    db = str(tmp_path / "db")
    entered, marker = tmp_path / "entered", tmp_path / "go"
    first = Server(db, tmp_path / "first.log")
    body = {"handler": "gate", "input": {"entered": str(entered), "marker": str(marker)}, "id": "g"}
    assert first.client.post("/invocations", json=body).status_code == 201
    wait_for(entered.exists, what="the handler to be in flight")
    assert first.stop(signal.SIGTERM) == 0
    assert "stopped" in first.output()

    with LmdbStore(db, readonly=True) as store:
        record = store.get("g")
        assert record.status == Status.PENDING  # lease given back, not left running
        assert store.entry_count("g") == 2  # started + the first step, kept

    marker.write_text("go")
    second = Server(db, tmp_path / "second.log")
    try:
        result = second.client.get("/invocations/g/result", params={"wait": 20}).json()
        assert result == {"id": "g", "status": "completed", "result": "after", "error": None}
        kinds = [(e["kind"], e["name"]) for e in second.client.get("/invocations/g/entries").json()["entries"]]
        assert kinds == [("started", None), ("step", "before"), ("step", "after"), ("completed", None)]
    finally:
        second.stop()


def test_bytes_and_datetimes_in_a_journal_answer_as_base64_and_iso_8601(server):
    server.client.post("/invocations", json={"handler": "binary", "input": 3, "id": "b"})
    result = server.client.get("/invocations/b/result", params={"wait": 20}).json()
    assert result["status"] == "completed"
    assert result["result"]["blob"] == "AAEC"  # base64 of 00 01 02
    assert result["result"]["when"].endswith("Z") or "+00:00" in result["result"]["when"]
    step = [e for e in server.client.get("/invocations/b/entries").json()["entries"] if e["kind"] == "step"]
    assert step[0]["value"] == "AAEC"


def test_an_invocation_answers_the_shape_of_show_json_without_entries(server, tmp_path):
    import subprocess
    import sys

    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "S"}, "id": "same"})
    server.wait_status("same", "suspended")
    doc = server.status("same")
    shown = json.loads(subprocess.run([sys.executable, "-m", "cli", "show", "same", "--json", "--db",
                                       str(tmp_path / "db")], capture_output=True, text=True, check=True).stdout)
    del shown["entries"]
    extra = {"waiting_on", "divergence", "fork_command", "steps_here"}
    assert {k: v for k, v in doc.items() if k not in extra} == shown
