"""A Pydantic AI travel agent, durable under journal: kill it at any point and resume it.

    journal run examples/pydantic_ai_agent.py:plan_trip --input '"A weekend in Lisbon"' --id trip-1

The agent is an ordinary Pydantic AI `Agent` with `JournalDurability()` among its
capabilities. Inside the handler, each model request and each tool call is a journaled
step, named as Pydantic AI names it; the two lookups the model asks for together run in
parallel; booking a flight needs a person's approval, which waits as a promise
(`journal resolve ...`, printed when it is asked for); and the model's text streams live
to `journal tail trip-1 -f` (and the web UI of `journal serve`).

Offline (the default) the model is Pydantic AI's `FunctionModel`, following a script. With
OPENAI_BASE_URL and/or OPENAI_API_KEY set (the model from OPENAI_MODEL) it is any
OpenAI-compatible endpoint, through `pip install 'pydantic-ai-slim[openai]'`.

EXAMPLE_LATENCY=1 makes the offline model and tools slow enough to kill by hand, and
EXAMPLE_CALL_LOG=calls.log records one line per model request or tool call that really ran.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator

from llm import record_call, simulated_latency
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from runtime import Context, current_step
from runtime.pydantic_ai import JournalDurability

INSTRUCTIONS = ("You plan short trips. Look up the weather and the flights for the destination (both at once), "
                "book the best flight, then answer in two sentences.")


# -- the offline model: Pydantic AI's FunctionModel, streaming its answer ---------------------------------


def _returns(messages: list[ModelMessage]) -> dict[str, str]:
    return {p.tool_name: str(p.content) for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)}


async def _scripted(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    await simulated_latency()
    record_call("model")
    seen = _returns(messages)
    city = "Lisbon"
    if "weather" not in seen:
        yield {0: DeltaToolCall("weather", json.dumps({"city": city}), tool_call_id="weather-1"),
               1: DeltaToolCall("flights", json.dumps({"city": city}), tool_call_id="flights-1")}
    elif "book" not in seen:
        flight = seen["flights"].split(",")[0].strip("[]' ")
        yield {0: DeltaToolCall("book", json.dumps({"flight": flight}), tool_call_id="book-1")}
    else:
        words = f"{seen['weather']}. {seen['book']}, have a good trip.".split(" ")
        for n, word in enumerate(words):
            yield word if n == len(words) - 1 else word + " "


def _model() -> Model:
    if os.environ.get("EXAMPLE_LLM") != "scripted" and (os.environ.get("OPENAI_BASE_URL")
                                                         or os.environ.get("OPENAI_API_KEY")):
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY"))
        return OpenAIChatModel(os.environ.get("OPENAI_MODEL") or "gpt-4o-mini", provider=provider)

    def unstreamed(messages: list[ModelMessage], info: AgentInfo) -> None:
        raise AssertionError("JournalDurability(stream=True) streams every request")

    return FunctionModel(unstreamed, stream_function=_scripted)  # type: ignore[arg-type]


# -- the approval: asked for once, answered with `journal resolve` -----------------------------------------


def _ask_for_approval(ctx: RunContext[None], requests: DeferredToolRequests, token: str) -> None:
    """Runs once, inside a journaled step: say how to answer, then let the run wait."""
    approvals = {call.tool_call_id: True for call in requests.approvals}
    invocation = current_step().invocation_id
    print(f"approval needed: journal resolve {invocation} {token} '{json.dumps({'approvals': approvals})}'",
          file=sys.stderr, flush=True)


agent = Agent(
    _model(),
    name="travel",
    instructions=INSTRUCTIONS,
    capabilities=[JournalDurability(stream=True), HandleDeferredToolCalls(_ask_for_approval, name="book")],
)


@agent.tool_plain
async def weather(city: str) -> str:
    """The forecast for `city`."""
    await simulated_latency()
    record_call(f"weather {city}")
    return f"Sunny and 24 °C in {city}"


@agent.tool_plain
async def flights(city: str) -> list[str]:
    """Flights to `city` this weekend, best first."""
    await simulated_latency()
    record_call(f"flights {city}")
    return ["TP1351 08:05", "FR8342 13:40"]


@agent.tool_plain(requires_approval=True)
async def book(flight: str) -> str:
    """Book `flight` (paid: needs a person's approval)."""
    await simulated_latency()
    record_call(f"book {flight}")
    return f"Booked {flight}"


async def plan_trip(ctx: Context, request: str) -> str:
    """The handler: one durable agent run."""
    return (await agent.run(request)).output
