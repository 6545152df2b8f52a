"""A LangChain trip planner, durable under journal: kill it at any point and resume it.

    journal run examples/langchain_agent.py:plan_trip --input '"A weekend in Oslo"' --id trip-1

`create_agent` with `JournalMiddleware()` makes every model call and every tool call a
journaled step; the weather and the hotel are looked up at once (the model asks for both in
one turn). Booking needs a person's approval (LangChain's `HumanInTheLoopMiddleware`), which
waits as a promise: `journal resolve trip-1 langchain.interrupt:1 true`, printed by
`journal run`.

Offline (the default) the model is LangChain's `GenericFakeChatModel`, answering by rule
from what the run has seen. With OPENAI_API_KEY (and OPENAI_BASE_URL for another
OpenAI-compatible endpoint; the model from OPENAI_MODEL) it is `ChatOpenAI`
(`pip install langchain-openai`).

EXAMPLE_LATENCY=1 makes the offline model and tools slow enough to kill by hand, and
EXAMPLE_CALL_LOG=calls.log records one line per model call or tool call that really ran.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from llm import record_call, simulated_latency

import runtime.langchain
from runtime import Context
from runtime.langchain import JournalMiddleware


@tool
async def find_flight(city: str) -> str:
    """The first flight to a city."""
    await simulated_latency()
    record_call(f"flight {city}")
    return "SK4035 08:10"


@tool
async def weather(city: str) -> str:
    """The weekend's weather in a city."""
    await simulated_latency()
    record_call(f"weather {city}")
    return "Crisp and clear, 4 °C"


@tool
async def find_hotel(city: str) -> str:
    """A hotel in a city."""
    await simulated_latency()
    record_call(f"hotel {city}")
    return "Hotel Continental"


@tool
async def book(flight: str, hotel: str) -> str:
    """Book the flight and the hotel (paid: needs a person's approval)."""
    await simulated_latency()
    record_call(f"book {flight} {hotel}")
    return f"booked {flight} and {hotel}"


def _call(name: str, n: int, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"{name}-{n}", "type": "tool_call"}


class TripModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering by rule from the tool results it has seen."""

    def __init__(self) -> None:
        super().__init__(messages=iter(()))

    def bind_tools(self, tools: Any, **kwargs: Any) -> TripModel:
        return self

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        await simulated_latency()
        record_call("model")
        seen = {m.name: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        if "find_flight" not in seen:
            reply = AIMessage(content="", tool_calls=[_call("find_flight", 1, city="Oslo")])
        elif "weather" not in seen:  # two at once: LangGraph runs them in parallel
            reply = AIMessage(content="", tool_calls=[_call("weather", 1, city="Oslo"),
                                                      _call("find_hotel", 1, city="Oslo")])
        elif "book" not in seen:
            reply = AIMessage(content="", tool_calls=[_call("book", 1, flight=seen["find_flight"],
                                                            hotel=seen["find_hotel"])])
        else:
            reply = AIMessage(content=f"{seen['weather']} in Oslo. Booked {seen['book'].removeprefix('booked ')}, have a good trip.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _model() -> Any:
    if os.environ.get("EXAMPLE_LLM") == "scripted" or not (
            os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")):
        return TripModel()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=os.environ.get("OPENAI_MODEL") or "gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL"))


planner = create_agent(
    _model(), [find_flight, weather, find_hotel, book],
    system_prompt="Plan the trip: find a flight, the weather and a hotel, then book flight and hotel.",
    # JournalMiddleware last, so that it wraps the model and the tools most closely.
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"book": True}), JournalMiddleware()],
    checkpointer=InMemorySaver(),  # to pause for the approval; the journal is what survives a crash
)


async def plan_trip(ctx: Context, request: str) -> str:
    """The handler: one durable run of the agent, from the request to the booking."""
    state = await runtime.langchain.run(planner, {"messages": [{"role": "user", "content": request}]})
    return str(state["messages"][-1].content)
