"""Handlers importable by path, for tests that run them in other processes."""

import os

import anyio

from runtime import Context, current_step


def _effect(path: str, name: str) -> str:
    # One line per real execution, fsynced, so a SIGKILL cannot hide a side effect.
    with open(path, "a") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    return name


async def counted_steps(ctx: Context, args: dict) -> list:
    out = []
    for i in range(args["steps"]):
        out.append(await ctx.run(f"step-{i}", _effect, args["log"], f"step-{i}"))
        if args.get("pause"):
            await anyio.sleep(args["pause"])
        if i + 1 == args.get("hold_after"):  # busy until the file `release` exists
            while not os.path.exists(args["release"]):
                await anyio.sleep(0.01)
    return out


async def key_echo(ctx: Context, log: str) -> str:
    return await ctx.run("keyed", lambda: current_step().idempotency_key)
