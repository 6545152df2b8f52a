"""The handlers the workloads run. Importable by path (`bench._agents:...`) so a restarted
process can load them from entry 0, as it would a user's agent."""

from __future__ import annotations

import os
import time

import msgspec

from runtime import Context, RetryPolicy

PAYLOAD = b"x" * 100

# Seconds each invocation spent in its step loop, by invocation id (for W1).
loop_seconds: dict[str, float] = {}
# When each invocation reached its promise (time.perf_counter(), for W4).
reached_promise: dict[str, float] = {}


def noop() -> bytes:
    """A step with no work that returns 100 bytes."""
    return PAYLOAD


async def async_noop() -> bytes:
    """`noop` as an async function: a step that runs on the event loop by itself."""
    return PAYLOAD


async def steps(ctx: Context, n: int) -> int:
    """W1/W2: `n` sequential no-op steps; the plain function known not to block runs on
    the loop (`inline=True`), as the runtime's own cost per step is what W1 measures."""
    started = time.perf_counter()
    for _ in range(n):
        await ctx.run("step", noop, inline=True)
    loop_seconds[ctx.invocation_id] = time.perf_counter() - started
    return n


_ONE_ATTEMPT = RetryPolicy(max_attempts=1)


async def steps_through_attempts(ctx: Context, n: int) -> int:
    """`steps`, each given a retry policy of one attempt: the same work through the general
    attempts loop (`runtime/_handler/_steps.py::attempts`) instead of the first attempt inlined in
    `ctx.run`, which is what that inlined copy saves."""
    for _ in range(n):
        await ctx.run("step", noop, inline=True, retry=_ONE_ATTEMPT)
    return n


async def threaded_steps(ctx: Context, n: int) -> int:
    """W1 with a plain step function as a handler writes it: run on a step thread."""
    started = time.perf_counter()
    for _ in range(n):
        await ctx.run("step", noop)
    loop_seconds[ctx.invocation_id] = time.perf_counter() - started
    return n


async def async_steps(ctx: Context, n: int) -> int:
    """W1 with an `async def` step function."""
    started = time.perf_counter()
    for _ in range(n):
        await ctx.run("step", async_noop)
    loop_seconds[ctx.invocation_id] = time.perf_counter() - started
    return n


class LinesInput(msgspec.Struct):
    path: str
    n: int


def append_line(path: str, i: int) -> int:
    """W3's side effect: append line `i` to a file. A crash test may hold the process here."""
    with open(path, "a") as f:
        f.write(f"{i}\n")
    hold = os.environ.get("BENCH_HOLD_AT")
    if hold is not None and int(hold) == i:
        # Tell the parent the side effect happened, then wait for its SIGKILL: the step's
        # result is not journaled yet, the worst moment to die.
        os.write(int(os.environ["BENCH_SIGNAL_FD"]), b"k")
        time.sleep(120)
    return i


async def lines(ctx: Context, job: LinesInput) -> int:
    """W3: `n` steps, each appending one line to a file."""
    for i in range(job.n):
        await ctx.run("line", append_line, job.path, i)
    return job.n


async def long_then_promise(ctx: Context, n: int) -> str:
    """W4: `n` journaled steps, then wait for a promise."""
    for _ in range(n):
        await ctx.run("step", noop)
    reached_promise[ctx.invocation_id] = time.perf_counter()
    answer = await ctx.promise("go", type=str)
    return answer


LLM_SECONDS = 0.02
ANSWER = b"y" * 500  # a short model answer


async def simulated_llm(prompt: str) -> bytes:
    """A model call: 20 ms of waiting on the network, no CPU."""
    import anyio

    await anyio.sleep(LLM_SECONDS)
    return ANSWER


async def agent_turns(ctx: Context, n: int) -> int:
    """W5: an agent of `n` steps, each awaiting a simulated 20 ms model call."""
    for i in range(n):
        await ctx.run("llm", simulated_llm, f"turn {i}")
    return n


def paced_effect(log: str, i: int) -> int:
    """The takeover workload's step: 20 ms of work, then one line saying it ran."""
    time.sleep(0.02)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{i}\n".encode())
    finally:
        os.close(fd)
    return i


async def paced(ctx: Context, job: LinesInput) -> int:
    """Takeover: `n` steps of 20 ms, each logging `invocation seq` once it ran."""
    for i in range(job.n):
        await ctx.run("paced", paced_effect, job.path, i)
    return job.n


async def limited_steps(ctx: Context, n: int) -> int:
    """W1 with every step under the limit `bench` (`bench/limits.py`): what acquiring and
    releasing an uncontended unit adds to a step."""
    started = time.perf_counter()
    for _ in range(n):
        await ctx.run("step", noop, inline=True, limit="bench")
    loop_seconds[ctx.invocation_id] = time.perf_counter() - started
    return n
