"""Every command on a PostgreSQL store, and workers on it: `start`, `worker --handler`, a
worker SIGKILLed in the middle of a step and another one finishing its invocations."""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from ..waiting import wait_until
from .conftest import AGENTS, loads, target


@pytest.fixture
def db(postgres_url):
    return postgres_url


def test_run_inspect_and_maintain_on_postgres(journal, log):
    ran = journal("run", target("pipeline"), "--input", json.dumps({"log": log.path}), "--id", "p1", "--json")
    assert ran.exit_code == 0, ran.stderr
    assert loads(ran.stdout)["result"] == ["a", "b", "c(b)", "d"]
    [row] = loads(journal("ls", "--json").stdout)
    assert row["id"] == "p1" and row["status"] == "completed" and row["entries"] == 6
    shown = loads(journal("show", "p1", "--json").stdout)
    assert [e["kind"] for e in shown["entries"]] == ["started", "step", "step", "step", "step", "completed"]
    assert "hello" not in journal("tail", "p1").stdout and "c(b)" in journal("tail", "p1").stdout
    lines = journal("export", "p1", "--format", "jsonl").stdout.splitlines()
    assert len(lines) == 6
    # `journal run` started it from here: replay and resume know its code without --handler
    # (what the database records never chooses it).
    assert journal("replay", "p1").exit_code == 0
    replayed = journal("replay", "p1", "--json", "--handler", target("pipeline"))
    assert replayed.exit_code == 0, replayed.stdout + replayed.stderr
    forked = journal("fork", "p1", "--at", "3", "--new-id", "p2")
    assert forked.exit_code == 0, forked.stderr
    refused = journal("resume", "p2")
    assert refused.exit_code == 2 and "--handler" in refused.stderr
    resumed = journal("resume", "p2", "--json", "--handler", target("pipeline"))
    assert resumed.exit_code == 0 and loads(resumed.stdout)["result"] == ["a", "b", "c(b)", "d"]
    assert log.lines() == ["a", "b", "c(b)", "d", "c(b)", "d"]  # the fork re-ran only seq 3 on
    checked = journal("check", "--json")
    assert checked.exit_code == 0 and loads(checked.stdout)["ok"], checked.stdout
    compacted = journal("compact")
    assert compacted.exit_code == 0 and "autovacuum" in compacted.stderr
    trimmed = journal("trim", "--older-than", "0s", "--json")
    assert trimmed.exit_code == 0, trimmed.stderr
    assert journal("ls", "--json").stdout.strip() == "[]"


def test_promises_state_and_cancel_on_postgres(journal, log):
    waiting = journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "pg"}),
                      "--id", "a1")
    assert waiting.exit_code == 3 and "journal resolve a1 approval" in waiting.stderr
    assert journal("resolve", "a1", "approval", '{"approved": true, "by": "ann"}').exit_code == 0
    done = journal("resume", "a1", "--json", "--handler", target("approval"))
    assert done.exit_code == 0 and loads(done.stdout)["result"]["by"] == "ann"
    assert journal("run", target("turn"), "--input", '"hi"', "--key", "t1").exit_code == 0
    assert "history" in loads(journal("state", "t1", "--json").stdout)["state"]
    held = journal("run", target("cancellable"), "--input", json.dumps({"log": log.path}), "--id", "c1")
    assert held.exit_code == 3
    # `journal run` started it from here: cancel runs it here with that code, as on LMDB
    # (tests/cli/test_cancel_postgres.py: a worker delivers it otherwise, and cancel waits).
    cancelled = journal("cancel", "c1", "--json")
    assert cancelled.exit_code == 0 and loads(cancelled.stdout)["status"] == "cancelled"
    assert loads(journal("show", "c1", "--json").stdout)["status"] == "cancelled"
    assert log.lines()[-2:] == ["reserve", "release"]


def test_a_worker_on_postgres_needs_its_handlers_named(journal):
    refused = journal("worker", "--until-idle")
    assert refused.exit_code == 2 and "--handler NAME=TARGET" in refused.stderr


def test_start_by_name_and_a_worker_that_runs_only_its_handlers(journal, sh):
    assert journal("start", "hello", "--input", '"ann"', "--id", "h1").stdout.strip() == "h1"
    assert journal("start", "other", "--input", '"bob"', "--id", "o1").exit_code == 0
    ran = sh("worker", "--handler", f"hello={AGENTS}:greet", "--until-idle", "-q")
    assert ran.returncode == 0, ran.stderr
    rows = {r["id"]: r for r in loads(journal("ls", "--json").stdout)}
    assert rows["h1"]["status"] == "completed" and rows["h1"]["handler"] == "hello"
    assert rows["o1"]["status"] == "pending"  # left for a worker that was given `other`
    assert loads(journal("show", "h1", "--json").stdout)["result"] == "hello ann"


def test_resume_takes_the_code_of_a_started_name_as_name_equals_target(journal, sh):
    assert journal("start", "hello", "--input", '"ann"', "--id", "h2").exit_code == 0
    resumed = sh("resume", "h2", "--json", "--handler", f"hello={AGENTS}:greet")
    assert resumed.returncode == 0, resumed.stderr
    assert loads(resumed.stdout)["result"] == "hello ann"


def test_a_name_given_with_a_path_is_refused_with_the_form(journal):
    refused = journal("worker", "--handler", "a/b=x:y", "--until-idle")
    assert refused.exit_code == 2 and "NAME=TARGET" in refused.stderr


def test_a_sigkilled_workers_invocations_are_finished_by_the_other(journal, sh, tmp_path, db):
    from journal import PostgresStore

    logs = [str(tmp_path / f"log{i}") for i in range(4)]
    for i in range(4):
        inp = json.dumps({"log": logs[i], "marker": str(tmp_path / f"marker{i}")})
        assert journal("start", "slow", "--input", inp, "--id", f"s{i}").exit_code == 0
    workers = [subprocess.Popen(sh.argv("worker", "--handler", f"slow={AGENTS}:slow", "--concurrency", "8", "-q"),
                                env=sh.env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(2)]
    try:
        # Each invocation blocks in its step `wait` on its first run, so all four are held.
        wait_until(lambda: all(os.path.exists(tmp_path / f"marker{i}") for i in range(4)), "four steps in flight")
        with PostgresStore(db) as store:
            held = {f"s{i}": store.lease(f"s{i}").pid for i in range(4)}
        victim = workers[0] if list(held.values()).count(workers[0].pid) else workers[1]
        orphans = {i for i, pid in held.items() if pid == victim.pid}
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        # The survivor takes over only the dead worker's invocations, which find their
        # marker and finish; its own stay blocked in their step: none runs in two places.
        wait_until(lambda: {r["id"] for r in loads(journal("ls", "--json").stdout)
                           if r["status"] == "completed"} == orphans, "the dead worker's invocations to finish")
        for i in range(4):
            lines = Path(logs[i]).read_text().splitlines()
            assert lines == (["first", "wait", "wait (again)"] if f"s{i}" in orphans else ["first", "wait"]), lines
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
                w.wait()


def test_only_what_journal_run_started_from_here_resumes_without_handler(journal, log, monkeypatch, tmp_path):
    waiting = journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "pg"}),
                      "--id", "h1")
    assert waiting.exit_code == 3
    assert journal("resolve", "h1", "approval", '{"approved": true, "by": "ann"}').exit_code == 0
    # Another host (or user) did not start it: the database's handler name is not imported there.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))
    refused = journal("resume", "h1")
    assert refused.exit_code == 2 and "did not start" in refused.stderr and "--handler" in refused.stderr
    replayed = journal("replay", "h1", "--json")
    assert replayed.exit_code == 2 and "--handler" in loads(replayed.stdout)[0]["message"]


_WAITING = '''
async def wait(ctx, input):
    return await ctx.promise("go")
'''


def test_resume_does_not_import_a_noted_handler_file_that_another_user_can_now_write(sh, tmp_path):
    # `journal run` noted the file's path; since then the file became writable by others.
    # What it holds now is not this user's choice: as for a handler read from an LMDB
    # journal, resume and replay refuse it (exit 2) without importing it.
    code = tmp_path / "handlers" / "waiting.py"
    code.parent.mkdir()
    code.write_text(_WAITING)
    ran = sh("run", f"{code}:wait", "--id", "n1")
    assert ran.returncode == 3, ran.stderr
    marker = tmp_path / "imported"
    code.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n" + _WAITING)
    code.chmod(0o666)
    resumed = sh("resume", "n1")
    assert resumed.returncode == 2 and "written by other users" in resumed.stderr and not marker.exists(), resumed.stderr
    replayed = sh("replay", "n1", "--json")
    assert replayed.returncode == 2 and not marker.exists(), replayed.stdout + replayed.stderr
    assert "written by other users" in loads(replayed.stdout)[0]["message"]
