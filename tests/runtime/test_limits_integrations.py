"""The integrations put every model request under a limit and report its usage by themselves:
the OpenAI Agents SDK and Pydantic AI, each through the real `openai` client over real HTTP to
the fake provider."""

from __future__ import annotations

import openai
import pytest

from runtime import Context, Engine
from runtime.testing import FakeProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def provider():
    with FakeProvider(rpm=1000, tpm=1_000_000, period=60) as fake:
        yield fake


async def test_openai_agents_model_calls_take_the_limit_and_report_their_usage(provider, tmp_path):
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig

    import runtime.openai_agents

    client = openai.AsyncOpenAI(base_url=provider.url, api_key="fake", max_retries=0)
    agent = Agent(name="writer", instructions="Answer briefly.",
                  model=OpenAIChatCompletionsModel(model="fake", openai_client=client))

    async def handler(ctx: Context, question: str) -> str:
        result = await runtime.openai_agents.run(agent, question, limit="openai",
                                                 run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)

    async with client, Engine.open(str(tmp_path / "db")) as engine:
        await engine.limits.set("openai", concurrency=2, tokens="100000/m")
        outcome = await engine.run(handler, "Why journal model calls? " * 20)
        view = await engine.limits.get("openai")
    assert outcome.status == "completed", outcome.error
    assert len(provider.served) == 1
    # The window holds what the provider counted, not the request's estimate.
    assert view.tokens_used == provider.served_tokens and view.in_use == 0


async def test_pydantic_ai_model_requests_take_the_limit_and_report_their_usage(provider, tmp_path):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from runtime.pydantic_ai import JournalDurability

    client = openai.AsyncOpenAI(base_url=provider.url, api_key="fake", max_retries=0)
    model = OpenAIChatModel("fake", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="writer", capabilities=[JournalDurability(limit="openai")])

    async def handler(ctx: Context, question: str) -> str:
        return str((await agent.run(question)).output)

    async with client, Engine.open(str(tmp_path / "db")) as engine:
        await engine.limits.set("openai", concurrency=2, tokens="100000/m")
        outcome = await engine.run(handler, "Why journal model calls?")
        view = await engine.limits.get("openai")
    assert outcome.status == "completed", outcome.error
    assert len(provider.served) == 1
    assert view.tokens_used == provider.served_tokens and view.in_use == 0

