"""Pydantic AI on journal (`runtime.pydantic_ai.JournalDurability`), with Pydantic AI's own
`FunctionModel`, real processes and real SIGKILLs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from pydantic_ai.exceptions import UserError

from journal import Chunk, Status, decode_entry, kind_of, open_store
from runtime import Engine
from runtime.testing import check_determinism

from ..waiting import wait_until
from . import pydantic_ai_agents as agents

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "tests" / "runtime" / "pydantic_ai_agents.py"

RUN = textwrap.dedent("""
    import sys, json, anyio
    from runtime import Engine
    from tests.runtime import pydantic_ai_agents as agents
    async def main():
        db, action, inv, handler, question = sys.argv[1:6]
        async with Engine.open(db) as engine:
            if action == "run":
                out = await engine.run(getattr(agents, handler), question, id=inv)
            else:
                out = await engine.resume(inv)
            print(json.dumps({"status": str(out.status), "result": out.result}), flush=True)
    anyio.run(main)
""")


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv(agents.LOG, str(path))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _spawn(db: str, action: str, inv: str, handler: str = "", question: str = "", **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUN, db, action, inv, handler, question], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT)


def _steps(db: str, inv: str) -> list[tuple[str, str | None]]:
    with open_store(db) as store:
        return [(kind_of(e), getattr(e, "name", None)) for e in (decode_entry(d) for _, d in store.entries(inv))]


def test_parallel_tools_run_once_and_the_run_resumes_in_a_new_process_after_a_sigkill(tmp_path, log):
    db, release = str(tmp_path / "db"), tmp_path / "release"
    proc = _spawn(db, "run", "f", "forecast_handler", "Weather in Paris and Oslo?", JOURNAL_TEST_RELEASE=str(release))
    # Killed inside the second model request: both tools have run and are journaled.
    wait_until(lambda: "model 2" in _lines(log) or proc.poll() is not None, "the second model request")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    release.touch()
    resumed = _spawn(db, "resume", "f", JOURNAL_TEST_RELEASE=str(release))
    out, _ = resumed.communicate(timeout=120)
    done = json.loads(out.splitlines()[-1])
    assert done == {"status": "completed", "result": "Forecast: Oslo: snow; Paris: sunny"}
    effects = _lines(log)
    # Each tool ran once (Paris waited for Oslo: they ran at once, and finished out of order).
    assert [e for e in effects if e.startswith("tool")] == ["tool Oslo done", "tool Paris done"]
    # Two requests, and the one the kill interrupted once more.
    assert effects.count("model 0") == 1 and effects.count("model 2") == 2
    assert _steps(db, "f") == [
        ("started", None), ("step", "forecaster__model.request"),
        ("step", "forecaster__function_toolset__<agent>.call_tool:forecast"),
        ("step", "forecaster__function_toolset__<agent>.call_tool:forecast"),
        ("step", "forecaster__model.request"), ("completed", None)]


def test_check_determinism_passes_over_the_forecast_handler(log):
    report = check_determinism(agents.forecast_handler, "Weather in Paris and Oslo?")
    assert report.crash_points  # it crashed the run at every journal write, and resumed each


def test_an_approval_is_a_promise_answered_by_journal_resolve_after_a_kill(tmp_path, log):
    db = str(tmp_path / "db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "cli"]
    started = subprocess.run([*cli, "start", f"{AGENTS}:refund_handler", "--input", '"Refund order A-17"',
                              "--id", "r", "--db", db], capture_output=True, text=True, env=env, timeout=60)
    assert started.returncode == 0, started.stderr
    worker = subprocess.Popen([*cli, "worker", "--db", db], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env)
    try:
        def waiting() -> str | None:
            with open_store(db) as store:
                record = store.get("r")
                return record.waiting if record is not None and record.status == Status.SUSPENDED else None

        token = wait_until(waiting, "the run to wait for its approval")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate()
    assert token.startswith("approve_refund.")
    assert _lines(log) == ["model 0", f"asked {token} for ['refund-1']"]  # nothing refunded yet
    answered = subprocess.run([*cli, "resolve", "r", token, '{"approvals": {"refund-1": true}}', "--db", db],
                              capture_output=True, text=True, env=env, timeout=60)
    assert answered.returncode == 0, answered.stderr
    resumed = subprocess.run([*cli, "resume", "r", "--db", db, "--json"], capture_output=True, text=True,
                             env=env, timeout=120)
    assert json.loads(resumed.stdout)["result"] == "Done: refunded 40 on A-17", resumed.stderr
    # Asked once, refunded once: the replay neither asked again nor made another token.
    assert _lines(log) == ["model 0", f"asked {token} for ['refund-1']", "tool refund A-17", "model 1"]
    names = [name for kind, name in _steps(db, "r")]
    assert "refunder__external_event.approve_refund.ask" in names and token in names


def test_an_approval_refuses_a_value_that_decides_nothing_and_its_hint_shows_one_that_does(tmp_path, log):
    # After a kill, the suspension's hint must show a value that approves the pending call,
    # and `journal resolve` must refuse one that does not decide it (a bare `true` was
    # accepted, then failed the run for good with "The decision sent ... is not valid").
    db = str(tmp_path / "db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "cli"]

    def journal(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args, "--db", db], capture_output=True, text=True, env=env, timeout=120)

    assert journal("start", f"{AGENTS}:refund_handler", "--input", '"Refund order A-17"', "--id", "t").returncode == 0
    worker = subprocess.Popen([*cli, "worker", "--db", db], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env)
    try:
        def waiting() -> str | None:
            with open_store(db) as store:
                record = store.get("t")
                return record.waiting if record is not None and record.status == Status.SUSPENDED else None

        token = wait_until(waiting, "the run to wait for its approval")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate()
    suspended = journal("resume", "t")
    assert suspended.returncode == 3, suspended.stderr
    hint = suspended.stdout + suspended.stderr
    assert "any JSON value" not in hint
    assert f"""journal resolve t {token} '{{"approvals":{{"refund-1":true}}}}' --db""" in hint, hint
    for wrong in ("true", '{"approvals": {"other-call": true}}', '{"approvals": {}}'):
        refused = journal("resolve", "t", token, wrong)
        assert refused.returncode == 2, (wrong, refused.stdout, refused.stderr)
        assert "refund-1" in refused.stderr, refused.stderr
    with open_store(db) as store:
        assert store.get("t").status == Status.SUSPENDED  # still waiting for a decision
    assert journal("resolve", "t", token, '{"approvals": {"refund-1": true}}').returncode == 0
    done = journal("resume", "t", "--json")
    assert json.loads(done.stdout)["result"] == "Done: refunded 40 on A-17", done.stderr
    assert _lines(log).count("tool refund A-17") == 1


def test_a_rejected_approval_reaches_the_model_as_a_denial(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            first = await engine.run(agents.refund_handler, "Refund order A-17", id="d")
            assert first.status == "suspended"
            await engine.reject("d", first.waiting, "not without a receipt")
            return (await engine.resume("d")).result

    result = anyio.run(main)
    assert result.startswith("Done: No decision on this tool call arrived") and "not without a receipt" in result
    assert "tool refund A-17" not in _lines(log)


def test_a_durable_agent_outside_a_handler_refuses_to_run(log):
    async def main() -> None:
        with pytest.raises(UserError, match="outside a journal handler"):
            await agents.forecaster.run("Weather?")

    anyio.run(main)
    assert _lines(log) == []  # neither the model nor a tool was called


def test_a_streamed_requests_text_reaches_followers_as_chunks(tmp_path):
    async def main() -> tuple[list, str]:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.start(agents.stream_handler, "Weather?", id="s")
            got: list = []

            async def follow() -> None:
                async for item in engine.stream("s"):
                    got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                out = await engine.resume("s")
            return got, out.result

    got, result = anyio.run(main)
    assert result == "Light rain later."
    assert all(isinstance(c, Chunk) and c.seq == 1 for c in got)
    assert "".join(c.data for c in got) == "Light rain later."
    assert _steps(str(tmp_path / "db"), "s")[1] == ("step", "streamer__model.request_stream")


def test_mcp_discovery_mcp_calls_and_dynamic_tools_are_steps_not_repeated_on_replay(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            assert (await engine.run(agents.payer_handler, "Charge ada", id="m")).status == "suspended"
            await engine.resolve("m", "filed", True)
            return (await engine.resume("m")).result

    assert anyio.run(main) == "ada is a customer since 2019; charged ada"
    # The replay called neither the model nor a tool, nor connected to list the server's tools again.
    assert sorted(_lines(log)) == ["dynamic lookup ada", "mcp charge ada", "model 0", "model 2"]
    names = [name for kind, name in _steps(str(tmp_path / "db"), "m") if kind == "step"]
    assert names[0] == "payer__mcp_server__payments.get_tools"
    assert "payer__mcp_server__payments.call_tool" in names
    assert "payer__dynamic_toolset__crm.call_tool:lookup" in names
