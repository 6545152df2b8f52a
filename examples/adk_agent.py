"""A Google ADK refund desk, durable under journal: kill it at any point and resume it.

    journal run examples/adk_agent.py:refund_desk --input '"Refund order A-17"' --id desk-1

An ADK `App` with `JournalPlugin()` makes every model call and every tool call a journaled
step; the order and the customer are looked up at once (the model asks for both in one
turn). The refund needs a person's confirmation (`FunctionTool(require_confirmation=True)`),
which waits as a promise: `journal resolve desk-1 adk.confirm:refund:CALL true`, printed by
`journal run`. The session the runner keeps (its events and state) lives in memory and is
rebuilt by the replay after a restart.

Offline (the default) the model is a `BaseLlm` subclass answering by rule from what the run
has seen. With GOOGLE_API_KEY it is Gemini (the model from GEMINI_MODEL).

EXAMPLE_LATENCY=1 makes the offline model and tools slow enough to kill by hand, and
EXAMPLE_CALL_LOG=calls.log records one line per model call or tool call that really ran.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types
from llm import record_call, simulated_latency

from runtime import Context
from runtime.adk import JournalPlugin


async def lookup_order(order: str) -> str:
    """The order's contents and price."""
    await simulated_latency()
    record_call(f"lookup {order}")
    return f"order {order}: one kettle, 40 EUR, delivered broken"


async def lookup_customer(order: str, tool_context: ToolContext) -> str:
    """Who placed the order."""
    await simulated_latency()
    record_call(f"customer {order}")
    tool_context.state["customer"] = "Ada"  # session state: the replay sets it again
    return "Ada, a customer since 2019"


async def refund(order: str, amount: int) -> str:
    """Refund `amount` on `order` (paid: needs a person's confirmation)."""
    await simulated_latency()
    record_call(f"refund {order} {amount}")
    return f"refunded {amount} EUR on order {order}"


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


class DeskModel(BaseLlm):
    """A model answering by rule from the tool results it has seen."""

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        await simulated_latency()
        record_call("model")
        seen = {p.function_response.name: p.function_response.response for c in llm_request.contents
                for p in c.parts or [] if p.function_response is not None}
        if "lookup_order" not in seen:
            parts = [_call("lookup_order", order="A-17"), _call("lookup_customer", order="A-17")]
        elif "refund" not in seen:
            parts = [_call("refund", order="A-17", amount=40)]
        else:
            outcome = (seen["refund"] or {}).get("result") or (seen["refund"] or {}).get("error")
            parts = [types.Part(text=f"Done: {outcome}. Sorry about the kettle, Ada.")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def _model() -> Any:
    if os.environ.get("EXAMPLE_LLM") == "scripted" or not os.environ.get("GOOGLE_API_KEY"):
        return DeskModel(model="desk")
    return os.environ.get("GEMINI_MODEL") or "gemini-2.5-flash"


app = App(
    name="desk",
    root_agent=LlmAgent(name="refunds", model=_model(),
                        instruction="Look the order and the customer up, refund the order, tell the customer.",
                        tools=[lookup_order, lookup_customer, FunctionTool(refund, require_confirmation=True)]),
    plugins=[JournalPlugin()],
)


async def refund_desk(ctx: Context, request: str) -> str:
    """The handler: one durable run of the app, from the request to the answer."""
    sessions = InMemorySessionService()  # rebuilt by the replay after a restart
    await sessions.create_session(app_name=app.name, user_id="customer", session_id=ctx.invocation_id)
    runner = Runner(app=app, session_service=sessions)
    answer = ""
    async for event in runner.run_async(user_id="customer", session_id=ctx.invocation_id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=request)])):
        if event.is_final_response() and event.content and event.content.parts and event.content.parts[0].text:
            answer = event.content.parts[0].text
    return answer
