"""The OpenAI Agents SDK on journal (`runtime.openai_agents.run`), with the SDK's own
`ScriptedModel`, real processes and real SIGKILLs."""

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

from journal import decode_entry, kind_of, open_store
from journal.errors import JournalError
from runtime import Engine

from ..waiting import wait_until
from . import openai_agents_agents as agents

ROOT = Path(__file__).resolve().parents[2]

RUN = textwrap.dedent("""
    import sys, json, anyio
    from runtime import Engine
    from tests.runtime import openai_agents_agents as agents
    async def main():
        db, action, inv, handler, request = sys.argv[1:6]
        async with Engine.open(db) as engine:
            if action == "run":
                out = await engine.run(getattr(agents, handler), request, id=inv)
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


def _spawn(db: str, action: str, inv: str, handler: str = "", request: str = "", **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUN, db, action, inv, handler, request], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT)


def _step_names(db: str, inv: str) -> list[str]:
    with open_store(db) as store:
        entries = [decode_entry(data) for _, data in store.entries(inv)]
    return [e.name for e in entries if kind_of(e) == "step"]


def _killed_and_resumed(db: str, inv: str, handler: str, log: Path, tmp_path: Path, wait_for: str) -> dict:
    release = tmp_path / "release"
    proc = _spawn(db, "run", inv, handler, "please", JOURNAL_TEST_RELEASE=str(release))
    wait_until(lambda: wait_for in _lines(log) or proc.poll() is not None, repr(wait_for))
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    release.touch()
    out, _ = _spawn(db, "resume", inv, JOURNAL_TEST_RELEASE=str(release)).communicate(timeout=120)
    return json.loads(out.splitlines()[-1])


def test_a_tool_that_ran_before_a_sigkill_is_not_run_again(tmp_path, log):
    db = str(tmp_path / "db")
    # Killed in the model call after the tool's: the tool ran and is journaled, the answer is not.
    done = _killed_and_resumed(db, "b", "booker_handler", log, tmp_path, "model booker 1")
    assert done == {"status": "completed", "result": "Done: booked LH123"}
    effects = _lines(log)
    assert effects.count("tool book LH123") == 1
    assert effects.count("model booker 0") == 1 and effects.count("model booker 1") == 2  # the one in flight again
    assert _step_names(db, "b") == ["openai_agents.model:booker", "openai_agents.tool:book",
                                    "openai_agents.model:booker"]


def test_a_handoff_to_a_second_agent_killed_mid_way(tmp_path, log):
    db = str(tmp_path / "db")
    done = _killed_and_resumed(db, "h", "triage_handler", log, tmp_path, "model refunds 1")
    assert done == {"status": "completed", "result": "refunds: Refunds: refunded A-17"}
    effects = _lines(log)
    assert effects.count("model triage") == 1 and effects.count("tool refund A-17") == 1
    assert _step_names(db, "h") == ["openai_agents.model:triage", "openai_agents.model:refunds",
                                    "openai_agents.tool:refund", "openai_agents.model:refunds"]


def test_a_tool_that_needs_approval_waits_on_a_promise(tmp_path, log):
    async def main() -> tuple[str, str | None]:
        async with Engine.open(str(tmp_path / "db")) as engine:
            first = await engine.run(agents.payer_handler, "pay the invoice", id="a")
            assert first.status == "suspended" and first.waiting == "approve:transfer:transfer-1"
            assert "tool transfer 250" not in _lines(log)
            await engine.resolve("a", "approve:transfer:transfer-1", True)
            return (await engine.resume("a")).result, first.waiting

    result, waiting = anyio.run(main)
    assert result == "Result: transferred 250"
    assert _lines(log).count("tool transfer 250") == 1 and _lines(log).count("model payer 0") == 1


def test_a_rejected_approval_tells_the_model(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.run(agents.payer_handler, "pay the invoice", id="r")
            await engine.reject("r", "approve:transfer:transfer-1", "over the limit")
            return (await engine.resume("r")).result

    assert "over the limit" in anyio.run(main)
    assert "tool transfer 250" not in _lines(log)


def test_outside_a_handler_run_refuses(log):
    async def main() -> None:
        import runtime.openai_agents

        with pytest.raises(JournalError, match="outside a handler"):
            await runtime.openai_agents.run(agents.booker, "please", run_config=agents.CONFIG)

    anyio.run(main)
    assert _lines(log) == []


def test_an_mcp_servers_tools_are_listed_and_called_in_steps_not_again_on_replay(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            assert (await engine.run(agents.ledger_handler, "charge ada", id="m")).status == "suspended"
            await engine.resolve("m", "filed", True)
            return (await engine.resume("m")).result

    assert anyio.run(main) == "Ledger: charged ada"
    assert _lines(log).count("mcp charge ada") == 1 and _lines(log).count("model ledger 0") == 1
    names = _step_names(str(tmp_path / "db"), "m")
    assert "ledger.list_tools" in names and "ledger.call_tool:charge" in names


# -- the SDK's own Chat Completions model, over HTTP to a fake OpenAI-compatible server ------


def _chat_agent(server, **settings):
    import openai
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool

    @function_tool
    def lookup(code: str) -> str:
        """Look a fare code up."""
        return f"fare {code}: 120 EUR"

    client = openai.AsyncOpenAI(base_url=server.url, api_key="test", max_retries=0)
    return Agent(name="fares", instructions="Answer fare questions.", tools=[lookup],
                 model=OpenAIChatCompletionsModel("fake-model", client),
                 model_settings=ModelSettings(**settings))


def _fares(body):
    from ..fake_openai import text, tool_calls

    answered = [m for m in body["messages"] if m.get("role") == "tool"]
    if not answered:
        return tool_calls(("lookup", {"code": "Y"}, "call-1"))
    return text(f"It costs {answered[0]['content'].split(': ')[1]}.")


@pytest.mark.parametrize("preserve_raw_usage", [False, True], ids=["plain", "raw-usage"])
def test_the_chat_completions_models_responses_reach_the_run_whole_live_and_on_replay(tmp_path, preserve_raw_usage):
    # Chat Completions responses have no response id (`response_id=None`, a field the SDK
    # declares required and nullable), a request id from the `x-request-id` header, and raw
    # usage when asked. The run sees each response as the SDK's model returned it: live,
    # rebuilt from the journal, and when the journal is replayed.
    from agents import RunConfig, Runner

    import runtime.openai_agents
    from runtime.testing import replay_journal

    from ..fake_openai import FakeOpenAI

    seen = []

    async def fares(ctx, question: str) -> str:
        result = await runtime.openai_agents.run(agent, question, run_config=RunConfig(tracing_disabled=True))
        seen.append(result.raw_responses)
        return str(result.final_output)

    async def main():
        nonlocal agent
        with FakeOpenAI(_fares) as plain_server:
            agent = _chat_agent(plain_server, preserve_raw_usage=preserve_raw_usage)
            plain = await Runner.run(agent, "What does fare Y cost?", run_config=RunConfig(tracing_disabled=True))
        with FakeOpenAI(_fares) as server:
            agent = _chat_agent(server, preserve_raw_usage=preserve_raw_usage)
            async with Engine.open(str(tmp_path / "db")) as engine:
                outcome = await engine.run(fares, "What does fare Y cost?", id="f")
                report = await replay_journal(fares, engine.store, "f")
            return plain, outcome, report, len(server.requests)

    agent = None
    plain, outcome, report, requests = anyio.run(main)
    assert outcome.status == "completed", outcome.error
    assert outcome.result == plain.final_output == "It costs 120 EUR."
    assert requests == 2  # the replay sent none
    assert report.finished and report.stopped_at is None
    original = plain.raw_responses
    assert [r.response_id for r in original] == [None, None]
    assert [r.request_id for r in original] == ["req-1", "req-2"]
    assert all((r.raw_usage is not None) == preserve_raw_usage for r in original)
    assert seen == [original, original]  # live, then replayed: field for field


def test_a_response_whose_optional_fields_are_all_empty_survives_the_journal(tmp_path):
    # The least a model may answer: no ids, no usage, no raw usage, an output text with no
    # annotations or logprobs. Live and on replay the run gets exactly that response.
    from agents import Agent, RunConfig, Usage
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText
    from pydantic import TypeAdapter

    import runtime.openai_agents
    from runtime.testing import replay_journal

    bare = ModelResponse(
        output=[ResponseOutputMessage(id="msg-1", type="message", role="assistant", status="completed",
                                      content=[ResponseOutputText(type="output_text", text="ok", annotations=[])])],
        usage=Usage(), response_id=None)
    assert bare.request_id is None and bare.raw_usage is None

    class Bare(Model):
        async def get_response(self, *args, **kwargs):
            return bare

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    agent = Agent(name="bare", model=Bare())
    seen = []

    async def handler(ctx, question: str) -> str:
        result = await runtime.openai_agents.run(agent, question, run_config=RunConfig(tracing_disabled=True))
        seen.append(result.raw_responses)
        return str(result.final_output)

    async def main():
        async with Engine.open(str(tmp_path / "db")) as engine:
            outcome = await engine.run(handler, "anything?", id="e")
            report = await replay_journal(handler, engine.store, "e")
            # A journal written before every field was kept: the step's value without its
            # Nones (what 0.1.0 journaled). Forked with that value, the run still replays it.
            steps = [seq for seq, data in engine.store.entries("e") if kind_of(decode_entry(data)) == "step"]
            old_form = TypeAdapter(ModelResponse).dump_python(bare, mode="json", by_alias=True, exclude_none=True)
            assert "response_id" not in old_form
            fork = await engine.fork("e", at=steps[-1] + 1, values={steps[0]: old_form}, new_id="e-old")
            return outcome, report, await engine.resume(fork.id)

    outcome, report, old = anyio.run(main)
    assert outcome.status == "completed" and outcome.result == "ok", outcome.error
    assert report.finished and report.stopped_at is None
    assert old.status == "completed" and old.result == "ok", old.error
    # The live run, the replay, the fork's check of its values (a replay in memory) and the
    # fork's resume: each got exactly the bare response.
    assert len(seen) >= 3 and all(responses == [bare] for responses in seen), seen
