"""`journal limit set|ls|rm` and `GET|PUT|DELETE /limits`: rules kept in the store, read by every
process sharing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .serving import Server, wait_for


def journal(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True, timeout=120)


def test_limit_set_ls_and_rm_round_trip_through_the_store(tmp_path):
    db = str(tmp_path / "db")
    done = journal("limit", "set", "openai", "--concurrency", "3", "--rate", "60/m", "--tokens", "40000/m", db=db)
    assert done.returncode == 0, done.stderr
    assert "concurrency 3, rate 60/m, tokens 40000/m" in done.stderr
    assert journal("limit", "set", "tenant:*", "--concurrency", "2", db=db).returncode == 0
    listed = json.loads(journal("limit", "ls", "--json", db=db).stdout)
    assert listed == [
        {"name": "openai", "concurrency": 3, "rate": {"limit": 60, "period": 60.0},
         "tokens": {"limit": 40000, "period": 60.0}, "in_use": 0, "waiting": 0, "tokens_used": 0,
         "paused_until": None},
        {"name": "tenant:*", "concurrency": 2, "rate": None, "tokens": None, "in_use": 0, "waiting": 0,
         "tokens_used": 0, "paused_until": None},
    ]
    table = journal("limit", "ls", db=db).stdout
    assert "openai" in table and "60/m" in table and "40000/m" in table
    assert journal("limit", "rm", "openai", db=db).returncode == 0
    assert [v["name"] for v in json.loads(journal("limit", "ls", "--json", db=db).stdout)] == ["tenant:*"]


@pytest.mark.parametrize(("args", "says"), [
    (("set", "x", "--rate", "5/q"), "is not N/PERIOD"),
    (("set", "x", "--rate", "0/m"), "at least 1"),
    (("set", "x"), "at least one of --concurrency"),
    (("set", "x", "--concurrency", "0"), "at least 1"),
    (("set", "a*b", "--concurrency", "1"), "'*' is allowed only"),
])
def test_a_bad_limit_is_refused_with_exit_2_and_nothing_is_written(tmp_path, args, says):
    db = str(tmp_path / "db")
    done = journal("limit", *args, db=db)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(journal("limit", "ls", "--json", db=db).stdout or "[]") == []


def test_removing_an_unknown_limit_says_which_there_are(tmp_path):
    db = str(tmp_path / "db")
    journal("limit", "set", "openai", "--concurrency", "1", db=db)
    done = journal("limit", "rm", "anthropic", db=db)
    assert done.returncode == 2 and "no limit named 'anthropic' (limits: openai)" in done.stderr


def test_limits_over_http_are_the_same_as_the_commands(tmp_path):
    db = str(tmp_path / "db")
    server = Server(db, tmp_path / "serve.log")
    try:
        put = server.client.put("/limits/openai", json={"concurrency": 4, "rate": "500/m",
                                                        "tokens": {"limit": 200000, "period": 60}})
        assert put.status_code == 200, put.text
        assert put.json()["rate"] == {"limit": 500, "period": 60.0}
        listed = server.client.get("/limits").json()["limits"]
        assert listed == json.loads(journal("limit", "ls", "--json", db=db).stdout)
        assert [v["name"] for v in listed] == ["openai"]
        bad = server.client.put("/limits/openai", json={"rate": "lots"})
        assert bad.status_code == 422 and "N/PERIOD" in bad.json()["error"]["message"]
        unknown = server.client.put("/limits/openai", json={"burst": 3})
        assert unknown.status_code == 422
        assert server.client.delete("/limits/openai").status_code == 200
        missing = server.client.delete("/limits/openai")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "LimitNotFound"
        assert server.client.get("/limits").json() == {"limits": []}
    finally:
        server.stop()


def test_an_invocation_waiting_for_a_unit_shows_it_and_goes_on_when_another_process_frees_it(tmp_path):
    from journal import HOST, open_store
    from journal.limits import Granted, Request

    db = str(tmp_path / "db")
    server = Server(db, tmp_path / "serve.log")
    store = open_store(db)
    try:
        assert server.client.put("/limits/db", json={"concurrency": 1}).status_code == 200
        # This test's process holds the only unit.
        assert store.limits().acquire(Request("mine", ("db",), f"{HOST}:{os.getpid()}:t", HOST, os.getpid())) == Granted()
        server.client.post("/invocations", json={"handler": "limited", "input": "db", "id": "w"})
        doc = wait_for(lambda: (d := server.client.get("/invocations/w").json())["waiting_on"] and d,
                       what="the invocation to wait on the limit")
        assert doc["status"] == "running" and doc["waiting_on"] == [{"kind": "limit", "name": "db"}]
        listed = server.client.get("/limits").json()["limits"]
        assert (listed[0]["in_use"], listed[0]["waiting"]) == (1, 1)
        store.limits().release("mine", ("db",))
        assert server.wait_status("w", "completed")["result"] == "db"
        assert server.client.get("/invocations/w").json()["waiting_on"] == []
    finally:
        store.close()
        server.stop()


def test_start_and_run_take_limit_and_priority(tmp_path):
    agents = Path(__file__).parent / "limit_agents.py"
    db = str(tmp_path / "db")
    env = {**os.environ, "LIMIT_GAUGE": str(tmp_path / "gauge")}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                              timeout=120, env=env)

    assert sh("limit", "set", "jobs", "--concurrency", "1").returncode == 0
    for n in range(3):
        done = sh("start", f"{agents}:three_steps", "--input", str(n), "--id", f"j{n}", "--limit", "jobs",
                  "--priority", str(n))
        assert done.returncode == 0, done.stderr
    assert sh("worker", "--until-idle").returncode == 0
    ran = sh("run", f"{agents}:three_steps", "--input", "9", "--limit", "jobs", "--json")
    assert ran.returncode == 0 and json.loads(ran.stdout)["result"] == 9, ran.stderr
    assert [i["status"] for i in json.loads(sh("ls", "--json").stdout)] == ["completed"] * 4
    # The worker ran them one at a time, highest priority first.
    order = [line.split()[1] for line in (tmp_path / "gauge.runs").read_text().splitlines()]
    assert order[:9] == ["20", "21", "22", "10", "11", "12", "0", "1", "2"]
    assert (tmp_path / "gauge").read_text().split("\n")[0] == "1"
    bad = sh("start", f"{agents}:three_steps", "--input", "1", "--limit", "")
    assert bad.returncode == 2 and "limit" in bad.stderr
