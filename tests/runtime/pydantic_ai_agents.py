"""Pydantic AI agents on journal for tests/runtime/test_pydantic_ai.py, with Pydantic AI's own
`FunctionModel`. The model and every tool append what they do to a log file (`args["log"]`),
so a test sees from outside how often each really ran, across processes and kills."""

from __future__ import annotations

import datetime
import os
import time

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel

from runtime import Context
from runtime.pydantic_ai import JournalDurability

LOG = "JOURNAL_TEST_LOG"  # the file every model request and tool call appends to
# A test model answers the same at every call, its times too: `check_determinism` compares
# what a step that ran again after a crash returned with what it returned the first time.
# (Pydantic AI fills in `request_timestamp` and `duration` from the clock where a model leaves them out.)
_AT = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
FIXED_TIMES = {"timestamp": _AT, "request_timestamp": _AT, "duration": datetime.timedelta(0)}


def _record(line: str) -> None:
    with open(os.environ[LOG], "a") as f:
        f.write(line + "\n")


def _lines() -> list[str]:
    try:
        with open(os.environ[LOG]) as f:
            return f.read().split("\n")
    except FileNotFoundError:
        return []


def _wait_for(what, condition) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within 60 s")
        time.sleep(0.005)


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


# -- two parallel tool calls, a kill during the second model request ---------------------------------


def forecast_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    _record(f"model {len(returns)}")
    if not returns:
        return ModelResponse(parts=[ToolCallPart("forecast", {"city": "Paris"}, tool_call_id="paris"),
                                    ToolCallPart("forecast", {"city": "Oslo"}, tool_call_id="oslo")], **FIXED_TIMES)
    release = os.environ.get("JOURNAL_TEST_RELEASE")
    if release:  # the second request waits here: a test kills the process in it
        _wait_for("the release", lambda: os.path.exists(release))
    text = "; ".join(sorted(str(r.content) for r in returns))
    return ModelResponse(parts=[TextPart(f"Forecast: {text}")], **FIXED_TIMES)


forecaster = Agent(FunctionModel(forecast_model), name="forecaster", capabilities=[JournalDurability()])


@forecaster.tool_plain
def forecast(city: str) -> str:
    """The weather in `city`. Paris finishes only after Oslo has: the two must run at once."""
    if city == "Paris":
        _wait_for("Oslo's forecast", lambda: "tool Oslo done" in _lines())
    _record(f"tool {city} done")
    return f"{city}: sunny" if city == "Paris" else f"{city}: snow"


async def forecast_handler(ctx: Context, question: str) -> str:
    return (await forecaster.run(question)).output


# -- a tool that needs approval, asked for through HandleDeferredToolCalls --------------------------------


def refund_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    _record(f"model {len(returns)}")
    if not returns:
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17", "amount": 40}, tool_call_id="refund-1")], **FIXED_TIMES)
    return ModelResponse(parts=[TextPart(f"Done: {returns[0].content}")], **FIXED_TIMES)


def _ask(ctx: RunContext[None], requests, token: str) -> None:
    """Hand the approval to a person: here, write the token where the test finds it."""
    _record(f"asked {token} for {[call.tool_call_id for call in requests.approvals]}")


refunder = Agent(FunctionModel(refund_model), name="refunder",
                 capabilities=[JournalDurability(), HandleDeferredToolCalls(_ask, name="approve_refund")])


@refunder.tool_plain(requires_approval=True)
def refund(order: str, amount: int) -> str:
    _record(f"tool refund {order}")
    return f"refunded {amount} on {order}"


async def refund_handler(ctx: Context, request: str) -> str:
    return (await refunder.run(request)).output


# -- streamed text ------------------------------------------------------------------------------------


async def stream_text(messages: list[ModelMessage], info: AgentInfo):
    for word in ("Light ", "rain ", "later."):
        yield word


async def stream_tool_then_text(messages: list[ModelMessage], info: AgentInfo):
    if not _returns(messages):
        yield {0: DeltaToolCalls(name="forecast", json_args='{"city": "Oslo"}', tool_call_id="oslo")}
        return
    for word in ("Snow ", "in ", "Oslo."):
        yield word


def _unused(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("a streamed agent asks for its responses streamed")


streamer = Agent(FunctionModel(_unused, stream_function=stream_text), name="streamer",
                 capabilities=[JournalDurability(stream=True)])


async def stream_handler(ctx: Context, question: str) -> str:
    return (await streamer.run(question)).output


# -- an MCP server (the `mcp` package's own) and a dynamic toolset ---------------------------------------


def _payments_server():
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("payments")

    @server.tool()
    def charge(customer: str) -> str:
        """Charge a customer."""
        _record(f"mcp charge {customer}")
        return f"charged {customer}"

    return server


def _tools_for_the_run(ctx: RunContext[None]):
    from pydantic_ai.toolsets import FunctionToolset

    def lookup(customer: str) -> str:
        _record(f"dynamic lookup {customer}")
        return f"{customer} is a customer since 2019"

    return FunctionToolset([lookup])


def payer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    _record(f"model {len(returns)}")
    if not returns:
        return ModelResponse(parts=[ToolCallPart("charge", {"customer": "ada"}, tool_call_id="charge-1"),
                                    ToolCallPart("lookup", {"customer": "ada"}, tool_call_id="lookup-1")],
                             **FIXED_TIMES)
    return ModelResponse(parts=[TextPart("; ".join(sorted(str(r.content) for r in returns)))], **FIXED_TIMES)


def _payer() -> Agent[None, str]:
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.toolsets import DynamicToolset

    return Agent(FunctionModel(payer_model), name="payer",
                 toolsets=[MCPToolset(_payments_server(), id="payments"), DynamicToolset(_tools_for_the_run, id="crm")],
                 capabilities=[JournalDurability()])


payer = _payer()


async def payer_handler(ctx: Context, request: str) -> str:
    answer = (await payer.run(request)).output
    await ctx.promise("filed")  # resumed later: the whole agent run replays
    return answer
