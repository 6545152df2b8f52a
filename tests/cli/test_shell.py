"""`journal` as real processes: exit codes, the approval flow across processes, Ctrl-C, tail -f."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from ..waiting import wait_until
from .conftest import target

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals and fork-free process control")


def _paste(line: str, db: str) -> list[str]:
    """A printed `journal ...` command line as argv for this Python (the command as a user pastes it)."""
    argv = shlex.split(line.strip())
    assert argv[0] == "journal" and argv[-2:] == ["--db", db], line
    return [sys.executable, "-m", "cli", *argv[1:]]


def test_exit_codes_of_run(sh, log, tmp_path, db):
    assert sh("run", target("greet"), "--input", '"Ada"').returncode == 0
    assert sh("run", target("refuses"), "--input", "{}").returncode == 1
    assert sh("run", target("not_async"), "--input", "{}").returncode == 2
    assert sh("run", target("greet"), "--input", "{not json").returncode == 2
    assert sh("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"})).returncode == 3
    assert sh("run", target("greet"), "--bogus-option").returncode == 2


def test_results_go_to_stdout_and_messages_to_stderr(sh, log):
    ok = sh("run", target("greet"), "--input", '"Ada"')
    # A generated id is the one thing said besides the result: without it the run cannot be resumed.
    assert ok.stdout == "hello Ada\n" and re.fullmatch(r"invocation [0-9a-f]{32}\n", ok.stderr)
    quiet = sh("run", target("greet"), "--input", '"Ada"', "--id", "named")
    assert (quiet.stdout, quiet.stderr) == ("hello Ada\n", "")
    bad = sh("run", target("greet"), "--input", "{not json")
    assert bad.stdout == "" and bad.stderr.startswith("error: --input is not valid JSON")


def test_human_approval_flow_end_to_end(sh, log, db):
    run = sh("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "owls"}), "--id", "flow")
    assert run.returncode == 3, run.stderr
    printed = run.stderr.splitlines()
    resolve_line = next(line for line in printed if line.strip().startswith("journal resolve flow approval true"))
    resume_line = next(line for line in printed if line.strip().startswith("journal resume flow"))

    # Another process resolves the promise, with exactly the command `run` printed...
    resolved = subprocess.run(_paste(resolve_line, db), capture_output=True, text=True, timeout=30)
    assert resolved.returncode == 0, resolved.stderr
    # ...and another one resumes it, again as printed.
    resumed = subprocess.run(_paste(resume_line, db) + ["--json"], capture_output=True, text=True, timeout=30)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {
        "id": "flow", "status": "completed", "error": None, "waiting": None, "wake_at": None,
        "result": {"draft": "draft about owls", "by": None, "published": "published"},
    }
    assert log.lines() == ["draft about owls", "published"]  # the draft was not redone

    shown = sh("show", "flow")
    assert shown.returncode == 0
    rows = [line.split(None, 4) for line in shown.stdout.splitlines() if line[:3].strip().isdigit()]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("0", "started", "-"), ("1", "step", "draft"), ("2", "promise", "approval"),
        ("3", "step", "publish"), ("4", "completed", "-"),
    ]
    assert rows[2][4] == "true"


def test_ctrl_c_exits_130_and_the_invocation_stays_resumable(sh, log, tmp_path):
    marker = tmp_path / "in-wait"
    proc = sh.popen("run", target("slow"), "--input", json.dumps({"log": log.path, "marker": str(marker)}), "--id", "s")
    wait_until(marker.exists, "the step to start")
    err = sh.stopped(proc, signal.SIGINT)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "journal resume s" in err
    assert "Traceback" not in err

    shown = json.loads(sh("show", "s", "--json").stdout)
    assert shown["status"] == "pending"
    assert [e["kind"] for e in shown["entries"]] == ["started", "step"]  # no half-written entry

    resumed = sh("resume", "s")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "wait (again)\n"
    assert log.lines() == ["first", "wait", "wait (again)"]  # `first` was not run twice


def test_ctrl_c_stops_a_worker_and_leaves_its_invocation_pending(sh, log, tmp_path):
    marker = tmp_path / "in-wait"
    sh("run", target("gated"), "--input", json.dumps({"log": log.path, "marker": str(marker)}), "--id", "w")
    sh("resolve", "w", "go")  # pending now: the worker takes it
    worker = sh.popen("worker")
    wait_until(marker.exists, "the worker to start the step")
    err = sh.stopped(worker, signal.SIGINT)
    assert worker.returncode == 0, err  # a worker's stop is its normal end (docs/cli.md, "Stopping")
    assert err.splitlines()[-1].startswith("stopped by Ctrl-C")
    assert "Traceback" not in err
    assert json.loads(sh("show", "w", "--json").stdout)["status"] == "pending"
    finished = sh("worker", "--until-idle")
    assert finished.returncode == 0, finished.stderr
    assert json.loads(sh("show", "w", "--json").stdout)["status"] == "completed"
    assert log.lines() == ["first", "wait", "wait (again)"]


def test_tail_follow_prints_entries_appended_by_other_processes(sh, log, tmp_path):
    sh("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "t")
    tail = subprocess.Popen(sh.argv("tail", "t", "-f"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=sh.env)
    try:
        seen = [tail.stdout.readline(), tail.stdout.readline()]
        assert [line.split()[0] for line in seen] == ["0", "1"]
        assert tail.poll() is None  # still following a suspended invocation

        assert sh("resolve", "t", "approval", "true").returncode == 0
        assert sh("resume", "t").returncode == 0
        rest, err = tail.communicate(timeout=15)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert tail.returncode == 0, err
    lines = rest.splitlines()
    assert [(line.split()[0], line.split()[2]) for line in lines] == [("2", "promise"), ("3", "step"), ("4", "completed")]


def test_compact_refuses_while_another_process_has_the_store_open(sh, log, tmp_path):
    sh("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "t")
    tail = subprocess.Popen(sh.argv("tail", "t", "-f"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=sh.env)
    try:
        tail.stdout.readline()  # it has the store open now
        refused = sh("compact")
        assert refused.returncode == 2
        assert f"processes {tail.pid} have the store" in refused.stderr
    finally:
        tail.terminate()
        tail.communicate(timeout=10)
    assert sh("compact").returncode == 0


def test_replay_after_a_step_is_renamed_exits_4_with_the_seq_and_both_names(sh, log, tmp_path):
    source = (
        "from tests_cli_agents import record\n"
        "async def agent(ctx, input: dict) -> str:\n"
        "    plan = await ctx.run('plan', record, input['log'], 'plan')\n"
        "    ok = await ctx.promise('approval')\n"
        "    return await ctx.run('write', record, input['log'], plan + ' written')\n"
    )
    (tmp_path / "tests_cli_agents.py").write_text(
        "def record(log, what):\n    open(log, 'a').write(what + '\\n')\n    return what\n"
    )
    handler = tmp_path / "bot.py"
    handler.write_text(source)
    first = sh("run", f"{handler}:agent", "--input", json.dumps({"log": log.path}), "--id", "r")
    assert first.returncode == 3, first.stderr

    unchanged = sh("replay", "r")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "1 recorded operation matches" in unchanged.stdout

    handler.write_text(source.replace("'plan', record", "'outline', record"))
    before = sh("show", "r", "--json").stdout
    replayed = sh("replay", "r")
    assert replayed.returncode == 4
    assert "diverged at seq 1" in replayed.stdout
    assert "journal has: step 'plan'" in replayed.stdout
    assert "code asked:  step 'outline'" in replayed.stdout
    # Read-only: nothing appended, no step run, the status unchanged.
    assert sh("show", "r", "--json").stdout == before
    assert log.lines() == ["plan"]

    # Resuming with the changed code parks it as diverged (exit 4), before any side effect.
    resumed = sh("resume", "r")
    assert resumed.returncode == 4
    assert "at seq 1" in resumed.stderr and "'outline'" in resumed.stderr
    shown = json.loads(sh("show", "r", "--json").stdout)
    assert shown["status"] == "diverged" and shown["error"]["type"] == "NondeterminismError"
    assert "journal has: step 'plan'" in sh("show", "r").stdout  # the report, for whoever looks later
    assert log.lines() == ["plan"]


def test_python_dash_m_and_the_console_script_are_the_same_command():
    script = os.path.join(os.path.dirname(sys.executable), "journal")
    if not os.path.exists(script):
        pytest.skip("the console script is not installed next to this Python")
    via_script = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    via_module = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True, timeout=30)
    assert via_script.returncode == via_module.returncode == 0
    assert via_script.stdout == via_module.stdout
