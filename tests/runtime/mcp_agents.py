"""A real MCP server (the `mcp` package's own `MCPServer`), run in the handler's process, and
handlers that call it through `runtime.mcp.journaled`. Every tool call appends to a log
file, so a test sees from outside how often the server really did the work."""

from __future__ import annotations

import os
import time

from mcp import Client
from mcp.server.mcpserver import MCPServer

from runtime import Context
from runtime.mcp import journaled


def payments_server(log: str) -> MCPServer:
    server = MCPServer("payments")

    def record(line: str) -> None:
        with open(log, "a") as f:
            f.write(line + "\n")

    @server.tool()
    def charge(customer: str, amount: int) -> str:
        """Charge a customer."""
        record(f"charge {customer} {amount}")
        return f"charged {customer} {amount}"

    @server.tool()
    def receipt(customer: str) -> str:
        """Send a receipt."""
        record(f"receipt {customer}")
        return f"receipt sent to {customer}"

    @server.resource("policy://refunds")
    def refunds() -> str:
        return "refunds within 30 days"

    @server.prompt()
    def apology(customer: str) -> str:
        return f"Write an apology to {customer}."

    return server


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} was not created within 60 s")
        time.sleep(0.005)


async def pay(ctx: Context, args: dict) -> dict:
    """List the tools, charge, wait for `args["release"]` (a test kills the process there), send a receipt."""
    async with Client(payments_server(args["log"])) as client:
        session = journaled(client.session)
        tools = await session.list_tools()
        charged = await session.call_tool("charge", {"customer": args["customer"], "amount": 5})
        await ctx.run("hold", _wait_for, args["release"])
        sent = await session.call_tool("receipt", {"customer": args["customer"]})
        policy = await session.read_resource("policy://refunds")
        prompt = await session.get_prompt("apology", {"customer": args["customer"]})
    return {
        "tools": sorted(t.name for t in tools.tools),
        "charged": charged.content[0].text,  # type: ignore[union-attr]
        "sent": sent.content[0].text,  # type: ignore[union-attr]
        "policy": policy.contents[0].text,  # type: ignore[union-attr]
        "prompt": prompt.messages[0].content.text,  # type: ignore[union-attr]
    }
