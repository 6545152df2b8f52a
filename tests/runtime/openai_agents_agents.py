"""OpenAI Agents SDK agents on journal for tests/runtime/test_openai_agents.py, with the SDK's
own `ScriptedModel`. Each scripted response is derived from the call (what the run has seen
so far), not from a count of calls, so a resumed process answers as the first one did. The
models and tools append what they do to a log file, so a test sees how often each really ran."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from agents import Agent, RunConfig, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import runtime.openai_agents
from runtime import Context

LOG = "JOURNAL_TEST_LOG"
CONFIG = RunConfig(tracing_disabled=True)  # tests export no traces


def _record(line: str) -> None:
    with open(os.environ[LOG], "a") as f:
        f.write(line + "\n")


def _hold() -> None:
    """Wait, in a model call, for the file a test creates once it has killed the first process."""
    release = os.environ.get("JOURNAL_TEST_RELEASE")
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within 60 s")
        time.sleep(0.005)


def _outputs(call: ModelCall) -> list[str]:
    """The text of each tool output the model has been sent so far."""
    items = call.input if isinstance(call.input, list) else []
    texts = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            parts = output if isinstance(output, list) else [output]
            texts.append("".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in parts))
    return texts


def _scripted(responder) -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(responder) for _ in range(20)])


# -- a tool, then the final answer (the kill lands between them) --------------------------------------


@function_tool
def book(flight: str) -> str:
    """Book a flight."""
    _record(f"tool book {flight}")
    return f"booked {flight}"


def _booker_model(call: ModelCall):
    outputs = _outputs(call)
    _record(f"model booker {len(outputs)}")
    if not outputs:
        return [function_call("book", {"flight": "LH123"}, call_id="book-1")]
    _hold()
    return [assistant_message(f"Done: {outputs[0]}")]


booker = Agent(name="booker", instructions="Book flights.", model=_scripted(_booker_model), tools=[book])


async def booker_handler(ctx: Context, request: str) -> str:
    result = await runtime.openai_agents.run(booker, request, run_config=CONFIG)
    return str(result.final_output)


# -- a handoff to a second agent, which is killed mid-way ---------------------------------------------


@function_tool
def refund(order: str) -> str:
    """Refund an order."""
    _record(f"tool refund {order}")
    return f"refunded {order}"


def _refunds_model(call: ModelCall):
    outputs = [o for o in _outputs(call) if o.startswith("refunded")]
    _record(f"model refunds {len(outputs)}")
    if not outputs:
        return [function_call("refund", {"order": "A-17"}, call_id="refund-1")]
    _hold()
    return [assistant_message(f"Refunds: {outputs[0]}")]


refunds = Agent(name="refunds", instructions="Refund orders.", model=_scripted(_refunds_model), tools=[refund])


def _triage_model(call: ModelCall):
    _record("model triage")
    return [function_call("transfer_to_refunds", {}, call_id="handoff-1")]


triage = Agent(name="triage", instructions="Route the request.", model=_scripted(_triage_model), handoffs=[refunds])


async def triage_handler(ctx: Context, request: str) -> str:
    result = await runtime.openai_agents.run(triage, request, run_config=CONFIG)
    return f"{result.last_agent.name}: {result.final_output}"


# -- a tool that needs approval ---------------------------------------------------------------------


@function_tool(needs_approval=True)
def transfer(amount: int) -> str:
    """Transfer money."""
    _record(f"tool transfer {amount}")
    return f"transferred {amount}"


def _payer_model(call: ModelCall):
    outputs = _outputs(call)
    _record(f"model payer {len(outputs)}")
    if not outputs:
        return [function_call("transfer", {"amount": 250}, call_id="transfer-1")]
    return [assistant_message(f"Result: {outputs[0]}")]


payer = Agent(name="payer", instructions="Pay.", model=_scripted(_payer_model), tools=[transfer])


async def payer_handler(ctx: Context, request: str) -> str:
    result = await runtime.openai_agents.run(payer, request, run_config=CONFIG)
    return str(result.final_output)


def dumps(value: Any) -> str:
    return json.dumps(value)


# -- an MCP server (the `mcp` package's own, on stdio) ------------------------------------------------


def _ledger_model(call: ModelCall):
    outputs = _outputs(call)
    _record(f"model ledger {len(outputs)}")
    if not outputs:
        return [function_call("charge", {"customer": "ada"}, call_id="charge-1")]
    return [assistant_message(f"Ledger: {outputs[0]}")]


async def ledger_handler(ctx: Context, request: str) -> str:
    import sys

    from agents.mcp import MCPServerStdio

    server = MCPServerStdio(
        params={"command": sys.executable, "args": [os.path.join(os.path.dirname(__file__), "mcp_stdio_server.py")],
                "env": {"JOURNAL_TEST_LOG": os.environ[LOG]}},
        name="ledger", cache_tools_list=False)
    async with server:
        agent = Agent(name="ledger", instructions="Charge.", model=_scripted(_ledger_model), mcp_servers=[server])
        result = await runtime.openai_agents.run(agent, request, run_config=CONFIG)
    await ctx.promise("filed")  # resumed later: the whole run replays
    return str(result.final_output)
