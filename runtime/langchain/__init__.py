"""LangChain agents on journal (extra `journal-agents[langchain]`).

    from langchain.agents import create_agent
    from runtime.langchain import JournalMiddleware

    agent = create_agent(model, tools, middleware=[JournalMiddleware()])

    async def handler(ctx, question: str) -> str:
        state = await agent.ainvoke({"messages": [{"role": "user", "content": question}]})
        return state["messages"][-1].content

Inside a handler every model call of the agent is a journaled step (`langchain.model`) and
every tool call one too (`langchain.tool:{tool}`); after a crash the resumed handler replays
the agent without calling the model or the tools again. `run(agent, input)` also waits on
each human-in-the-loop interrupt as the promise `langchain.interrupt:{n}`, answered with
`journal resolve ID langchain.interrupt:1 true` (or LangChain's own `{"decisions": [...]}`)."""

from ._middleware import JournalMiddleware as JournalMiddleware
from ._run import run as run

__all__ = ("JournalMiddleware", "run")
