"""The handler of the PostgreSQL fault tests (`tests/cli/test_postgres_faults.py`).

Each step appends `ID STEP PID` to the side-effect file named by the input, one line per
real execution, so the test can count every step that ran and every one that ran twice.
"""

from __future__ import annotations

import os

import anyio

from runtime import Context


async def effect(log: str, invocation_id: str, step: int, work: float) -> int:
    await anyio.sleep(work)  # the step's work (a model call, a tool): what is in flight when a fault hits
    with open(log, "a", encoding="utf-8") as f:  # one short O_APPEND write: whole lines, from any process
        f.write(f"{invocation_id} {step} {os.getpid()}\n")
    return step


async def chain(ctx: Context, job: dict) -> int:
    """`job["steps"]` steps one after another, each a side effect."""
    done = 0
    for step in range(job["steps"]):
        done += await ctx.run(f"step-{step}", effect, job["log"], ctx.invocation_id, step, job.get("work", 0.01)) >= 0
    return done
