"""Google ADK agents for tests/runtime/test_adk.py: `LlmAgent`s over a scripted `BaseLlm`
and tools that log each call to the file `$JOURNAL_TEST_LOG`, so a test counts what really
ran, across processes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types

from runtime import Context, RetryPolicy
from runtime.adk import JournalPlugin

LOG = "JOURNAL_TEST_LOG"
RELEASE = "JOURNAL_TEST_RELEASE"  # a file the tool `hotels` (or the last model turn) waits for, when set
HOLD = "JOURNAL_TEST_HOLD"  # "model": the trip's last model turn waits for RELEASE instead of `hotels`


async def _held(where: str) -> None:
    release = os.environ.get(RELEASE)
    if release and os.environ.get(HOLD, "hotels") == where:  # the run is killed meanwhile
        while not Path(release).exists():
            await asyncio.sleep(0.01)


def _log(line: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


class ScriptedLlm(BaseLlm):
    """Answers by how far the conversation has got (the model's turns so far), so a fresh
    process after a crash answers the same; ends by quoting the last tool result if asked to."""

    script: list[list[types.Part]]
    quote: bool = False

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        turn = sum(c.role == "model" for c in llm_request.contents)
        _log(f"model {turn}")
        if turn == 2:
            await _held("model")
        parts = self.script[turn]
        if self.quote and parts[0].text is not None:
            last = llm_request.contents[-1].parts or []
            results = [p.function_response.response for p in last if p.function_response is not None]
            parts = [types.Part(text=f"{parts[0].text} {results}")]
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=30, candidates_token_count=12,
                                                            total_token_count=42)
        text = parts[0].text
        if stream and text:
            for word in text.split(" "):
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=word + " ")]),
                                  partial=True)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


def flights(city: str) -> str:
    """Find a flight to a city."""
    _log(f"tool flights {city}")
    return f"LH123 to {city}"


async def hotels(city: str, tool_context: ToolContext) -> str:
    """Find a hotel in a city."""
    # Async: ADK calls a plain function tool on the event loop, where a wait would hold up its pair.
    _log(f"tool hotels {city} started")
    await _held("hotels")
    _log(f"tool hotels {city} done")
    tool_context.state["hotel"] = f"Astoria, {city}"  # session state a replay must rebuild
    return f"Hotel Astoria in {city}"


def weather(city: str) -> str:
    """The weather in a city."""
    _log(f"tool weather {city}")
    return f"sunny in {city}"


TRIP = [
    [_call("flights", city="Oslo")],
    # The parallel pair: `hotels` (first) is held until `weather` (second) has run.
    [_call("hotels", city="Oslo"), _call("weather", city="Oslo")],
    [types.Part(text="Trip: LH123 to Oslo, Hotel Astoria in Oslo, sunny in Oslo")],
]

trip_app = App(name="trip", root_agent=LlmAgent(name="planner", model=ScriptedLlm(model="scripted", script=TRIP),
                                                tools=[flights, weather, hotels]),
               plugins=[JournalPlugin()])


async def ask(app: App, question: str, run_config: RunConfig | None = None) -> tuple[str, dict[str, Any]]:
    """Runs `app` on `question` in a fresh in-memory session: its final text and the session's state."""
    service = InMemorySessionService()
    await service.create_session(app_name=app.name, user_id="u", session_id="s")
    runner = Runner(app=app, session_service=service)
    text = ""
    async for event in runner.run_async(user_id="u", session_id="s", run_config=run_config,
                                        new_message=types.Content(role="user", parts=[types.Part(text=question)])):
        if event.is_final_response() and event.content and event.content.parts and event.content.parts[0].text:
            text = event.content.parts[0].text
    session = await service.get_session(app_name=app.name, user_id="u", session_id="s")
    assert session is not None
    return text, dict(session.state)


async def trip_handler(ctx: Context, question: str) -> dict[str, Any]:
    text, state = await ask(trip_app, question)
    return {"text": text, "state": state}


def transfer(amount: int) -> str:
    """Transfer money."""
    _log(f"tool transfer {amount}")
    return f"transferred {amount}"


PAY = [[_call("transfer", amount=250)], [types.Part(text="Result:")]]

pay_app = App(name="pay", root_agent=LlmAgent(
    name="payer", model=ScriptedLlm(model="scripted", script=PAY, quote=True),
    tools=[FunctionTool(transfer, require_confirmation=True)]), plugins=[JournalPlugin()])


async def pay_handler(ctx: Context, question: str) -> str:
    return (await ask(pay_app, question))[0]


STORY = [[types.Part(text="Once upon a time in Oslo")]]
story_app = App(name="story", root_agent=LlmAgent(name="teller", model=ScriptedLlm(model="scripted", script=STORY)),
                plugins=[JournalPlugin()])


async def story_handler(ctx: Context, question: str) -> str:
    return (await ask(story_app, question, RunConfig(streaming_mode=StreamingMode.SSE)))[0]


BROKEN: list[bool] = []


class FlakyStreamer(ScriptedLlm):
    """Streams three words and then fails, on its first call since `BROKEN` was cleared."""

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        n = 0
        async for response in super().generate_content_async(llm_request, stream):
            if n == 3 and not BROKEN:
                BROKEN.append(True)
                raise ConnectionError("the stream broke")
            n += 1
            yield response


flaky_app = App(name="flaky", root_agent=LlmAgent(name="teller", model=FlakyStreamer(model="scripted", script=STORY)),
                plugins=[JournalPlugin(model_retry=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=0))])


async def flaky_story_handler(ctx: Context, question: str) -> str:
    return (await ask(flaky_app, question, RunConfig(streaming_mode=StreamingMode.SSE)))[0]
