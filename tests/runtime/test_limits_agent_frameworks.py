"""LangChain's `JournalMiddleware(limit=)` and ADK's `JournalPlugin(limit=)` put every model
call under a limit and report the usage the model gave: the real frameworks, each with its own
test model (LangChain's `GenericFakeChatModel`, an ADK `BaseLlm`) reporting 42 tokens a call.
A replayed model call takes nothing: with the limit's only unit held by another, the resumed
run still finishes."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal import HOST
from journal.limits import Request
from runtime import Context, Engine

from . import adk_agents, langchain_agents

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv(langchain_agents.LOG, str(path))
    assert adk_agents.LOG == langchain_agents.LOG
    return path


def _model_calls(log: Path) -> int:
    return sum(line.startswith("model ") for line in log.read_text().splitlines()) if log.exists() else 0


async def _limited_run_then_replay(tmp_path: Path, log: Path, name: str,
                                   agent: Callable[[str], Awaitable[int]]) -> None:
    """Runs `agent` (which answers the tokens its model reported) in a handler that then waits
    on a promise; checks the limit and a budget on it counted that usage, then replays the agent
    while another holds the limit's only unit."""

    async def handler(ctx: Context, question: str) -> int:
        reported = await agent(question)
        await ctx.promise("go")
        return reported

    async with Engine.open(str(tmp_path / "db")) as engine:
        await engine.limits.set(name, concurrency=1, tokens="100000/m")
        await engine.budgets.set(name, tokens=100_000)  # a limit name's budget: the steps under it
        outcome = await engine.run(handler, "Plan a trip to Oslo", id="r")
        assert outcome.status == "suspended", outcome.error
        view = await engine.limits.get(name)
        assert view is not None and _model_calls(log) == 3
        # Settled with what the model reported (3 calls of 42), not the requests' estimates.
        assert (view.tokens_used, view.in_use) == (126, 0)
        assert (await engine.budgets.get(name)).used_tokens == 126

        # Another holder takes the only unit: a replayed model call that acquired would wait for ever.
        held = engine.store.limits().acquire(Request("other", (name,), engine.owner, HOST, os.getpid()))
        assert str(held) == "Granted()"
        await engine.resolve("r", "go", True)
        with anyio.fail_after(60):
            outcome = await engine.resume("r")
        view = await engine.limits.get(name)
        budget = await engine.budgets.get(name)
    assert outcome.status == "completed", outcome.error
    assert outcome.result == 126  # what the agent's own messages say the model reported
    assert _model_calls(log) == 3  # the replay called no model
    assert view is not None and (view.tokens_used, view.in_use, view.waiting) == (126, 1, 0)  # the other's unit
    assert budget.used_tokens == 126  # a replayed call is not charged again


async def test_langchain_model_calls_take_the_limit_and_report_their_usage(tmp_path, log):
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage

    from runtime.langchain import JournalMiddleware

    agent = create_agent(langchain_agents.ScriptedModel(langchain_agents.TRIP),
                         [langchain_agents.flights, langchain_agents.weather, langchain_agents.hotels],
                         middleware=[JournalMiddleware(limit="openai")])

    async def run(question: str) -> int:
        state = await agent.ainvoke({"messages": [{"role": "user", "content": question}]})
        assert state["messages"][-1].content == "Trip: LH123 to Oslo, Hotel Astoria in Oslo, sunny in Oslo"
        return sum(m.usage_metadata["total_tokens"] for m in state["messages"]
                   if isinstance(m, AIMessage) and m.usage_metadata)

    await _limited_run_then_replay(tmp_path, log, "openai", run)


async def test_adk_model_calls_take_the_limit_and_report_their_usage(tmp_path, log):
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from runtime.adk import JournalPlugin

    app = App(name="trip", root_agent=LlmAgent(
        name="planner", model=adk_agents.ScriptedLlm(model="scripted", script=adk_agents.TRIP),
        tools=[adk_agents.flights, adk_agents.weather, adk_agents.hotels]), plugins=[JournalPlugin(limit="gemini")])

    async def run(question: str) -> int:
        service = InMemorySessionService()
        await service.create_session(app_name=app.name, user_id="u", session_id="s")
        reported: list[Any] = []
        async for event in Runner(app=app, session_service=service).run_async(
                user_id="u", session_id="s", new_message=types.Content(role="user", parts=[types.Part(text=question)])):
            if event.author == "planner" and event.usage_metadata is not None:
                reported.append(event.usage_metadata.total_token_count)
        assert len(reported) == 3
        return sum(reported)

    await _limited_run_then_replay(tmp_path, log, "gemini", run)
