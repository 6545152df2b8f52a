"""MCP on journal (extra `journal-agents[mcp]`): `journaled(session)` wraps an `mcp.ClientSession`
so that the calls a handler makes to an MCP server are journaled steps.

    from runtime.mcp import journaled

    async def agent(ctx, question):
        async with mcp.ClientSession(read, write) as session:
            await session.initialize()
            tools = journaled(session)
            listing = await tools.list_tools()                       # step `mcp.list_tools`
            answer = await tools.call_tool("search", {"q": question})  # step `mcp.call_tool:search`

After a crash the resumed handler gets each recorded result back without calling the
server again: a tool that ran is not run twice."""

from ._session import JournaledSession as JournaledSession
from ._session import journal_call as journal_call
from ._session import journaled as journaled

__all__ = ("JournaledSession", "journal_call", "journaled")
