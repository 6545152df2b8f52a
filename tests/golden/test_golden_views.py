"""What `--json` and the HTTP API answer for a store that holds one invocation in each
state, kept byte for byte in `views/`: a change to a view shows here as a diff to review.

`store-views/` was written by the handlers of `views_handlers.py` with the `journal`
command: `ok` completed (a step, a clock read, an emitted event), `broke` failed,
`waits` suspended on a promise, `naps` on a timer, `t1` and `t2` two turns of one key,
`parent` with two children, `gone` cancelled, `changes` diverged on resume, and `hangs`
left running by a SIGKILL inside a step.

A view changed on purpose: run `JOURNAL_WRITE_GOLDEN=1 pytest tests/golden/test_golden_views.py`
and commit the new files with the change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import writable_copy

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "views")
IDS = ("ok", "broke", "waits", "naps", "t1", "t2", "parent", "parent.1", "gone", "changes", "hangs")
WRITE = os.environ.get("JOURNAL_WRITE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return writable_copy("store-views", tmp_path_factory.mktemp("views"))


def _same_as_golden(name: str, text: str) -> None:
    path = os.path.join(GOLDEN, name)
    if WRITE:
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    with open(path, encoding="utf-8") as f:
        expected = f.read()
    assert text == expected, f"{name} differs from its golden copy (see this module's docstring)"


def _journal(store_path: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cli", *args, "--db", store_path], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ls_json_is_as_it_was(store_path):
    _same_as_golden("ls.json", _journal(store_path, "ls", "--json"))


@pytest.mark.parametrize("invocation_id", IDS)
def test_show_json_is_as_it_was(store_path, invocation_id):
    _same_as_golden(f"show-{invocation_id}.json", _journal(store_path, "show", invocation_id, "--json"))


@pytest.mark.parametrize("invocation_id", ["ok", "broke", "parent"])
def test_export_is_as_it_was(store_path, invocation_id):
    _same_as_golden(f"export-{invocation_id}.jsonl", _journal(store_path, "export", invocation_id, "--format", "jsonl"))


def test_state_json_is_as_it_was(store_path):
    _same_as_golden("state-thread-1.json", _journal(store_path, "state", "thread-1", "--json"))


PATHS = ["/invocations", "/invocations?status=suspended", "/invocations?limit=3", "/keys/thread-1/state",
         *(f"/invocations/{i}" for i in IDS), *(f"/invocations/{i}/entries" for i in ("ok", "broke", "changes")),
         *(f"/invocations/{i}/result" for i in ("ok", "broke", "waits"))]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_http_answers_are_as_they_were(store_path):
    import httpx

    from journal import LmdbStore
    from runtime import Engine

    answers = {}
    async with Engine.open(store=LmdbStore(store_path)) as engine:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(engine)), base_url="http://127.0.0.1") as http:
            for path in PATHS:
                response = await http.get(path)
                answers[path] = {"status": response.status_code, "body": response.json()}
    _same_as_golden("http.json", json.dumps(answers, indent=2, sort_keys=True) + "\n")


def _app(engine):
    from runtime.http import create_app

    return create_app(engine)
