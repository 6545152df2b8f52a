"""`journal replay --handler` takes the `[NAME=]TARGET` form of `resume` and `worker`, so one
`journal replay --all` checks a store whose invocations record several handler names."""

import json

import pytest

from .conftest import target

HANDLERS = ["--handler", f"greeter={target('greet')}", "--handler", f"ordering={target('order')}"]


@pytest.fixture(params=["lmdb", "postgres"])
def db(request, tmp_path):
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else str(tmp_path / "db")


@pytest.fixture
def named_store(sh):
    """Two invocations of each of two handler names, run by a worker given both."""
    for i, (name, value) in enumerate([("greeter", "ann"), ("ordering", {"item": "tea", "qty": 2}),
                                       ("greeter", "bob"), ("ordering", {"item": "cake", "qty": 1})]):
        assert sh("start", name, "--input", json.dumps(value), "--id", f"{name}-{i}").returncode == 0
    done = sh("worker", "--until-idle", *HANDLERS, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {r["status"] for r in json.loads(sh("ls", "--json").stdout)} == {"completed"}


def test_replay_all_checks_every_handler_name_in_one_run(sh, named_store):
    done = sh("replay", "--all", *HANDLERS, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)
    assert [r["status"] for r in results] == ["ok"] * 4
    assert all(r["finished"] for r in results)


def test_replay_of_a_name_no_handler_names_says_which_to_add(sh, named_store):
    done = sh("replay", "--all", "--handler", f"greeter={target('greet')}", "--json")
    assert done.returncode == 2
    results = {r["id"]: r for r in json.loads(done.stdout)}
    assert results["greeter-0"]["status"] == "ok" and results["greeter-2"]["status"] == "ok"
    assert results["ordering-1"]["status"] == "error"
    assert "add --handler ordering=TARGET" in results["ordering-1"]["message"]


def test_replay_with_a_changed_handler_under_its_name_reports_the_divergence(sh, named_store, tmp_path):
    changed = tmp_path / "changed.py"
    changed.write_text("async def greet(ctx, name: str) -> str:\n"
                       "    return await ctx.run('hi', lambda: 'hi ' + name)\n")
    done = sh("replay", "--all", "--handler", f"greeter={changed}:greet", "--handler",
              f"ordering={target('order')}", "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    statuses = {r["id"]: r["status"] for r in json.loads(done.stdout)}
    assert statuses == {"greeter-0": "diverged", "ordering-1": "ok", "greeter-2": "diverged", "ordering-3": "ok"}
