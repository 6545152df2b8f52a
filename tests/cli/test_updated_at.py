"""`updated_at` moves with every append: a running invocation whose steps commit looks busy,
not stale, in `GET /invocations/{id}`, `GET /invocations` and `journal ls`, on both stores."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest

from ..conftest import store_target
from .serving import Server, wait_for


def _us(iso: str) -> int:
    return int(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000)


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_updated_at_is_the_commit_of_a_running_invocations_latest_step(kind, request, tmp_path):
    db = store_target(kind, request, tmp_path)
    server = Server(db, tmp_path / "serve.log")
    entered, marker = tmp_path / "entered", tmp_path / "go"
    try:
        server.client.post("/invocations", json={"handler": "gate", "id": "busy",
                                                 "input": {"entered": str(entered), "marker": str(marker)}})
        wait_for(entered.exists, what="the handler to be past its first step")
        doc = server.status("busy")
        assert doc["status"] == "running"
        step = [e for e in server.client.get("/invocations/busy/entries").json()["entries"] if e["kind"] == "step"]
        assert [e["name"] for e in step] == ["before"]
        committed = _us(step[0]["at"])
        assert _us(doc["updated_at"]) >= committed, (doc["updated_at"], step[0]["at"])
        (listed,) = server.client.get("/invocations", params={"q": "busy"}).json()["invocations"]
        assert listed["updated_at"] == doc["updated_at"]
        done = subprocess.run([sys.executable, "-m", "cli", "ls", "--json", "--db", db], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        (row,) = [d for d in json.loads(done.stdout) if d["id"] == "busy"]
        assert row["updated_at"] == doc["updated_at"]
        marker.write_text("go")
        finished = server.wait_status("busy", "completed")
        assert _us(finished["updated_at"]) >= _us(doc["updated_at"])
    finally:
        marker.write_text("go")
        server.stop()
