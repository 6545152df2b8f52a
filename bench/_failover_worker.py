"""A worker that counts what its store tells the runtime: `python -m bench._failover_worker JSON`.

It is `journal worker` (a store that waits for its server without limit, `Engine.serve`)
with one addition: every answer the store gives is looked at, and each `LeaseLost` and
"already journaled" refusal is counted. Through a proxy that only drops commit answers
(no other worker takes anything over), every one of them would be a false report about
the worker's own committed write. The counts go to `JSON["out"]` when SIGTERM stops it.
"""

from __future__ import annotations

import collections
import json
import signal
import sys
from typing import Any

import anyio

from journal import PostgresStore
from journal.errors import JournalError, LeaseLost
from runtime import Engine

from ._failover_agents import steady


def _count(counts: collections.Counter[str], results: Any) -> Any:
    for result in results or ():
        if isinstance(result, LeaseLost):
            counts["LeaseLost"] += 1
        elif isinstance(result, JournalError) and "already journaled" in str(result):
            counts["already journaled"] += 1
    return results


async def main(args: dict[str, Any]) -> None:
    counts: collections.Counter[str] = collections.Counter()
    store = PostgresStore(args["db"], reconnect_for=None)
    apply, apply_async = store.apply, store.apply_async

    def counted_apply(ops: Any, *, durable: bool = True) -> Any:
        return _count(counts, apply(ops, durable=durable))

    async def counted_apply_async(ops: Any, **options: Any) -> Any:
        return _count(counts, await apply_async(ops, **options))

    store.apply = counted_apply  # type: ignore[method-assign]  # counting what the runtime is told
    store.apply_async = counted_apply_async  # type: ignore[method-assign]
    try:
        engine = Engine(store, handlers={"steady": steady}, lease_ttl=args.get("lease_ttl", 30.0))
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                async def stop() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                        async for _ in signals:
                            scope.cancel()

                tg.start_soon(stop)
                print("ready", flush=True)
                await engine.serve(concurrency=args["concurrency"])
    finally:
        store.wait_for_server(5.0)
        store.close()
        with open(args["out"], "w") as f:
            json.dump(dict(counts), f)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
