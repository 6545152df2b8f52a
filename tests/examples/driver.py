"""Runs an example in a process of its own, through `runtime.Engine`, for the crash tests.

    python driver.py run TARGET JSON ID     start (or attach to) invocation ID and run it
    python driver.py resume ID              replay ID's journal and continue it
    python driver.py resolve ID NAME JSON   deliver a promise

The store is $JOURNAL_DB. Prints the outcome as one JSON object.
"""

from __future__ import annotations

import json
import sys

import anyio
import msgspec

from runtime import Engine


async def main(argv: list[str]) -> None:
    command, *args = argv
    async with Engine.open() as engine:
        if command == "run":
            target, raw, invocation_id = args
            outcome = await engine.run(target, json.loads(raw), id=invocation_id, lax_input=True)
        elif command == "resume":
            outcome = await engine.resume(args[0])
        elif command == "resolve":
            invocation_id, name, raw = args
            await engine.resolve(invocation_id, name, json.loads(raw))
            outcome = await engine.get(invocation_id)
        else:
            raise SystemExit(f"unknown command {command!r}")
    print(msgspec.json.encode(outcome).decode(), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
