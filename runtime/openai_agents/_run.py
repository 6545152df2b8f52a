"""`run(agent, input, **kwargs)`: `agents.Runner.run` with its model calls, tool calls and MCP
calls as steps of the calling handler, through the SDK's own extension points.

- Models: the run's `model_provider` is wrapped (`JournaledProvider`), and a `Model` instance
  set on an agent or on the `RunConfig` is wrapped in place (`JournaledModel`).
- Function tools: each agent reachable from the starting one (by handoffs, whether `Agent`s
  or `Handoff`s) runs as a copy whose `FunctionTool`s' `on_invoke_tool` is a step, journaled
  with the tool's arguments in its digest; its MCP servers are wrapped too.
- Approvals: a tool that needs approval interrupts the run; each interruption waits on a
  promise named by `approval_name` (the tool and the model's call id, the same on every
  replay). Resolved with `true` (or `{"approve": true}`) it is approved, with `false` (or
  `{"approve": false, "message": ...}`) or a rejection it is rejected, and the run goes on.

The copies keep the originals' names, so the SDK's own bookkeeping (run state, handoffs by
name) sees the agents it was given.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunConfig, Runner, RunResult
from agents.models.interface import Model
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from journal.errors import JournalError
from runtime import PromiseRejected, RetryPolicy, handler_context

from ._mcp import JournaledMCPServer
from ._model import JournaledModel, JournaledProvider


async def run(agent: Agent[Any], input: Any, *, model_retry: RetryPolicy | None = None,
              tool_retry: RetryPolicy | None = None, limit: str | list[str] | None = None,
              **kwargs: Any) -> RunResult:
    """`await agents.Runner.run(agent, input, **kwargs)` inside a handler, durably.

    Every model call and function-tool call (of `agent` and of the agents it hands off to) and
    every MCP call is a journaled step; a tool that needs approval waits on the promise
    `approval_name(item)`. `model_retry` and `tool_retry` are those steps' `RetryPolicy`.
    `limit` names the store's limits every model call takes a unit of (docs/limits.md): its
    estimate is taken from the request, its real usage from the response."""
    ctx = handler_context()
    if ctx is None:
        raise JournalError(
            "runtime.openai_agents.run was called outside a handler, where nothing would be journaled: call it "
            "from `async def handler(ctx, ...)` (Engine.run, journal run, a worker), or call agents.Runner.run "
            "to run the agent without durability"
        )
    given: RunConfig = kwargs.pop("run_config", None) or RunConfig()
    config = dataclasses.replace(
        given,
        model_provider=JournaledProvider(given.model_provider, model_retry, limit),
        model=JournaledModel(given.model, "run", model_retry, limit) if isinstance(given.model, Model) else given.model,
    )
    starting = _Durable(model_retry, tool_retry, limit).agent(agent)
    result = await Runner.run(starting, input, run_config=config, **kwargs)
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            try:
                decision = await ctx.promise(approval_name(item))
            except PromiseRejected as exc:
                state.reject(item, rejection_message=exc.reason)
                continue
            if decision is True or isinstance(decision, dict) and decision.get("approve") is True:
                state.approve(item)
            else:
                message = decision.get("message") if isinstance(decision, dict) else None
                state.reject(item, rejection_message=message if isinstance(message, str) else None)
        result = await Runner.run(starting, state, run_config=config, **kwargs)
    return result


def approval_name(item: Any) -> str:
    """The promise an interruption for approval waits on: `approve:{tool}:{call id}`."""
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return f"approve:{item.tool_name}:{call_id or getattr(raw, 'id', '')}"


class _Durable:
    """Copies of the agents of one run, made once each (handoffs may go round in a circle)."""

    def __init__(self, model_retry: RetryPolicy | None, tool_retry: RetryPolicy | None,
                 limit: str | list[str] | None = None) -> None:
        self._limit = limit
        self._model_retry = model_retry
        self._tool_retry = tool_retry
        self._agents: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        done = self._agents.get(id(agent))
        if done is not None:
            return done
        copy = agent.clone()
        self._agents[id(agent)] = self._agents[id(copy)] = copy
        if isinstance(agent.model, Model) and not isinstance(agent.model, JournaledModel):
            copy.model = JournaledModel(agent.model, agent.name, self._model_retry, self._limit)
        copy.tools = [self._tool(tool) for tool in agent.tools]
        copy.mcp_servers = [server if isinstance(server, JournaledMCPServer) else JournaledMCPServer(server)
                            for server in agent.mcp_servers]
        copy.handoffs = [self.agent(h) if isinstance(h, Agent) else self._handoff(h) for h in agent.handoffs]
        return copy

    def _tool(self, tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted tools run in the model's call; other kinds run as the SDK runs them
        invoke = tool.on_invoke_tool
        name, retry = f"openai_agents.tool:{tool.name}", self._tool_retry

        async def on_invoke_tool(tool_context: Any, arguments: str) -> Any:
            ctx = handler_context()
            if ctx is None:
                return await invoke(tool_context, arguments)

            async def step(_: str) -> Any:
                return _journalable(await invoke(tool_context, arguments))

            # The arguments are the step's, so replay checks the model asked for the same call.
            return await ctx.run(name, step, arguments, retry=retry, type=Any)

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def _handoff(self, handoff: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(context: Any, arguments: str) -> Agent[Any]:
            return self.agent(await invoke(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)


def _journalable(output: Any) -> Any:
    """A tool's output in a form the journal keeps and the SDK takes back: JSON-like values as
    they are, the SDK's structured outputs (Pydantic models) as their dict forms."""
    if output is None or isinstance(output, (str, int, float, bool)):
        return output
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json", exclude_none=True)
    if isinstance(output, (list, tuple)):
        return [_journalable(item) for item in output]
    try:
        return to_jsonable_python(output)
    except Exception:  # noqa: BLE001 - what the SDK would do with it anyway: str()
        return str(output)


__all__ = ["JournaledModel", "approval_name", "run"]
