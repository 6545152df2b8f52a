"""Handlers whose steps stream live output, for tests/runtime/test_streaming.py and the
HTTP and CLI tests of chunks. Each waits for files a test creates, never for a duration."""

from __future__ import annotations

import os
import time

from runtime import Context, RetryPolicy, current_step


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} was not created within 60 s")
        time.sleep(0.005)


async def streamer(ctx: Context, args: dict) -> str:
    """A step that emits `args["chunks"]` chunks, then waits for `args["release"]` before it returns."""

    def answer() -> str:
        step = current_step()
        for n in range(args["chunks"]):
            step.emit(f"token-{n} ")
        if args.get("emitted"):
            with open(args["emitted"], "w"):
                pass
        _wait_for(args["release"])
        return "answered"

    head = await ctx.run("plan", lambda: "planned")
    return head + " " + await ctx.run("answer", answer)


async def flaky_streamer(ctx: Context, args: dict) -> str:
    """Attempt 1 emits two chunks and fails; attempt 2 emits three and returns."""

    def answer() -> str:
        step = current_step()
        if step.attempt == 1:
            step.emit("half ")
            step.emit("a thought")
            raise ConnectionError("the model's stream broke off")
        for word in ("a ", "whole ", "answer"):
            step.emit(word)
        return "answered"

    return await ctx.run("answer", answer, retry=RetryPolicy(max_attempts=2, initial_interval=0.01))


async def binary_streamer(ctx: Context, args: dict) -> int:
    """Bytes, and one chunk larger than a chunk may be (it arrives in pieces)."""

    def answer() -> int:
        step = current_step()
        step.emit(b"\x00\x01raw")
        step.emit("x" * 5000)
        return 2

    return await ctx.run("answer", answer)


async def two_halves(ctx: Context, args: dict) -> str:
    """Emits an event, then a step that streams "a b c ", waits for `args["half"]`, streams
    "d e " and returns once `args["release"]` exists: an answer a follower is cut off from in
    the middle."""
    await ctx.emit("thinking")

    def answer() -> str:
        step = current_step()
        for word in ("a ", "b ", "c "):
            step.emit(word)
        _wait_for(args["half"])
        for word in ("d ", "e "):
            step.emit(word)
        _wait_for(args["release"])
        return "a b c d e"

    return await ctx.run("answer", answer)
