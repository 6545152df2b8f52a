"""The OpenAI Agents SDK on journal (extra `journal-agents[openai-agents]`).

    from agents import Agent, function_tool
    import runtime.openai_agents

    async def support(ctx, question: str) -> str:
        result = await runtime.openai_agents.run(triage, question)
        return result.final_output

`run(agent, input, **kwargs)` takes what `agents.Runner.run` takes and returns what it
returns. Inside a handler every model call and every function-tool call, of the agents
handed off to as well, is a journaled step, and so is every call to an agent's MCP
servers; a tool that needs approval waits on a promise (`journal resolve ID NAME true`).
After a crash the resumed handler replays the run: nothing that was journaled is called
again."""

from ._run import approval_name as approval_name
from ._run import run as run

__all__ = ("approval_name", "run")
