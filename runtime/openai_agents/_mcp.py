"""An Agents SDK `MCPServer` whose calls are steps: listing and calling tools, listing and getting
prompts, journaled as `runtime.mcp` journals a session's (`runtime/mcp/_session.py`)."""

from __future__ import annotations

from typing import Any

import mcp.types as types
from agents.mcp import MCPServer

from runtime.mcp import journal_call


class JournaledMCPServer(MCPServer):
    """`server`, with `list_tools`, `call_tool`, `list_prompts` and `get_prompt` as steps named
    `{server.name}.list_tools` and so on. Connecting and cleaning up are the server's own."""

    def __init__(self, server: MCPServer) -> None:
        # The SDK reads the server's settings (approval policy, structured content, ...) from it.
        self.__dict__.update(server.__dict__)
        self.server = server

    async def connect(self) -> None:
        await self.server.connect()  # type: ignore[no-untyped-call]  # (the SDK leaves it unannotated)

    @property
    def name(self) -> str:
        return self.server.name

    async def cleanup(self) -> None:
        await self.server.cleanup()  # type: ignore[no-untyped-call]  # (the SDK leaves it unannotated)

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[types.Tool]:
        async def listed() -> types.ListToolsResult:
            return types.ListToolsResult(tools=await self.server.list_tools(run_context, agent))

        return (await journal_call(f"{self.name}.list_tools", types.ListToolsResult, listed, ())).tools

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None) -> types.CallToolResult:
        async def called(name: str, args: dict[str, Any] | None) -> types.CallToolResult:
            return await self.server.call_tool(name, args, meta)

        return await journal_call(f"{self.name}.call_tool:{tool_name}", types.CallToolResult, called,
                                  (tool_name, arguments))

    async def list_prompts(self) -> types.ListPromptsResult:
        return await journal_call(f"{self.name}.list_prompts", types.ListPromptsResult, self.server.list_prompts, ())

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> types.GetPromptResult:
        return await journal_call(f"{self.name}.get_prompt:{name}", types.GetPromptResult, self.server.get_prompt,
                                  (name, arguments))

    @property
    def cached_tools(self) -> list[types.Tool] | None:
        return self.server.cached_tools
