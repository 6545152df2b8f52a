"""Handlers the CLI tests run by path (`tests/cli/cli_agents.py:NAME`).

Side effects are counted in a log file named by the input, one line per real call, so a
test can tell a step that ran from a step that was replayed.
"""

from __future__ import annotations

import os
import time

import anyio
import msgspec

from runtime import Cancelled, Context, TerminalError


def record(log: str, what: str) -> str:
    """A step's side effect: one line in `log`."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(what + "\n")
    return what


async def greet(ctx: Context, name: str) -> str:
    return await ctx.run("hello", lambda: f"hello {name}")


async def no_input(ctx: Context) -> int:
    return await ctx.run("answer", lambda: 42)


class Order(msgspec.Struct):
    item: str
    qty: int


async def order(ctx: Context, order: Order) -> dict:
    total = await ctx.run("price", lambda: order.qty * 3)
    return {"item": order.item, "total": total}


async def pipeline(ctx: Context, input: dict) -> list:
    """Four steps, each feeding the next, each logging its real execution."""
    log = input["log"]
    a = await ctx.run("a", record, log, "a")
    b = await ctx.run("b", record, log, "b")
    c = await ctx.run("c", record, log, f"c({b})")
    d = await ctx.run("d", record, log, "d")
    return [a, b, c, d]


async def approval(ctx: Context, input: dict) -> dict:
    """Draft, wait for a human, publish."""
    log = input["log"]
    draft = await ctx.run("draft", record, log, f"draft about {input['topic']}")
    decision = await ctx.promise("approval")
    if decision is True:  # a plain `true` approves too
        decision = {"approved": True}
    if not decision.get("approved"):
        raise TerminalError(f"the reviewer said no: {decision.get('why', 'no reason')}")
    published = await ctx.run("publish", record, log, "published")
    return {"draft": draft, "by": decision.get("by"), "published": published}


async def refuses(ctx: Context, input: dict) -> str:
    def model() -> str:
        raise TerminalError("the model refused")

    return await ctx.run("ask", model)


async def timer(ctx: Context) -> str:
    await ctx.sleep(3600)
    return "woke"


async def slow(ctx: Context, input: dict) -> str:
    """Logs `first`, then blocks in `wait` on its first run (creating the marker file to say so)."""
    log, marker = input["log"], input["marker"]
    await ctx.run("first", record, log, "first")
    return await ctx.run("wait", _block_once, log, marker)


async def gated(ctx: Context, input: dict) -> str:
    """`slow`, once promise `go` is resolved."""
    await ctx.promise("go")
    return await slow(ctx, input)


async def _block_once(log: str, marker: str) -> str:
    if os.path.exists(marker):
        return record(log, "wait (again)")
    record(log, "wait")
    with open(marker, "w"):
        pass
    await anyio.sleep(60)  # interrupted here
    return "never"


async def cancellable(ctx: Context, input: dict) -> str:
    """Waits for approval; on cancellation runs a compensating step."""
    from runtime import Cancelled

    log = input["log"]
    await ctx.run("reserve", record, log, "reserve")
    try:
        await ctx.promise("go")
    except Cancelled:
        await ctx.run("release", record, log, "release")
        raise
    return "done"


async def sleeps_inline(ctx: Context, input: dict) -> str:
    """Logs `started`, then sleeps inline (under the 60 s limit): only a cancel request ends it early."""
    await ctx.run("started", record, input["log"], "started")
    await ctx.sleep(50)
    return "slept"


def not_async(ctx: Context, input: dict) -> str:
    return "sync"


NOT_A_FUNCTION = 3


# -- threads, children and continue-as-new (journal state, show's links) -------------------------


def _append(history: list, items: list) -> list:
    return [*history, *items]


async def turn(ctx: Context, message: str) -> list:
    """A thread's turn: read the history, answer, append both (needs --key)."""
    history = await ctx.state.get("history", default=[])
    answer = await ctx.run("answer", lambda: f"{message}, after {len(history) // 2} turns")
    ctx.state.set("turns", len(history) // 2 + 1)
    return ctx.state.update("history", [message, answer], reducer=_append, default=[])


async def waiting_turn(ctx: Context, message: str) -> str:
    """A thread's turn that waits for promise `go` (holds its key's queue meanwhile)."""
    await ctx.promise("go")
    ctx.state.update("history", [message], reducer=_append, default=[])
    return message


async def child(ctx: Context, n: int) -> int:
    return await ctx.run("double", lambda: n * 2)


async def parent(ctx: Context, n: int) -> list:
    """Awaits one child and sends another (ids `<parent>.kid` and `<parent>.sent`)."""
    got = await ctx.call(child, n, id=f"{ctx.invocation_id}.kid")
    sent = await ctx.send(child, n + 1, id=f"{ctx.invocation_id}.sent")
    return [got, sent]


async def countdown(ctx: Context, n: int) -> dict:
    """Continues as new until `n` reaches 0: a chain of n + 1 invocations."""
    left = await ctx.run("tick", lambda: n - 1)
    if left >= 0:
        ctx.continue_as_new(left)
    return {"liftoff": True}


async def held_turn(ctx: Context, input: dict) -> str:
    """A thread's turn that holds its key until the file `input["release"]` exists."""
    await ctx.run("hold", _wait_for_file, input["release"])
    ctx.state.update("history", ["held"], reducer=_append, default=[])
    return "released"


async def _wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        await anyio.sleep(0.02)


async def approving_child(ctx: Context, n: int) -> int:
    """Waits for promise `approval`, then doubles `n`."""
    approved = await ctx.promise("approval")
    return n * 2 if approved else 0


async def waiting_parent(ctx: Context, n: int) -> int:
    """Awaits a child (id `<parent>.kid`) that waits for an approval."""
    return await ctx.call(approving_child, n, id=f"{ctx.invocation_id}.kid") + 1


async def drafting_turn(ctx: Context, message: str) -> str:
    """A thread's turn that drafts into the state, then waits for promise `go` (needs --key)."""
    ctx.state.update("history", [message], reducer=_append, default=[])
    ctx.state.set("draft", message.upper())
    await ctx.promise("go")
    return message


def _undo_once(marker: str) -> str:
    """The compensating step: its first execution marks the file, then works until it is killed."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        while True:
            time.sleep(0.05)  # a long compensation, cut short by SIGKILL in the test
    return "undone"


async def compensating_turn(ctx: Context, job: dict) -> str:
    """A thread's turn that drafts into the state and waits for `go`; cancelled, it compensates."""
    ctx.state.set("draft", job["message"])
    try:
        await ctx.promise("go")
    except Cancelled:
        ctx.state.set("compensated", True)
        await ctx.run("undo", _undo_once, job["marker"])
        raise
    return job["message"]


async def collector(ctx: Context) -> list:
    """The garbage collector's thresholds in the process running the handler."""
    import gc

    return list(gc.get_threshold())


def _slow_answer(message: str) -> str:
    time.sleep(0.05)  # simulated work: a turn takes a while, so turns started together overlap
    return f"{message}!"


async def slow_turn(ctx: Context, message: str) -> list:
    """A thread's turn that works a little, then appends its message (needs --key)."""
    answer = await ctx.run("answer", _slow_answer, message)
    return ctx.state.update("history", [answer], reducer=_append, default=[])


async def name_parent(ctx: Context, n: int) -> int:
    """Awaits a child named by its registered NAME, `child` (a worker given that handler runs it)."""
    return await ctx.call("child", n, id=f"{ctx.invocation_id}.kid") + 1


async def talker(ctx: Context, greeting: str) -> list:
    """Receives words on topic `chat` (strings only), publishes how many it has, answers
    requests with that count, and ends at "bye"."""
    words: list[str] = []
    await ctx.publish("count", 0)
    while True:
        message = await ctx.receive("chat", type=str)
        if message.value == "bye":
            return words
        words.append(message.value)
        await ctx.publish("count", len(words))
        if message.wants_reply:
            await message.reply({"greeting": greeting, "count": len(words)})
