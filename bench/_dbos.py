"""DBOS Transact doing W1 and W2's work, in a process of its own (DBOS is a singleton):
`python -m bench._dbos URL INVOCATIONS STEPS` prints one JSON line.

Its system database is URL's database on the same server as journal's. DBOS is not a
dependency of journal: `pip install -e '.[bench]'` installs it for the benchmarks only.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from dbos import DBOS, DBOSConfig

PAYLOAD = "x" * 100  # the 100-byte step result of bench._agents.steps


@DBOS.step()
async def step(i: int) -> str:
    return PAYLOAD


@DBOS.workflow()
async def steps(n: int) -> int:
    for i in range(n):
        await step(i)
    return n


async def _main(invocations: int, n: int) -> dict:
    started = time.perf_counter()
    await steps(n)  # W1: one invocation of sequential steps
    w1 = (time.perf_counter() - started) / n * 1e6
    started = time.perf_counter()
    handles = [await DBOS.start_workflow_async(steps, n) for _ in range(invocations)]
    for handle in handles:
        await handle.get_result()
    elapsed = time.perf_counter() - started
    return {"w1_us_per_step": w1, "w2_steps_per_s": invocations * n / elapsed, "w2_seconds": elapsed}


def main() -> None:
    url, invocations, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    config: DBOSConfig = {"name": "journal-bench", "system_database_url": url, "run_admin_server": False,
                          "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()
    try:
        print(json.dumps(asyncio.run(_main(invocations, n))))
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main()
