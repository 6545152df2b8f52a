"""`journal run`, `resume`, `resolve`, `cancel` and `worker`, in-process."""

import json
import os

import pytest

from .conftest import AGENTS, target


def test_run_prints_the_result_and_exits_0(journal):
    result = journal("run", target("greet"), "--input", '"Ada"', "--id", "g1")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello Ada\n"


def test_run_tunes_the_collector_of_the_process_it_owns(journal):
    # Thousands of invocations in flight are many live objects: the youngest generation is
    # collected every 50,000 allocations instead of CPython's 700 (docs/performance.md).
    result = journal("run", target("collector"), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["result"] == [50_000, 100, 100]


def test_run_json_has_the_stable_shape(journal):
    result = journal("run", target("order"), "--input", '{"item": "tea", "qty": 2}', "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) >= {"id", "status", "result", "error"}
    assert out["status"] == "completed"
    assert out["result"] == {"item": "tea", "total": 6}
    assert out["error"] is None


def test_running_the_same_id_again_returns_the_recorded_result_without_rerunning(journal, db, log):
    args = ("run", target("pipeline"), "--input", json.dumps({"log": log.path}), "--id", "p1")
    first = journal(*args)
    second = journal(*args)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout
    assert log.lines() == ["a", "b", "c(b)", "d"]


def test_run_with_a_different_input_for_an_existing_id_is_a_conflict(journal):
    assert journal("run", target("greet"), "--input", '"Ada"', "--id", "same").exit_code == 0
    result = journal("run", target("greet"), "--input", '"Bob"', "--id", "same")
    assert result.exit_code == 2
    assert "already exists" in result.stderr and "different input" in result.stderr


def test_failed_handler_exits_1_with_the_error_on_stderr(journal):
    result = journal("run", target("refuses"), "--input", "{}", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "failed"
    assert json.loads(result.stdout)["error"]["message"].endswith("the model refused")
    assert "the model refused" in result.stderr


def test_suspension_exits_3_and_prints_the_exact_commands_that_continue_it(journal, db, log, tmp_path):
    result = journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a1")
    assert result.exit_code == 3
    assert "waiting for promise 'approval'" in result.stderr
    assert f"journal resolve a1 approval true --db {db}" in result.stderr
    assert f"journal resume a1 --db {db}" in result.stderr
    assert result.stdout == ""


def test_suspended_run_json_names_what_it_waits_for(journal, log):
    result = journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--json")
    out = json.loads(result.stdout)
    assert result.exit_code == 3
    assert (out["status"], out["waiting"], out["result"], out["error"]) == ("suspended", "approval", None, None)


def test_timer_suspension_says_when_to_resume(journal):
    result = journal("run", target("timer"), "--id", "t1")
    assert result.exit_code == 3
    assert "durable timer until" in result.stderr
    assert "journal resume t1" in result.stderr


def test_resolve_then_resume_completes_without_redoing_the_draft(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a2")
    resolved = journal("resolve", "a2", "approval", '{"approved": true, "by": "ada"}')
    assert resolved.exit_code == 0, resolved.stderr
    assert "resolved promise 'approval' of a2; it is pending" in resolved.stdout
    result = journal("resume", "a2", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["result"] == {"draft": "draft about x", "by": "ada", "published": "published"}
    assert log.lines() == ["draft about x", "published"]


def test_reject_fails_the_invocation_with_the_reason(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a3")
    rejected = journal("resolve", "a3", "approval", "--reject", "off topic", "--json")
    assert rejected.exit_code == 0
    assert json.loads(rejected.stdout) == {"id": "a3", "name": "approval", "rejected": True, "status": "pending",
                                           "waiting": None}
    result = journal("resume", "a3")
    assert result.exit_code == 1
    assert "off topic" in result.stderr
    assert log.lines() == ["draft about x"]


def test_resolving_twice_with_another_value_is_refused(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a4")
    assert journal("resolve", "a4", "approval", "true").exit_code == 0
    again = journal("resolve", "a4", "approval", "false")
    assert again.exit_code == 2
    assert "already resolved" in again.stderr


def test_resolve_reads_the_value_from_stdin(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "a5")
    assert journal("resolve", "a5", "approval", "-", input='{"approved": true, "by": "stdin"}').exit_code == 0
    assert json.loads(journal("resume", "a5", "--json").stdout)["result"]["by"] == "stdin"


def test_resume_of_an_unknown_id_exits_2(journal):
    journal("run", target("greet"), "--input", '"x"')  # creates the store
    result = journal("resume", "nope")
    assert result.exit_code == 2
    assert "no invocation 'nope'" in result.stderr


def test_commands_on_a_missing_store_say_where_they_looked(journal, db):
    result = journal("resume", "x")
    assert result.exit_code == 2
    assert f"there is no journal store at {db}" in result.stderr
    assert not os.path.exists(db)


def test_progress_shows_each_step_live_then_replayed(journal, log):
    args = ["--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "pr", "--progress"]
    first = journal("run", target("approval"), *args)
    assert "draft" in first.stderr and "✓" in first.stderr
    journal("resolve", "pr", "approval", '{"approved": true}')
    second = journal("resume", "pr", "--progress")
    lines = second.stderr.splitlines()
    draft = next(line for line in lines if "draft" in line)
    publish = next(line for line in lines if "publish" in line)
    assert "replayed" in draft
    assert "replayed" not in publish and publish.rstrip().endswith("s")  # a duration
    assert "1 step live, 1 replayed" in second.stderr


def test_cancel_runs_the_compensation_and_ends_cancelled(journal, log):
    journal("run", target("cancellable"), "--input", json.dumps({"log": log.path}), "--id", "c1")
    result = journal("cancel", "c1", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "cancelled"
    assert log.lines() == ["reserve", "release"]
    again = journal("cancel", "c1")
    assert (again.exit_code, again.stdout) == (0, "cancelled c1\n")


def test_cancel_no_wait_only_records_the_request(journal, log):
    journal("run", target("cancellable"), "--input", json.dumps({"log": log.path}), "--id", "c2")
    result = journal("cancel", "c2", "--no-wait")
    assert result.exit_code == 0
    assert "cancellation of c2 requested; it is pending" in result.stdout
    assert log.lines() == ["reserve"]
    assert journal("resume", "c2").exit_code == 1  # it ends cancelled now
    assert log.lines() == ["reserve", "release"]


def test_worker_until_idle_runs_pending_invocations(journal, log):
    for n in range(3):
        journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": n}), "--id", f"w{n}")
        journal("resolve", f"w{n}", "approval", '{"approved": true}')
    result = journal("worker", "--until-idle")
    assert result.exit_code == 0, result.stderr
    statuses = {i["id"]: i["status"] for i in json.loads(journal("ls", "--json").stdout)}
    assert statuses == {"w0": "completed", "w1": "completed", "w2": "completed"}
    assert sorted(log.lines()) == ["draft about 0", "draft about 1", "draft about 2"] + ["published"] * 3
    assert "[w0]" in result.stderr and "publish" in result.stderr


def test_default_store_is_journal_db_then_dot_journal(journal, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert journal("run", target("greet"), "--input", '"a"', "--id", "here", use_db=False).exit_code == 0
    assert (tmp_path / ".journal").is_dir()
    monkeypatch.setenv("JOURNAL_DB", str(tmp_path / "env-db"))
    assert journal("run", target("greet"), "--input", '"b"', "--id", "there", use_db=False).exit_code == 0
    assert [i["id"] for i in json.loads(journal("ls", "--json", use_db=False).stdout)] == ["there"]
    assert (tmp_path / ".journal").stat().st_mode & 0o077 == 0  # private to its owner


# -- targets and input: exit 2, nothing journaled -------------------------------------------------


@pytest.mark.parametrize(
    "handler, message",
    [
        (f"{AGENTS.parent}/missing.py:agent", "does not exist"),
        (f"{AGENTS}:nothing_here", "has no attribute 'nothing_here'"),
        (f"{AGENTS}:not_async", "is not an async function"),
        ("no_such_package.agents:agent", "cannot import module 'no_such_package.agents'"),
        ("greet", "is not of the form"),
    ],
)
def test_a_bad_target_exits_2_before_anything_is_journaled(journal, db, handler, message):
    result = journal("run", handler, "--input", "{}")
    assert result.exit_code == 2
    assert message in result.stderr
    assert not os.path.exists(db)


def test_a_module_target_is_imported_from_the_current_directory(journal, tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bot.py").write_text(
        "async def agent(ctx, name: str) -> str:\n    return await ctx.run('hi', lambda: 'hi ' + name)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    result = journal("run", "mypkg.bot:agent", "--input", '"Ada"')
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hi Ada\n"


def test_a_handler_file_that_fails_to_import_exits_2(journal, tmp_path, db):
    broken = tmp_path / "broken.py"
    broken.write_text("async def agent(ctx):\n    return (\n")
    result = journal("run", f"{broken}:agent")
    assert result.exit_code == 2
    assert "SyntaxError" in result.stderr
    assert not os.path.exists(db)


def test_invalid_json_input_says_where(journal, db):
    result = journal("run", target("greet"), "--input", '{"name": ')
    assert result.exit_code == 2
    assert "--input is not valid JSON" in result.stderr and "line 1, column 10" in result.stderr
    assert not os.path.exists(db)


def test_input_of_the_wrong_type_says_where_and_why_and_journals_nothing(journal, db):
    result = journal("run", target("order"), "--input", '{"item": "tea", "qty": "two"}', "--id", "o1")
    assert result.exit_code == 2
    assert "Expected `int`, got `str`" in result.stderr and "$.qty" in result.stderr
    listed = journal("ls", "--json")
    assert json.loads(listed.stdout) == []


def test_missing_input_is_explained(journal):
    result = journal("run", target("greet"))
    assert result.exit_code == 2
    assert "pass it with --input JSON" in result.stderr


def test_input_from_a_file_and_from_stdin(journal, tmp_path):
    path = tmp_path / "in.json"
    path.write_text('{"item": "tea", "qty": 1}')
    from_file = journal("run", target("order"), "--input-file", str(path), "--json")
    from_stdin = journal("run", target("order"), "--input", "-", "--json", input='{"item": "tea", "qty": 1}')
    dash_file = journal("run", target("order"), "--input-file", "-", "--json", input='{"item": "tea", "qty": 1}')
    results = [json.loads(r.stdout)["result"] for r in (from_file, from_stdin, dash_file)]
    assert results == [{"item": "tea", "total": 3}] * 3


def test_input_and_input_file_together_is_a_usage_error(journal, tmp_path):
    path = tmp_path / "in.json"
    path.write_text("1")
    result = journal("run", target("greet"), "--input", "1", "--input-file", str(path))
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_a_handler_without_input_runs_without_one(journal):
    result = journal("run", target("no_input"))
    assert (result.exit_code, result.stdout) == (0, "42\n")
