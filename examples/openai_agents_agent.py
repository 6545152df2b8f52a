"""An OpenAI Agents SDK support desk, durable under journal: kill it at any point and resume it.

    journal run examples/openai_agents_agent.py:support --input '"Refund order A-17"' --id desk-1

A triage agent hands the customer off to a refunds agent, which looks the order up and
refunds it. `runtime.openai_agents.run` runs them as `agents.Runner.run` would, with every
model call and every tool call (the refunds agent's too) a journaled step; the refund needs
a person's approval, which waits as a promise (`journal resolve desk-1 approve:refund:CALL
true`, printed by `journal run`).

Offline (the default) each agent's model is the SDK's own `ScriptedModel`, answering by
rule from what the run has seen. With OPENAI_API_KEY (and OPENAI_BASE_URL for another
OpenAI-compatible endpoint; the model from OPENAI_MODEL) they are real models.

EXAMPLE_LATENCY=1 makes the offline models and tools slow enough to kill by hand, and
EXAMPLE_CALL_LOG=calls.log records one line per model call or tool call that really ran.
"""

from __future__ import annotations

import os
from typing import Any

from agents import Agent, RunConfig, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from llm import record_call, simulated_latency

import runtime.openai_agents
from runtime import Context


def _real() -> bool:
    return os.environ.get("EXAMPLE_LLM") != "scripted" and bool(
        os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"))


def _outputs(call: ModelCall) -> dict[str, str]:
    """The tool outputs the run has sent the model so far, by call id."""
    items = call.input if isinstance(call.input, list) else []
    return {item["call_id"]: str(item.get("output")) for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"}


def _scripted(rule: Any) -> Any:
    """The agent's model: a real one from the run's config, or the SDK's ScriptedModel following `rule`."""
    if _real():
        return None  # the run's model (RunConfig below)

    async def respond(call: ModelCall) -> Any:
        await simulated_latency()
        record_call("model")
        return rule(_outputs(call))

    return ScriptedModel([ModelStep.respond(respond) for _ in range(50)])


@function_tool
async def lookup_order(order: str) -> str:
    """The order's contents and price."""
    await simulated_latency()
    record_call(f"lookup {order}")
    return f"order {order}: one kettle, 40 EUR, delivered broken"


@function_tool(needs_approval=True)
async def refund(order: str, amount: int) -> str:
    """Refund `amount` on `order` (paid: needs a person's approval)."""
    await simulated_latency()
    record_call(f"refund {order} {amount}")
    return f"refunded {amount} EUR on order {order}"


def _refunds_rule(outputs: dict[str, str]) -> Any:
    if "lookup-1" not in outputs:
        return [function_call("lookup_order", {"order": "A-17"}, call_id="lookup-1")]
    if "refund-1" not in outputs:
        return [function_call("refund", {"order": "A-17", "amount": 40}, call_id="refund-1")]
    return [assistant_message(f"Done: {outputs['refund-1']}. Sorry about the kettle.")]


refunds = Agent(name="refunds", instructions="Look the order up, refund it, and tell the customer.",
                model=_scripted(_refunds_rule), tools=[lookup_order, refund])

triage = Agent(name="triage", instructions="Hand refund requests to the refunds agent.",
               model=_scripted(lambda outputs: [function_call("transfer_to_refunds", {}, call_id="handoff-1")]),
               handoffs=[refunds])


def _config() -> RunConfig:
    if not _real():
        return RunConfig(tracing_disabled=True)
    from agents import OpenAIProvider

    provider = OpenAIProvider(base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY"),
                              use_responses=not os.environ.get("OPENAI_BASE_URL"))
    return RunConfig(model=os.environ.get("OPENAI_MODEL") or "gpt-4o-mini", model_provider=provider,
                     tracing_disabled=bool(os.environ.get("OPENAI_BASE_URL")))


async def support(ctx: Context, request: str) -> str:
    """The handler: one durable run of the agents, from triage to the answer."""
    result = await runtime.openai_agents.run(triage, request, run_config=_config())
    return str(result.final_output)
