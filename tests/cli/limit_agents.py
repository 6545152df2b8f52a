"""Handlers of the limits' process tests: each step counts, in a file shared by every process,
how many steps run at once (under a lock), and records the highest count it saw."""

from __future__ import annotations

import fcntl
import os
import time

from runtime import Context


def _alive(pid: int) -> bool:
    """Whether `pid` still runs. A process killed but not yet reaped by its parent (a zombie,
    for as long as the test takes to wait for it) runs nothing, though it can be signalled.
    (`bench.pgserver.pid_running`, which the worker processes loading this file cannot import.)"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _update(entry: str, enter: bool) -> None:
    """Enter or leave the set of steps running now (those of a killed process no longer count),
    and keep the most ever seen at once."""
    path = os.environ["LIMIT_GAUGE"]
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        lines = f.read().split("\n")
        most = int(lines[0]) if lines and lines[0] else 0
        running = [e for e in lines[1:] if e and _alive(int(e.split()[0])) and e != entry]
        if enter:
            running.append(entry)
        most = max(most, len(running))
        f.seek(0)
        f.truncate()
        f.write("\n".join([str(most), *running]))


def held(i: int) -> int:
    """Runs while holding a unit: counted in, a moment of work, counted out; each run noted."""
    entry = f"{os.getpid()} {i}"
    _update(entry, True)
    try:
        with open(os.environ["LIMIT_GAUGE"] + ".runs", "a") as f:
            f.write(entry + "\n")
        time.sleep(0.05)
    finally:
        _update(entry, False)
    return i


def briefly(i: int) -> int:
    """`held`, a shorter moment of work, no runs noted."""
    entry = f"{os.getpid()} {i}"
    _update(entry, True)
    try:
        time.sleep(0.002)
    finally:
        _update(entry, False)
    return i


async def many_steps(ctx: Context, n: int) -> int:
    """Twenty-five short steps one after another (on PostgreSQL, on their process's share while the limit has room)."""
    for i in range(25):
        await ctx.run(f"step-{i}", briefly, n * 100 + i, limit="db")
    return n


async def three_steps(ctx: Context, n: int) -> int:
    for i in range(3):
        await ctx.run(f"step-{i}", held, n * 10 + i, limit="db")
    return n


def _reported(tokens: int) -> int:
    """Reports `tokens` used; a step named in $BUDGET_BLOCK then stops there (after its report,
    before its end and its charge) until its process is killed."""
    from runtime import current_step

    step = current_step()
    step.used(tokens=tokens)
    with open(os.environ["BUDGET_LOG"], "a") as f:
        f.write(f"{os.getpid()} {step.name}\n")
    if os.environ.get("BUDGET_BLOCK") == step.name:
        deadline = time.monotonic() + 120  # a killed process never gets there; a test never hangs on it
        while time.monotonic() < deadline:
            time.sleep(0.05)
    return tokens


async def budgeted(ctx: Context, n: int) -> int:
    """`n` steps, each reporting 40 tokens."""
    total = 0
    for i in range(n):
        total += await ctx.run(f"call-{i}", _reported, 40)
    return total
