"""A real MCP server (the `mcp` package's own) on stdio, for the Agents SDK tests: its tool
appends to the file named by JOURNAL_TEST_LOG."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("ledger")


@server.tool()
def charge(customer: str) -> str:
    """Charge a customer."""
    with open(os.environ["JOURNAL_TEST_LOG"], "a") as f:
        f.write(f"mcp charge {customer}\n")
    return f"charged {customer}"


if __name__ == "__main__":
    server.run("stdio")
