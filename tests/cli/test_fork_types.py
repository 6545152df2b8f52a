"""A fork's replaced value is checked against the type the code reads it as (a promise's
`type=`, a step's return type), as Approve checks a promise's value: 422 and nothing created,
on both stores; in the console, the fork form shows why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import store_target
from .serving import Server
from .test_serve_console import Refusals, _watched
from .test_serve_ui import browser, expect  # noqa: F401


def _seq(server, invocation_id, kind):
    entries = server.client.get(f"/invocations/{invocation_id}/entries").json()["entries"]
    return next(e["seq"] for e in entries if e["kind"] == kind)


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_a_fork_value_that_does_not_fit_is_refused_and_nothing_is_created(kind, request, tmp_path):
    server = Server(store_target(kind, request, tmp_path), tmp_path / "serve.log")
    try:
        server.client.post("/invocations", json={"handler": "typed", "input": "F-1", "id": "typed-f"})
        server.wait_status("typed-f", "suspended")
        assert server.client.post("/invocations/typed-f/promises/decision",
                                  json={"value": {"approved": True, "by": "ada"}}).status_code == 200
        server.wait_status("typed-f", "completed")
        seq = _seq(server, "typed-f", "promise")
        before = len(server.client.get("/invocations").json()["invocations"])

        bad = server.client.post("/invocations/typed-f/fork", json={
            "at": seq + 1, "set": {str(seq): {"approved": "yes"}}, "new_id": "typed-f2"})
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["type"] == "ForkError"
        assert "does not fit" in bad.json()["error"]["message"]
        assert server.client.get("/invocations/typed-f2").status_code == 404
        assert len(server.client.get("/invocations").json()["invocations"]) == before

        server.client.post("/invocations", json={"handler": "planned", "input": "soup", "id": "plan-f"})
        server.wait_status("plan-f", "completed")
        step = _seq(server, "plan-f", "step")
        bad = server.client.post("/invocations/plan-f/fork", json={"at": step + 1, "set": {str(step): 42},
                                                                   "new_id": "plan-f2"})
        assert bad.status_code == 422, bad.text
        assert "return type" in bad.json()["error"]["message"]
        assert server.client.get("/invocations/plan-f2").status_code == 404

        good = server.client.post("/invocations/typed-f/fork", json={
            "at": seq + 1, "set": {str(seq): {"approved": False, "by": "bob"}}, "new_id": "typed-f3"})
        assert good.status_code == 201, good.text
        assert server.client.get("/invocations/typed-f3/result", params={"wait": 20}).json()["result"] == (
            "F-1: refused by bob")
    finally:
        server.stop()


def test_the_fork_form_shows_why_a_value_does_not_fit(browser, tmp_path):  # noqa: F811
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log")
    refusals = Refusals()
    refusals.expected.add(422)
    pages = _watched(browser, server, refusals)
    page = next(pages)
    try:
        server.client.post("/invocations", json={"handler": "planned", "input": "tea", "id": "fk-t"})
        server.client.get("/invocations/fk-t/result", params={"wait": 20})
        page.goto(server.url + "/i/fk-t")
        page.click("#fork")
        page.select_option("#fork-at", "2")
        page.select_option("#fork-edit", "1")
        page.fill("#fork-value", "42")
        page.click("#fork-submit")
        expect(page.locator("#fork-problem")).to_contain_text("return type")
        assert server.client.get("/invocations", params={"q": "fk-t-fork"}).json()["invocations"] == []
        next(pages, None)
    finally:
        page.close()
        server.stop()


def test_journal_fork_set_refuses_a_value_that_does_not_fit_and_creates_nothing(sh):
    agents = Path(__file__).parent / "serve_agents.py"
    done = sh("run", f"{agents}:planned", "--input", '"soup"', "--id", "plan-c")
    assert done.returncode == 0, done.stderr
    entries = json.loads(sh("show", "plan-c", "--json").stdout)["entries"]
    plan = next(e["seq"] for e in entries if e["kind"] == "step")

    bad = sh("fork", "plan-c", "--at", str(plan + 1), "--set", f"{plan}=42", "--new-id", "plan-c2")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "does not fit the step's return type" in bad.stderr
    assert {d["id"] for d in json.loads(sh("ls", "--json").stdout)} == {"plan-c"}

    good = sh("fork", "plan-c", "--at", str(plan + 1), "--set", f'{plan}="a better plan"', "--new-id", "plan-c3")
    assert good.returncode == 0, good.stderr
    resumed = sh("resume", "plan-c3")
    assert resumed.returncode == 0, resumed.stderr
    assert "wrote from: a better plan" in resumed.stdout
