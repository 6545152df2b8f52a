"""`journal budget set|ls|rm` and `GET|PUT|DELETE /budgets`: budgets kept in the store; a spent
one pauses the run on `budget:SCOPE`, and raising it wakes the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .serving import Server

AGENTS = Path(__file__).parent / "limit_agents.py"


def journal(*args: str, db: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=120, env=env)


def test_budget_set_ls_and_rm_round_trip_through_the_store(tmp_path):
    db = str(tmp_path / "db")
    done = journal("budget", "set", "handler:agent", "--tokens", "10000", "--per", "run", db=db)
    assert done.returncode == 0 and "budget handler:agent: 10000 tokens per run" in done.stderr, done.stderr
    assert journal("budget", "set", "key:acme", "--cost", "50", "--per", "month", db=db).returncode == 0
    listed = json.loads(journal("budget", "ls", "--json", db=db).stdout)
    assert listed[0] == {"scope": "handler:agent", "tokens": 10000, "cost": None, "per": "run", "used_tokens": 0,
                         "used_cost": 0.0, "window_start": None}
    assert listed[1]["scope"] == "key:acme" and listed[1]["window_start"].endswith("-01T00:00:00+00:00")
    table = journal("budget", "ls", db=db).stdout
    assert "handler:agent" in table and "month" in table
    assert journal("budget", "rm", "key:acme", db=db).returncode == 0
    assert [v["scope"] for v in json.loads(journal("budget", "ls", "--json", db=db).stdout)] == ["handler:agent"]


@pytest.mark.parametrize(("args", "says"), [
    (("set", "handler:x"), "needs an allowance"),
    (("set", "handler:x", "--tokens", "5", "--per", "week"), "'week' is not one of"),
    (("set", "tag:x", "--tokens", "5"), "write tag:K=V"),
    (("set", "tenant:*", "--tokens", "5"), "not a PREFIX:* rule"),
])
def test_a_bad_budget_is_refused_with_exit_2_and_nothing_is_written(tmp_path, args, says):
    db = str(tmp_path / "db")
    done = journal("budget", *args, db=db)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(journal("budget", "ls", "--json", db=db).stdout or "[]") == []


def test_removing_an_unknown_budget_says_which_there_are(tmp_path):
    db = str(tmp_path / "db")
    journal("budget", "set", "key:acme", "--tokens", "1", db=db)
    done = journal("budget", "rm", "key:nope", db=db)
    assert done.returncode == 2 and "no budget for 'key:nope' (budgets: key:acme)" in done.stderr


def test_a_spent_run_waits_on_its_budget_and_raising_the_budget_lets_it_finish(tmp_path):
    db = str(tmp_path / "db")
    env = {"BUDGET_LOG": str(tmp_path / "reports"), "PATH": "/usr/bin:/bin"}
    assert journal("budget", "set", "handler:budgeted", "--tokens", "100", "--per", "run", db=db).returncode == 0
    ran = journal("run", f"{AGENTS}:budgeted", "--input", "5", "--id", "r", "--json", db=db, env=env)
    shown = json.loads(journal("show", "r", "--json", db=db).stdout)
    assert shown["status"] == "suspended" and shown["waiting"] == "budget:handler:budgeted", ran.stderr
    raised = journal("budget", "set", "handler:budgeted", "--tokens", "1000", "--per", "run", db=db)
    assert "woke 1 waiting" in raised.stderr
    assert json.loads(journal("show", "r", "--json", db=db).stdout)["status"] == "pending"
    resumed = journal("resume", "r", db=db, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(journal("show", "r", "--json", db=db).stdout)["result"] == 200
    assert json.loads(journal("budget", "ls", "--json", db=db).stdout)[0]["used_tokens"] == 200


def test_budgets_over_http_are_the_same_as_the_commands(tmp_path):
    db = str(tmp_path / "db")
    server = Server(db, tmp_path / "serve.log")
    try:
        put = server.client.put("/budgets/handler:agent", json={"tokens": 5000, "cost": 2.5, "per": "day"})
        assert put.status_code == 200, put.text
        assert put.json()["per"] == "day" and put.json()["cost"] == 2.5
        listed = server.client.get("/budgets").json()["budgets"]
        assert listed == json.loads(journal("budget", "ls", "--json", db=db).stdout)
        bad = server.client.put("/budgets/handler:agent", json={"per": "day"})
        assert bad.status_code == 422 and "needs an allowance" in bad.json()["error"]["message"]
        assert server.client.put("/budgets/handler:agent", json={"tokens": 1, "per": "week"}).status_code == 422
        assert server.client.delete("/budgets/handler:agent").status_code == 200
        missing = server.client.delete("/budgets/handler:agent")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "BudgetNotFound"
        assert server.client.get("/budgets").json() == {"budgets": []}
        assert "/budgets/{scope}" in server.client.get("/openapi.json").json()["paths"]
    finally:
        server.stop()
