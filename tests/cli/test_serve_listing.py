"""`GET /invocations` and `journal ls` search and page in the store: filters by status,
handler, key, tag, text and time, and a cursor that gives each invocation exactly once; and
the queue at a glance (`GET /invocations/summary`, `journal ls --summary`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .serving import Server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("listing")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    for n in range(5):
        s.client.post("/invocations", json={"handler": "echo", "input": f"text {n}", "id": f"item-{n}",
                                            "key": "thread-a" if n < 2 else None,
                                            "tags": {"customer": "acme" if n % 2 == 0 else "globex"}})
        s.wait_status(f"item-{n}", "completed")
    s.client.post("/invocations", json={"handler": "approve", "input": {"order": "refund-77"}, "id": "refund-77",
                                        "tags": {"customer": "acme", "kind": "refund"}})
    s.wait_status("refund-77", "suspended")
    yield s, str(tmp / "db")
    s.stop()


def test_five_invocations_at_limit_2_come_back_exactly_once_each(served):
    server, _ = served
    seen, cursor = [], None
    while True:
        params = {"limit": 2, "handler": "echo", **({"cursor": cursor} if cursor else {})}
        page = server.client.get("/invocations", params=params).json()
        assert len(page["invocations"]) <= 2
        seen += [doc["id"] for doc in page["invocations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["item-4", "item-3", "item-2", "item-1", "item-0"]


def test_the_list_filters_by_handler_key_text_status_and_time(served):
    server, _ = served
    ids = lambda **params: [d["id"] for d in server.client.get("/invocations", params=params).json()["invocations"]]  # noqa: E731
    assert ids(handler="approve") == ["refund-77"]
    assert ids(key="thread-a") == ["item-1", "item-0"]
    assert ids(q="REFUND") == ["refund-77"]
    assert ids(q="item-3") == ["item-3"]
    assert ids(status="completed", q="item") == ["item-4", "item-3", "item-2", "item-1", "item-0"]
    created = {d["id"]: d["created_at"] for d in server.client.get("/invocations").json()["invocations"]}
    assert ids(since=created["item-2"], until=created["item-4"]) == ["item-3", "item-2"]
    bad = server.client.get("/invocations", params={"since": "yesterday"})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "InvalidParameter"


def test_ls_searches_the_same_way(served):
    _, db = served

    def ls(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "cli", "ls", "--json", *args, "--db", db], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [d["id"] for d in json.loads(done.stdout)]

    assert ls("--search", "refund") == ["refund-77"]
    assert ls("--handler", "echo", "--limit", "2") == ["item-3", "item-4"]  # the newest two, oldest first
    assert ls("--key", "thread-a") == ["item-0", "item-1"]
    assert ls("--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02") == []
    assert ls("--tag", "customer=acme") == ["item-0", "item-2", "item-4", "refund-77"]
    assert ls("--tag", "customer=acme", "--tag", "kind=refund") == ["refund-77"]
    bad = subprocess.run([sys.executable, "-m", "cli", "ls", "--tag", "customer", "--db", db], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "write it KEY=VALUE" in bad.stderr


def test_the_list_filters_by_tag_page_by_page(served):
    server, _ = served
    seen, cursor = [], None
    while True:
        params = {"limit": 2, "tag": "customer:acme", **({"cursor": cursor} if cursor else {})}
        page = server.client.get("/invocations", params=params).json()
        assert all(doc["tags"]["customer"] == "acme" for doc in page["invocations"])
        seen += [doc["id"] for doc in page["invocations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["refund-77", "item-4", "item-2", "item-0"]
    both = server.client.get("/invocations", params=[("tag", "customer:acme"), ("tag", "kind:refund")]).json()
    assert [d["id"] for d in both["invocations"]] == ["refund-77"]
    assert server.client.get("/invocations/refund-77").json()["tags"] == {"customer": "acme", "kind": "refund"}
    bad = server.client.get("/invocations", params={"tag": "customer=acme"})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "InvalidTag"
    refused = server.client.post("/invocations", json={"handler": "echo", "input": "x", "tags": {"bad key": "v"}})
    assert refused.status_code == 422 and "tag key 'bad key' is not allowed" in refused.json()["error"]["message"]


def test_the_summary_counts_each_handler_by_status(served):
    server, db = served
    doc = server.client.get("/invocations/summary").json()
    assert doc == {"handlers": [
        {"handler": "approve", "counts": {"suspended": 1}, "oldest_runnable_seconds": None},
        {"handler": "echo", "counts": {"completed": 5}, "oldest_runnable_seconds": None},
    ]}
    done = subprocess.run([sys.executable, "-m", "cli", "ls", "--summary", "--json", "--db", db],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout) == doc
    table = subprocess.run([sys.executable, "-m", "cli", "ls", "--summary", "--db", db],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "150"})
    assert table.stdout.split("\n")[0].split() == ["HANDLER", "PENDING", "RUNNING", "SUSPENDED", "DIVERGED",
                                                   "COMPLETED", "FAILED", "CANCELLED", "OLDEST", "RUNNABLE"]
    assert table.stdout.split("\n")[2].split() == ["echo", "0", "0", "0", "0", "5", "0", "0", "-"]


def test_a_handler_filter_takes_the_shown_form_and_a_relative_target(served):
    server, db = served
    agents = Path(__file__).parent / "cli_agents.py"
    done = subprocess.run([sys.executable, "-m", "cli", "run", f"{agents}:greet", "--input", '"ada"', "--id", "greeted",
                           "--db", db], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ids = lambda **params: [d["id"] for d in server.client.get("/invocations", params=params).json()["invocations"]]  # noqa: E731
    assert ids(handler="cli_agents.py:greet") == ["greeted"]  # what the list shows
    assert ids(handler="tests/cli/cli_agents.py:greet") == ["greeted"]
    assert ids(handler=f"{agents}:greet") == ["greeted"]
    assert ids(handler="cli_agents.py:other") == []

    def ls(*args: str, cwd: Path) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "cli", "ls", "--json", *args, "--db", db], capture_output=True,
                              text=True, timeout=60, cwd=cwd)
        assert done.returncode == 0, done.stderr
        return [d["id"] for d in json.loads(done.stdout)]

    assert ls("--handler", "cli_agents.py:greet", cwd=agents.parent) == ["greeted"]
    assert ls("--handler", "../cli/cli_agents.py:greet", cwd=agents.parent.parent / "journal") == ["greeted"]
    assert ls("--handler", "tests/cli/cli_agents.py:greet", cwd=agents.parents[2]) == ["greeted"]
