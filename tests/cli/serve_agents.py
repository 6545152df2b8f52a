"""Handlers the `journal serve` tests register with --handler NAME=TARGET."""

from __future__ import annotations

import os

import anyio
import msgspec

from runtime import Context, TerminalError


def _draft(order: str) -> str:
    return f"refund for {order}"


async def approval(ctx: Context, request: dict) -> dict:
    """The run-service flow: draft, announce, wait for a human, then finish."""
    draft = await ctx.run("draft", _draft, request["order"])
    await ctx.emit({"waiting_for": "approval", "draft": draft})
    decision = await ctx.promise("approval")
    if isinstance(decision, bool):  # the web UI's Approve sends a bare `true`
        decision = {"approved": decision}
    if not decision.get("approved"):
        raise TerminalError(f"rejected by {decision.get('by', 'a reviewer')}")
    done = await ctx.run("refund", _draft, request["order"] + " issued")
    return {"order": request["order"], "status": "refunded", "by": decision.get("by"), "note": done}


def _echo(value: str) -> str:
    return value


async def echo(ctx: Context, text: str) -> str:
    """Journals `text` as a step value and returns it: what a hostile model output looks like."""
    return await ctx.run("echo", _echo, text)


async def quick(ctx: Context, n: int) -> int:
    """One step: the load test's unit of work."""
    return await ctx.run("double", lambda: n * 2)


async def gate(ctx: Context, request: dict) -> str:
    """Runs a step, then waits (outside the journal) for a file: lets a test stop the server mid-run."""
    await ctx.run("before", _echo, "before")
    marker = request["marker"]
    with open(request["entered"], "w") as f:  # says the handler is now in flight
        f.write(str(os.getpid()))
    while not os.path.exists(marker):
        await anyio.sleep(0.02)
    return await ctx.run("after", _echo, "after")


async def remember(ctx: Context, text: str) -> int:
    """Keeps `text` in its key's state; returns how many turns the key has seen."""
    turns = await ctx.state.get("turns", default=0)
    ctx.state.set("last", text)
    ctx.state.set("turns", turns + 1)
    return turns + 1


async def drifting(ctx: Context, flag: str) -> str:
    """Names its first step after a file's presence: code that changed under a suspended run."""
    name = "draft-v2" if os.path.exists(flag) else "draft"
    await ctx.run(name, _echo, "draft")
    await ctx.promise("approval")
    return "done"


async def binary(ctx: Context, n: int) -> dict:
    """Journals bytes and a datetime, which JSON has no type for."""
    when = ctx.now()
    blob = await ctx.run("blob", lambda: bytes(range(n)))
    return {"blob": blob, "when": when}


def _fails_first(marker: str) -> str:
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("failed once")
        raise ConnectionError("the model endpoint dropped the connection")
    return "answered"


async def flaky(ctx: Context, marker: str) -> str:
    """A step whose first attempt fails: the timeline shows its retry."""
    from runtime import RetryPolicy

    return await ctx.run("ask", _fails_first, marker, retry=RetryPolicy(max_attempts=3, initial_interval=0.01))


async def streaming(ctx: Context, args: dict) -> str:
    """A step that streams its words (one of them markup) and waits for `args["release"]` to return."""
    from runtime import current_step

    async def answer() -> str:
        for word in args["words"]:
            current_step().emit(word)
        while not os.path.exists(args["release"]):
            await anyio.sleep(0.01)
        return "".join(args["words"])

    return await ctx.run("answer", answer)


async def planned(ctx: Context, topic: str) -> str:
    """Plans, then writes from the plan: a fork that edits the plan changes what is written."""
    plan = await ctx.run("plan", _echo, f"plan for {topic}")
    return await ctx.run("write", _echo, f"wrote from: {plan}")


def _charge(marker: str) -> str:
    if not os.path.exists(marker):
        raise TerminalError("the card was declined")
    return "charged"


async def checkout(ctx: Context, marker: str) -> str:
    """Reserves, then charges: the charge fails for good until `marker` exists (a retry after a fix)."""
    reserved = await ctx.run("reserve", _echo, "reserved")
    charged = await ctx.run("charge", _charge, marker)
    return f"{reserved}, {charged}"


async def drafting(ctx: Context, text: str) -> str:
    """Drafts into its key's state, then waits for promise `go`: what a cancel with rollback undoes."""
    ctx.state.set("draft", text)
    await ctx.promise("go")
    return text


class Decision(msgspec.Struct):
    approved: bool
    by: str


async def typed_approval(ctx: Context, order: str) -> str:
    """Waits for a typed decision: a value that is not a `Decision` is refused when it is resolved."""
    decision = await ctx.promise("decision", type=Decision)
    return f"{order}: {'approved' if decision.approved else 'refused'} by {decision.by}"


async def named(ctx: Context, name: str) -> str:
    """One step named by its input: what a step name full of markup looks like."""
    return await ctx.run(name, _echo, name)


def _keyed_charge(args: dict) -> str:
    from runtime import current_step

    with open(args["log"], "a") as f:  # what the payment provider saw: the call's idempotency key
        f.write(current_step().idempotency_key + "\n")
    if not os.path.exists(args["marker"]):
        raise TerminalError("the payment service is down")
    return "charged"


async def keyed_charge(ctx: Context, args: dict) -> str:
    """Fetches, then charges with the step's idempotency key, failing until `marker` exists."""
    await ctx.run("fetch", _echo, "fetched")
    return await ctx.run("charge", _keyed_charge, args)


async def limited(ctx: Context, name: str) -> str:
    """One step under the limit `name`: it waits in line while the limit's units are held."""
    return await ctx.run("call", _echo, name, limit=name)
