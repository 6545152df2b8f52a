"""The worker process of test_crash_processes.py, and the handler it runs.

    python -m tests.property.crash_worker DB DURABILITY

It opens the store, prints "ready", waits for a line on stdin (so the test can start
workers ahead of time and pay Python's start-up while another one works), then resumes
every runnable invocation until none is left, and exits. The test SIGKILLs it at a random
moment.

Every execution of a step function appends `E <invocation> <seq> <name> <pid>` to the file
named by $CRASH_LOG, and the handler appends `C <invocation> <seq> <name> <pid>` once
`ctx.run` has returned (the step's outcome is committed). Both are fsynced appends, so
the file is the order in which side effects happened and commits were seen.
"""

from __future__ import annotations

import os
import sys
import time

import anyio

from runtime import Context, current_step


def _record(line: str) -> None:
    fd = os.open(os.environ["CRASH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def effect(n: int, i: int) -> dict:
    info = current_step()
    _record(f"E {info.invocation_id} {info.seq} {info.name} {os.getpid()}")
    time.sleep(0.001 * (i % 3))  # widen the window between the side effect and its commit
    return {"v": n * 10 + i, "seq": info.seq, "pid": os.getpid()}


async def crash_agent(ctx: Context, n: int) -> int:
    total = 0

    async def step(name: str, i: int) -> None:
        nonlocal total
        out = await ctx.run(name, effect, n, i)
        _record(f"C {ctx.invocation_id} {out['seq']} {name} {os.getpid()}")
        total += out["v"]

    async def branch(name: str, i: int) -> None:
        await ctx.emit({"branch": "starting"})  # the same first operation in both branches
        await step(name, i)

    for i in range(3):
        await step(f"step{i}", i)
    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "left", 3)
        tg.start_soon(branch, "right", 4)
    await ctx.sleep(0.001)
    await step("last", 5)
    return total


STEPS = ["step0", "step1", "step2", "left", "right", "last"]


def expected(n: int) -> int:
    return sum(n * 10 + i for i in range(6))


async def _work(path: str, durability: str) -> None:
    from runtime import Engine

    async with Engine.open(path, durability=durability, lease_ttl=2.0) as engine:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while engine.runnable():
            await engine.recover(concurrency=8)


if __name__ == "__main__":
    anyio.run(_work, sys.argv[1], sys.argv[2])
