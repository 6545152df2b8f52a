"""Pydantic AI on journal (extra `journal-agents[pydantic-ai]`): `JournalDurability()`, a durability
capability on Pydantic AI's public backend API (`pydantic_ai.durable_exec`).

    from pydantic_ai import Agent
    from runtime.pydantic_ai import JournalDurability

    agent = Agent("openai:gpt-5.2", name="support", tools=[lookup], capabilities=[JournalDurability()])

    async def support(ctx, question: str) -> str:
        return (await agent.run(question)).output

Inside a handler, `agent.run(...)` journals every model request, every function, MCP and
dynamic tool call and the discovery of MCP tools as a step, under Pydantic AI's own
operation names; parallel tool calls run in parallel; a wait for external input
(`HandleDeferredToolCalls` with a handler that takes a resume token) is a promise, answered with `journal resolve`; with `stream=True` the text
the model streams reaches followers live (`Engine.stream`, the HTTP events stream,
`journal tail -f`). Outside a handler the agent refuses to run instead of running without
durability."""

from ._backend import StepConfig as StepConfig
from ._durability import JournalDurability as JournalDurability

__all__ = ("JournalDurability", "StepConfig")
