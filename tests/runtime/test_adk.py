"""Google ADK on journal (`runtime.adk.JournalPlugin`), with a scripted `BaseLlm`, `journal`
commands in real processes and real SIGKILLs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from journal import Chunk, Status, decode_entry, kind_of, open_store
from journal.errors import JournalError
from runtime import Engine
from runtime.testing import check_determinism

from ..waiting import wait_until
from . import adk_agents as agents

ROOT = Path(__file__).resolve().parents[2]
AGENTS = "tests.runtime.adk_agents"
CLI = [sys.executable, "-m", "cli"]
TRIP = {"text": "Trip: LH123 to Oslo, Hotel Astoria in Oslo, sunny in Oslo", "state": {"hotel": "Astoria, Oslo"}}
STEPS = ["adk.model:planner", "adk.tool:flights", "adk.model:planner", "adk.tool:hotels", "adk.tool:weather",
         "adk.model:planner"]


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv(agents.LOG, str(path))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _journal(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=_env(**env), cwd=ROOT, timeout=120)


def _steps(db: str, inv: str) -> list[str]:
    with open_store(db) as store:
        entries = [decode_entry(data) for _, data in store.entries(inv)]
    return [e.name for e in entries if kind_of(e) == "step"]


def _killed_and_resumed(tmp_path: Path, log: Path, hold: str, journaled: str, started: str) -> dict:
    db, release = str(tmp_path / "db"), tmp_path / "release"
    run = subprocess.Popen([*CLI, "run", f"{AGENTS}:trip_handler", "--input", '"Plan a trip to Oslo"', "--id", "k",
                            "--db", db], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=_env(JOURNAL_TEST_RELEASE=str(release), JOURNAL_TEST_HOLD=hold), cwd=ROOT)
    wait_until(lambda: run.poll() is not None or started in _lines(log) and journaled in _steps(db, "k"),
               f"{journaled!r} journaled and {started!r}")
    run.send_signal(signal.SIGKILL)
    run.communicate()
    release.touch()
    resumed = _journal("resume", "k", "--db", db, "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _steps(db, "k") == STEPS
    return json.loads(resumed.stdout)["result"]


def test_a_sigkilled_run_resumes_without_calling_the_model_or_the_finished_tools_again(tmp_path, log):
    # The parallel pair has started; `weather` (the second tool call) is journaled, `hotels` is held.
    result = _killed_and_resumed(tmp_path, log, "hotels", "adk.tool:weather", "tool hotels Oslo started")
    effects = _lines(log)
    uninterrupted = _journal("run", f"{AGENTS}:trip_handler", "--input", '"Plan a trip to Oslo"', "--id", "u",
                             "--db", str(tmp_path / "db"), "--json")
    assert result == json.loads(uninterrupted.stdout)["result"] == TRIP
    assert effects.count("model 0") == effects.count("model 1") == effects.count("model 2") == 1
    assert effects.count("tool flights Oslo") == effects.count("tool weather Oslo") == 1
    # Only the tool the kill interrupted ran again.
    assert effects.count("tool hotels Oslo started") == 2 and effects.count("tool hotels Oslo done") == 1


def test_the_session_state_a_replayed_tool_set_is_rebuilt_from_the_journal(tmp_path, log):
    # Killed in the last model call: every tool is journaled, and `hotels` set the session's
    # state. The resumed process's session is a new one, rebuilt by the replay.
    result = _killed_and_resumed(tmp_path, log, "model", "adk.tool:hotels", "model 2")
    assert result == TRIP
    assert _lines(log).count("tool hotels Oslo done") == 1 and _lines(log).count("model 2") == 2


def test_check_determinism_passes_over_the_trip_run(log):
    report = check_determinism(agents.trip_handler, "Plan a trip to Oslo")
    assert report.crash_points


def test_a_tool_confirmation_suspends_and_a_fresh_process_resolves_it(tmp_path, log):
    db = str(tmp_path / "db")
    first = _journal("run", f"{AGENTS}:pay_handler", "--input", '"Pay the invoice"', "--id", "a", "--db", db)
    assert first.returncode == 3, first.stdout + first.stderr  # suspended
    with open_store(db) as store:
        record = store.get("a")
        assert record is not None and record.status == Status.SUSPENDED
        waiting = record.waiting
    assert waiting is not None and waiting.startswith("adk.confirm:transfer:adk-journal-")
    assert _lines(log) == ["model 0"]  # nothing transferred yet
    answered = _journal("resolve", "a", waiting, "true", "--db", db)
    assert answered.returncode == 0, answered.stderr
    resumed = _journal("resume", "a", "--db", db, "--json")
    assert json.loads(resumed.stdout)["result"] == "Result: [{'result': 'transferred 250'}]", resumed.stderr
    assert _lines(log) == ["model 0", "tool transfer 250", "model 1"]


def test_a_rejected_confirmation_reaches_the_model_as_adk_words_it(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            first = await engine.run(agents.pay_handler, "Pay the invoice", id="r")
            assert first.status == "suspended" and first.waiting is not None
            await engine.reject("r", first.waiting, "over the limit")
            return (await engine.resume("r")).result

    assert anyio.run(main) == "Result: [{'error': 'This tool call is rejected.'}]"
    assert "tool transfer 250" not in _lines(log)


def test_outside_a_handler_the_run_refuses(log):
    async def main() -> None:
        # ADK wraps what a plugin raises in a RuntimeError naming the plugin.
        with pytest.raises(RuntimeError, match="outside a journal handler") as raised:
            await agents.ask(agents.trip_app, "Plan a trip")
        assert isinstance(raised.value.__cause__, JournalError)

    anyio.run(main)
    assert _lines(log) == []  # neither the model nor a tool was called


def _followed(tmp_path: Path, handler: object) -> tuple[list[Chunk], str]:
    async def main() -> tuple[list[Chunk], str]:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.start(handler, "Tell a story", id="s")
            got: list[Chunk] = []

            async def follow() -> None:
                async for item in engine.stream("s"):
                    if isinstance(item, Chunk):
                        got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                out = await engine.resume("s")
            return got, out.result

    return anyio.run(main)


def test_a_streamed_model_calls_text_reaches_followers_as_chunks(tmp_path):
    got, result = _followed(tmp_path, agents.story_handler)
    assert result == "Once upon a time in Oslo"
    assert len(got) == 6 and all(c.seq == 1 and c.attempt == 1 for c in got)
    assert "".join(c.data for c in got) == "Once upon a time in Oslo "


def test_a_retried_model_calls_chunks_carry_the_new_attempt(tmp_path):
    agents.BROKEN.clear()
    got, result = _followed(tmp_path, agents.flaky_story_handler)
    assert result == "Once upon a time in Oslo"
    assert "".join(c.data for c in got if c.attempt == 1) == "Once upon a "  # the broken stream: three words
    assert "".join(c.data for c in got if c.attempt == 2) == "Once upon a time in Oslo "

