"""`python -m bench.step_path`: the functions and files one live step passes through.

Not a timing: a profiler trace (`sys.setprofile`, and `threading.setprofile` for the
store's commit threads) of one `ctx.run` on LMDB at `sync` durability, in the steady state
of a run of sequential steps (the shortest of seven traced steps), counting the calls made into journal's own packages
(`journal/`, `runtime/`): how many functions, in how many files, and how often the path
changes file, and how often storage calls back into a file it came from (a call into
`journal/` made from another file while that file is already further up the stack of storage
calls, as a base class calling its subclass back in the middle of an append). A path that hops
back and forth between modules is one a reader has to follow across them; this is the map of it.

    python -m bench.step_path            # counts
    python -m bench.step_path --list     # and every call, in order
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import functools
import itertools
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import anyio

from runtime import Engine

_ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = tuple(str(_ROOT / name) + os.sep for name in ("journal", "runtime"))
_STORAGE = str(_ROOT / "journal") + os.sep
_STEPS = 20  # untraced first: caches warm, the committer's thread running
_TRACED = 7


def _noop() -> None:
    return None


@functools.cache
def _start(code: CodeType) -> int:
    return next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")


def trace_one_step(durability: str = "sync") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """`(file relative to the project, function)` of each call into journal's packages, in
    order, and of each call by which storage came back into a file up its stack."""
    calls: list[tuple[str, str]] = []
    callbacks: list[tuple[str, str]] = []  # storage calls back into a file up its stack
    traces: list[tuple[list[tuple[str, str]], list[tuple[str, str]]]] = []
    tracing = False
    handler: asyncio.Task[Any] | None = None  # the traced step's task; another task's calls are not its path

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        # A coroutine resumed after an await is reported as a call again: count only frames
        # that start here (at their code's first RESUME), which leaves out the frames
        # that awaited this step from before it (Engine.run, the executor's loop).
        if (tracing and event == "call" and frame.f_code.co_filename.startswith(_PACKAGES)
                and frame.f_lasti <= _start(frame.f_code) and not _another_task()):
            calls.append((os.path.relpath(frame.f_code.co_filename, _ROOT), frame.f_code.co_qualname))
            if frame.f_code.co_filename.startswith(_STORAGE):
                _note_callback(frame)

    def _another_task() -> bool:
        # A turn of the loop inside the step (`ctx.run` gives one about once a millisecond,
        # which on a loaded machine is every step) runs other tasks: a lease renewal, say.
        # The loop's callbacks (a thread's reply) run in no task, and are the step's.
        try:
            running = asyncio.current_task()
        except RuntimeError:  # not the loop's thread: the store's threads work for the step
            return False
        return running is not None and running is not handler

    def _note_callback(frame: FrameType) -> None:
        here, callers = frame.f_code.co_filename, []
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename.startswith(_STORAGE):
            callers.append(caller.f_code.co_filename)
            caller = caller.f_back
        if callers and callers[0] != here and here in callers[1:]:
            callbacks.append(calls[-1])

    async def agent(ctx: Any) -> None:
        nonlocal tracing, calls, callbacks, handler
        handler = asyncio.current_task()
        for i in range(_STEPS):
            await ctx.run(f"s{i}", _noop, inline=True)
        for i in range(_TRACED):
            calls, callbacks = [], []
            tracing = True
            await ctx.run(f"traced{i}", _noop, inline=True)
            tracing = False
            traces.append((calls, callbacks))

    async def main(path: str) -> None:
        async with Engine.open(path, durability=durability) as engine:
            await engine.run(agent, id="traced")

    with tempfile.TemporaryDirectory() as where:
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            anyio.run(main, os.path.join(where, "db"))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    # A background tick run as a callback may still fall inside a traced step and add its
    # calls; it never takes any away, so the shortest trace is the step's own path.
    return min(traces, key=lambda trace: len(trace[0]))


def summary(calls: list[tuple[str, str]]) -> dict[str, int]:
    files = [file for file, _ in calls]
    changes = sum(1 for before, after in itertools.pairwise(files) if before != after)
    return {"calls": len(calls), "functions": len(set(calls)), "files": len(set(files)), "changes_of_file": changes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="also print every call, in order")
    parser.add_argument("--durability", choices=["sync", "async", "exit"], default="sync")
    args = parser.parse_args()
    calls, callbacks = trace_one_step(args.durability)
    if args.list:
        for file, function in calls:
            print(f"  {file}::{function}")
    counts = summary(calls)
    print(f"one live step ({args.durability}, LMDB): {counts['functions']} functions in {counts['files']} files, "
          f"{counts['changes_of_file']} changes of file ({counts['calls']} calls); storage called back into a "
          f"file up its stack {len(callbacks)} times" + "".join(f"\n  back into {f}::{fn}" for f, fn in callbacks))


if __name__ == "__main__":
    main()
