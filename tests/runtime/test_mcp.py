"""`runtime.mcp.journaled`: calls to a real MCP server (the `mcp` package's own, in the
handler's process) are steps, and a call that returned before a SIGKILL is not made again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import anyio
import pytest

from journal import decode_entry, open_store
from journal.errors import JournalError
from runtime import Engine
from runtime.mcp import journaled

from ..waiting import wait_until
from .mcp_agents import payments_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUN = textwrap.dedent("""
    import sys, json, anyio
    from runtime import Engine
    from tests.runtime.mcp_agents import pay
    async def main():
        db, action, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        async with Engine.open(db) as engine:
            out = await (engine.run(pay, args, id="p") if action == "run" else engine.resume("p"))
            print(json.dumps({"status": str(out.status), "result": out.result}), flush=True)
    anyio.run(main)
""")


def _spawn(db: str, action: str, args: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUN, db, action, json.dumps(args)], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)


def _step_names(db: str) -> list[str]:
    with open_store(db) as store:
        return [getattr(decode_entry(data), "name", None) for _, data in store.entries("p")]


def test_a_tool_call_killed_after_it_returned_is_not_made_again_on_resume(tmp_path):
    db, log = str(tmp_path / "db"), tmp_path / "effects.log"
    args = {"log": str(log), "customer": "ada", "release": str(tmp_path / "release")}
    proc = _spawn(db, "run", args)
    wait_until(lambda: "mcp.call_tool:charge" in _step_names(db) or proc.poll() is not None,
               "the charge to be journaled")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert log.read_text().splitlines() == ["charge ada 5"]
    (tmp_path / "release").touch()
    resumed = _spawn(db, "resume", args)
    out, _ = resumed.communicate(timeout=120)
    done = json.loads(out.splitlines()[-1])
    assert done["status"] == "completed"
    assert done["result"] == {"tools": ["charge", "receipt"], "charged": "charged ada 5",
                              "sent": "receipt sent to ada", "policy": "refunds within 30 days",
                              "prompt": "Write an apology to ada."}
    assert log.read_text().splitlines() == ["charge ada 5", "receipt ada"]  # charged once
    names = _step_names(db)
    assert names[1:-1] == ["mcp.list_tools", "mcp.call_tool:charge", "hold", "mcp.call_tool:receipt",
                           "mcp.read_resource", "mcp.get_prompt:apology"]


def test_replay_checks_the_arguments_of_a_call(tmp_path):
    """A resumed handler that calls the tool with other arguments diverges instead of being handed
    the result recorded for the first ones."""
    log = tmp_path / "effects.log"

    async def handler(ctx, amount: int) -> str:
        from mcp import Client

        async with Client(payments_server(str(log))) as client:
            result = await journaled(client.session).call_tool("charge", {"customer": "bo", "amount": amount})
        await ctx.promise("go")
        return result.content[0].text

    async def main() -> None:
        async with Engine.open(str(tmp_path / "db")) as engine:
            assert (await engine.run(handler, 5, id="a")).status == "suspended"
            await engine.resolve("a", "go", True)
            assert (await engine.resume("a", handler)).result == "charged bo 5"
            # The same journal under code that now charges 7:
            await engine.start(handler, 5, id="b")
            assert (await engine.resume("b", handler)).status == "suspended"

            async def changed(ctx, amount: int) -> str:
                return await handler(ctx, amount + 2)

            await engine.resolve("b", "go", True)
            assert (await engine.resume("b", changed)).status == "diverged"

    anyio.run(main)
    assert log.read_text().splitlines() == ["charge bo 5", "charge bo 5"]  # not charged 7


def test_outside_a_handler_a_journaled_session_refuses_to_call(tmp_path):
    async def main() -> None:
        from mcp import Client

        async with Client(payments_server(str(tmp_path / "log"))) as client:
            with pytest.raises(JournalError, match="outside a handler"):
                await journaled(client.session).call_tool("charge", {"customer": "x", "amount": 1})
            assert (await journaled(client.session).session.list_tools()).tools  # the session itself still works

    anyio.run(main)
    assert not (tmp_path / "log").exists()
