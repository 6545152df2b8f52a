"""LangChain agents on journal (`runtime.langchain.JournalMiddleware`), with LangChain's own
`GenericFakeChatModel`, `journal` commands in real processes and real SIGKILLs."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal import Chunk, Status, Step, decode_entry, kind_of, open_store
from journal.errors import JournalError
from runtime import Engine
from runtime.langchain import JournalMiddleware
from runtime.testing import check_determinism, replay_journal

from ..waiting import wait_until
from . import langchain_agents as agents

ROOT = Path(__file__).resolve().parents[2]
# By module: a file path would put tests/runtime (and its `langgraph` test package) first on sys.path.
AGENTS = "tests.runtime.langchain_agents"
CLI = [sys.executable, "-m", "cli"]


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


def test_a_sigkilled_agent_resumes_without_calling_the_model_or_the_finished_tools_again(tmp_path, log):
    db, release = str(tmp_path / "db"), tmp_path / "release"
    run = subprocess.Popen([*CLI, "run", f"{AGENTS}:trip_handler", "--input", '"Plan a trip to Oslo"', "--id", "k",
                            "--db", db], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=_env(JOURNAL_TEST_RELEASE=str(release)), cwd=ROOT)
    # The parallel pair has started; `weather` (the second tool call) is journaled, `hotels` is held.
    wait_until(lambda: run.poll() is not None or "tool hotels Oslo started" in _lines(log)
               and "langchain.tool:weather" in _steps(db, "k"), "the second tool call's step")
    run.send_signal(signal.SIGKILL)
    run.communicate()
    release.touch()
    resumed = _journal("resume", "k", "--db", db, "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    uninterrupted = _journal("run", f"{AGENTS}:trip_handler", "--input", '"Plan a trip to Oslo"', "--id", "u",
                             "--db", db, "--json")
    assert json.loads(resumed.stdout)["result"] == json.loads(uninterrupted.stdout)["result"] == (
        "Trip: LH123 to Oslo, Hotel Astoria in Oslo, sunny in Oslo")
    effects = _lines(log)[: _lines(log).index("model 0", 1)]  # the killed and resumed run's, not u's
    assert effects.count("model 0") == effects.count("model 1") == effects.count("model 2") == 1
    assert effects.count("tool flights Oslo") == effects.count("tool weather Oslo") == 1
    # Only the tool the kill interrupted ran again.
    assert effects.count("tool hotels Oslo started") == 2 and effects.count("tool hotels Oslo done") == 1
    assert _steps(db, "k") == ["langchain.model", "langchain.tool:flights", "langchain.model",
                               "langchain.tool:hotels", "langchain.tool:weather", "langchain.model"]


def test_the_parallel_pair_runs_at_once(tmp_path, log, monkeypatch):
    # `hotels` waits for a file that only this test writes once `weather` has run: run one
    # after the other, the agent would wait forever.
    release = tmp_path / "release"
    monkeypatch.setenv(agents.RELEASE, str(release))

    async def main() -> str:
        with anyio.fail_after(60):  # the deadline for a run that would wait forever
            return await run()

    async def run() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine, anyio.create_task_group() as tg:
            async def let_go() -> None:
                while "tool weather Oslo" not in _lines(log) or "tool hotels Oslo started" not in _lines(log):
                    await anyio.sleep(0.01)
                release.touch()

            tg.start_soon(let_go)
            return (await engine.run(agents.trip_handler, "Plan a trip", id="p")).result

    assert anyio.run(main).startswith("Trip:")


def test_check_determinism_passes_over_the_trip_agent(log):
    report = check_determinism(agents.trip_handler, "Plan a trip to Oslo")
    assert report.crash_points


def test_an_approval_suspends_and_a_fresh_process_resolves_it(tmp_path, log):
    db = str(tmp_path / "db")
    first = _journal("run", f"{AGENTS}:pay_handler", "--input", '"Pay the invoice"', "--id", "a", "--db", db)
    assert first.returncode == 3, first.stdout + first.stderr  # suspended
    with open_store(db) as store:
        record = store.get("a")
        assert record is not None and record.status == Status.SUSPENDED
        assert record.waiting == "langchain.interrupt:1"
    assert _lines(log) == ["model 0"]  # nothing transferred yet
    answered = _journal("resolve", "a", "langchain.interrupt:1", '{"decisions": [{"type": "approve"}]}', "--db", db)
    assert answered.returncode == 0, answered.stderr
    resumed = _journal("resume", "a", "--db", db, "--json")
    assert json.loads(resumed.stdout)["result"] == "Result: transferred 250", resumed.stderr
    assert _lines(log) == ["model 0", "tool transfer 250", "model 1"]


def test_a_rejection_reaches_the_model_as_the_middleware_words_it(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            first = await engine.run(agents.pay_handler, "Pay the invoice", id="r")
            assert first.status == "suspended"
            await engine.reject("r", "langchain.interrupt:1", "over the limit")
            return (await engine.resume("r")).result

    assert anyio.run(main) == "Result: User rejected the tool call for `transfer` with reason: over the limit"
    assert "tool transfer 250" not in _lines(log)


def test_an_interrupt_in_a_tool_waits_on_a_promise_and_gets_the_answer(tmp_path, log):
    async def main() -> tuple[str, str | None]:
        async with Engine.open(str(tmp_path / "db")) as engine:
            first = await engine.run(agents.delete_handler, "Delete /tmp/x", id="d")
            await engine.resolve("d", "langchain.interrupt:1", "yes")
            return (await engine.resume("d")).result, first.waiting

    assert anyio.run(main) == ("Result: deleted /tmp/x", "langchain.interrupt:1")
    # Asked, and asked again when LangGraph resumed the tool (its rule), which then had the answer.
    assert _lines(log) == ["model 0", "tool delete /tmp/x asked", "tool delete /tmp/x asked",
                           "tool delete /tmp/x answered yes", "model 1"]


def test_outside_a_handler_the_agent_refuses_to_run(log):
    async def main() -> None:
        with pytest.raises(JournalError, match="outside a journal handler"):
            await agents.trip_agent.ainvoke(agents._ask("Plan a trip"))

    anyio.run(main)
    assert _lines(log) == []  # neither the model nor a tool was called


def test_a_synchronous_run_inside_a_handler_is_refused_with_what_to_call(tmp_path, log):
    async def main() -> str:
        async with Engine.open(str(tmp_path / "db")) as engine:
            out = await engine.run(agents.sync_handler, "Plan a trip", id="s")
            assert out.status == "failed"
            return str(out.error)

    assert "agent.ainvoke" in anyio.run(main)
    assert _lines(log) == []


def _followed(tmp_path: Path, handler: object) -> tuple[list[Chunk], str, list[str]]:
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

    got, result = anyio.run(main)
    return got, result, _steps(str(tmp_path / "db"), "s")


def test_a_streamed_model_calls_tokens_reach_followers_as_chunks(tmp_path):
    got, result, steps = _followed(tmp_path, agents.story_handler)
    assert result == "Once upon a time in Oslo" and steps == ["langchain.model"]
    assert len(got) > 1 and all(c.seq == 1 and c.attempt == 1 for c in got)
    assert "".join(c.data for c in got) == "Once upon a time in Oslo"


def test_a_retried_model_calls_chunks_carry_the_new_attempt(tmp_path):
    agents.BROKEN.clear()
    got, result, _ = _followed(tmp_path, agents.flaky_story_handler)
    assert result == "Once upon a time in Oslo"
    assert "".join(c.data for c in got if c.attempt == 1) == "Once upon"  # the broken stream: three tokens
    assert "".join(c.data for c in got if c.attempt == 2) == "Once upon a time in Oslo"


def test_chat_openai_against_an_openai_compatible_endpoint_replays_without_requests(tmp_path, log):
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from .fake_openai import FakeOpenAI

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        agents._log(f"tool weather {city}")
        return f"sunny in {city}"

    with FakeOpenAI() as endpoint:
        model = ChatOpenAI(model="fake", base_url=endpoint.base_url, api_key="sk-test", max_retries=0)
        agent = create_agent(model, [weather], middleware=[JournalMiddleware()])

        async def forecast(ctx, question: str) -> dict:
            state = await agent.ainvoke({"messages": [{"role": "user", "content": question}]})
            answer = state["messages"][-1]
            assert isinstance(answer, AIMessage)
            return {"text": answer.content, "usage": answer.usage_metadata}

        async def streamed(ctx, question: str) -> str:
            text = ""
            async for chunk, _ in agent.astream({"messages": [{"role": "user", "content": question}]},
                                                stream_mode="messages"):
                if isinstance(chunk, AIMessage):
                    text += str(chunk.content)
            return text

        async def main() -> tuple:
            async with Engine.open(str(tmp_path / "db")) as engine:
                done = await engine.run(forecast, "Weather in Oslo?", id="f")
                served = len(endpoint.requests)
                got: list[Chunk] = []
                await engine.start(streamed, "Weather in Oslo?", id="s")

                async def follow() -> None:
                    async for item in engine.stream("s"):
                        if isinstance(item, Chunk):
                            got.append(item)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow)
                    out = await engine.resume("s")
            return done.result, served, got, out.result

        result, served, got, streamed_text = anyio.run(main)
        assert result["text"] == "Forecast: sunny in Oslo" and result["usage"]["total_tokens"] == 42
        assert served == 2 and endpoint.requests[0]["tools"][0]["function"]["name"] == "weather"
        # The streamed run's second model call streamed its tokens through ChatOpenAI to followers.
        assert "".join(c.data for c in got if c.seq == 3) == "Forecast: sunny in Oslo"
        assert streamed_text == "Forecast: sunny in Oslo"  # each token once: the final message is not repeated

        # Replayed against its journal, the run asks the endpoint nothing and ends the same.
        before = len(endpoint.requests)

        async def replay() -> None:
            with open_store(str(tmp_path / "db")) as store:
                await replay_journal(forecast, store, "f")

        anyio.run(replay)
        assert len(endpoint.requests) == before
        assert check_determinism(forecast, "Weather in Oslo?").crash_points


def _step_entries(db: str, inv: str) -> list[tuple[Any, ...]]:
    """What a step entry says, but its time."""
    with open_store(db) as store:
        entries = [decode_entry(data) for _, data in store.entries(inv)]
    return [(e.name, e.digest, e.prev, bytes(e.value or b""), e.error, e.attempts) for e in entries
            if isinstance(e, Step)]


def test_the_journal_is_the_same_with_the_hooks_traced_by_langsmith_or_not(tmp_path, log):
    from langchain.agents import create_agent
    from langsmith.run_helpers import tracing_context

    # Built with LangSmith tracing on, the hooks stay coroutine functions, which LangSmith runs
    # in a task of its own (and, untraced at run time, reports nowhere); built without, the
    # middleware starts that task itself. Journals recorded either way replay under the other.
    with tracing_context(enabled=True):
        traced = JournalMiddleware()
    untraced = JournalMiddleware()
    assert inspect.iscoroutinefunction(traced.awrap_model_call)
    assert not inspect.iscoroutinefunction(untraced.awrap_model_call)
    journals = []
    for n, middleware in enumerate((traced, untraced)):
        agent = create_agent(agents.ScriptedModel(agents.TRIP), [agents.flights, agents.weather, agents.hotels],
                             middleware=[middleware])

        async def trip(ctx: Any, question: str) -> str:
            state = await agent.ainvoke(agents._ask(question))  # noqa: B023 - run before the next agent
            return str(state["messages"][-1].content)

        async def main() -> str:
            async with Engine.open(str(tmp_path / f"db{n}")) as engine:  # noqa: B023
                return (await engine.run(trip, "Plan a trip to Oslo", id="t")).result

        assert anyio.run(main).startswith("Trip:")
        journals.append(_step_entries(str(tmp_path / f"db{n}"), "t"))
    assert journals[0] == journals[1] and len(journals[0]) == 6


def test_replayed_messages_equal_the_live_ones(tmp_path, log):
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_openai import ChatOpenAI

    from .fake_openai import FakeOpenAI

    seen: list[list[BaseMessage]] = []
    with FakeOpenAI() as endpoint:
        model = ChatOpenAI(model="fake", base_url=endpoint.base_url, api_key="sk-test", max_retries=0)
        agent = create_agent(model, [agents.weather], middleware=[JournalMiddleware()])

        async def forecast(ctx: Any, question: str) -> str:
            state = await agent.ainvoke(agents._ask(question))
            seen.append(state["messages"])
            return str(state["messages"][-1].content)

        async def main() -> None:
            async with Engine.open(str(tmp_path / "db")) as engine:
                await engine.run(forecast, "Weather in Oslo?", id="f")
            with open_store(str(tmp_path / "db")) as store:
                await replay_journal(forecast, store, "f")

        anyio.run(main)
    # LangGraph gives a message without an id (the question, a tool's answer) a new one each run.
    live, replayed = ([m.model_copy(update={"id": None}) if not isinstance(m, AIMessage) else m for m in messages[1:]]
                      for messages in seen)
    # The model's messages carry OpenAI's metadata, tool calls and token usage.
    assert [type(m).__name__ for m in live] == ["AIMessage", "ToolMessage", "AIMessage"]
    assert live[0].tool_calls and live[2].usage_metadata and live[2].response_metadata
    assert replayed == live
    assert [m.model_fields_set for m in replayed] == [m.model_fields_set for m in live]
    assert [m.model_dump() for m in replayed] == [m.model_dump() for m in live]
