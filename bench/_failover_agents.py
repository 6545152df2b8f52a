"""The handler `python -m bench.failover` runs under its faults, and the log it keeps.

Each step logs `start` when it begins, works a while, and returns a token of its own (a
fresh uuid), which is what gets journaled; the handler logs `ack` with that token once
`ctx.run` has returned it, i.e. once the step's commit was acknowledged. From the log the
benchmark counts the steps in flight at each fault, the step executions repeated, and the
acknowledged steps the journal no longer holds (an `ack` token absent from every entry).
"""

from __future__ import annotations

import os
import time
import uuid

import anyio

from runtime import Context


def line(log: str, kind: str, invocation_id: str, step: int, token: str) -> None:
    with open(log, "a", encoding="utf-8") as f:  # one short O_APPEND write: whole lines from every process
        f.write(f"{time.time():.6f} {kind} {invocation_id} {step} {token} {os.getpid()}\n")


async def _step(log: str, invocation_id: str, step: int, work: float) -> str:
    line(log, "start", invocation_id, step, "-")
    await anyio.sleep(work)  # the step's work: a model call, a tool
    return uuid.uuid4().hex


async def steady(ctx: Context, job: dict) -> int:
    """`job["steps"]` steps of `job["work"]` seconds each."""
    for step in range(job["steps"]):
        token = await ctx.run(f"s{step}", _step, job["log"], ctx.invocation_id, step, job["work"])
        line(job["log"], "ack", ctx.invocation_id, step, token)
    return job["steps"]
