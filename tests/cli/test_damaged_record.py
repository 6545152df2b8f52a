"""One damaged record (four garbage bytes where an invocation's record was) affects its own
invocation only: `journal ls` and `GET /invocations` list it as damaged beside the others,
`journal check` reports it with its id and checks the rest, and `journal serve` serves on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from journal import open_store

from .serving import Server

GARBAGE = b"\xde\xad\xbe\xef"


@pytest.fixture(params=["lmdb", "postgres"])
def damaged_store(request, tmp_path):
    """A store of three completed invocations and one suspended one, whose record of `bad`
    is then overwritten with four garbage bytes, as a failing disk or a stray write would."""
    db = request.getfixturevalue("postgres_url") if request.param == "postgres" else str(tmp_path / "db")
    server = Server(db, tmp_path / "make.log")
    try:
        for name in ("good-1", "bad", "good-2"):
            server.client.post("/invocations", json={"handler": "echo", "input": name, "id": name})
            server.wait_status(name, "completed")
        server.client.post("/invocations", json={"handler": "approve", "input": {"order": "D"}, "id": "waiting"})
        server.wait_status("waiting", "suspended")
    finally:
        server.stop()
    if request.param == "postgres":
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            done = conn.execute("update journal.invocations set v = %s where invocation_id = %s", (GARBAGE, b"bad"))
            assert done.rowcount == 1
    else:
        import lmdb

        env = lmdb.open(db, max_dbs=32)
        try:
            with env.begin(write=True) as txn:
                assert txn.get(b"bad", db=env.open_db(b"invocations", txn=txn)) is not None
                txn.put(b"bad", GARBAGE, db=env.open_db(b"invocations", txn=txn))
        finally:
            env.close()
    return db


def _journal(db: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=120)


def test_ls_lists_the_damaged_record_beside_the_others(damaged_store):
    done = _journal(damaged_store, "ls", "--json")
    assert done.returncode == 0, done.stderr
    listed = {doc["id"]: doc for doc in json.loads(done.stdout)}
    assert set(listed) == {"good-1", "bad", "good-2", "waiting"}
    assert listed["good-1"]["status"] == listed["good-2"]["status"] == "completed"
    assert listed["waiting"]["status"] == "suspended"
    assert listed["bad"]["status"] == "damaged" and "does not decode" in listed["bad"]["damaged"]
    table = _journal(damaged_store, "ls")
    assert table.returncode == 0 and "damaged" in table.stdout and "good-2" in table.stdout
    assert "journal check" in table.stderr
    assert "Traceback" not in done.stderr + table.stderr


def test_check_reports_the_damaged_record_by_id_and_goes_on(damaged_store):
    if not damaged_store.startswith("postgresql://"):
        with open_store(damaged_store) as store:  # a second problem, in another invocation
            store.delete(["good-2"], keep_record=True)
    done = _journal(damaged_store, "check", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["invocations"] == 4
    ids = [p["invocation_id"] for p in report["problems"]]
    assert "bad" in ids
    assert "does not decode" in next(p["message"] for p in report["problems"] if p["invocation_id"] == "bad")
    assert "Traceback" not in done.stderr


def test_serve_keeps_serving_and_the_api_lists_the_damaged_record(damaged_store, tmp_path):
    server = Server(damaged_store, tmp_path / "serve.log")
    try:
        listing = server.client.get("/invocations")
        assert listing.status_code == 200, listing.text
        docs = {doc["id"]: doc for doc in listing.json()["invocations"]}
        assert docs["bad"]["status"] == "damaged" and docs["good-1"]["status"] == "completed"
        one = server.client.get("/invocations/bad")
        assert one.status_code == 409 and one.json()["error"]["type"] == "CorruptEntry"
        assert server.client.get("/invocations", params={"status": "completed"}).status_code == 200
        # ... and the others still work: a new run, and the waiting one approved.
        server.client.post("/invocations", json={"handler": "echo", "input": "after", "id": "after"})
        server.wait_status("after", "completed")
        server.client.post("/invocations/waiting/promises/approval", json={"value": True})
        server.wait_status("waiting", "completed")
        assert server.proc.poll() is None
    finally:
        server.stop()
    assert "Traceback" not in server.output()


