"""`durable_node`: a LangGraph node whose `ctx.run` steps are journaled, so that when LangGraph
runs the node again (after a crash, or to resume after `interrupt()`) the steps it finished
are replayed from the journal instead of being repeated.

The node's journal invocation is `lg.<thread_id>.<checkpoint_ns>`: LangGraph gives a node's
task the namespace `node:task_id`, and a task keeps its id when it runs again from the same
checkpoint, so both runs land in the same invocation. The node's return value (the state
update) is journaled as the invocation's result with the graph's serializer; a node that
already completed (LangGraph crashed before saving its writes) returns it without running.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.errors import GraphBubbleUp

from journal import Status, validate_id
from journal.errors import InvalidId, JournalError

from .. import Context, Engine, pause
from ._saver import JournalSaver

NodeFn = Callable[[Any, Context], Awaitable[Any]]

# What the running node needs that its journaled input does not carry (the live state, the
# function, the saver, and a place for the LangGraph exception that pauses it): set by the
# LangGraph-facing wrapper, read by the journal handler below.
_running: contextvars.ContextVar[tuple[NodeFn, Any, JournalSaver, list[GraphBubbleUp]]] = \
    contextvars.ContextVar("durable_node")


# One engine per store, durability and event loop, shared by the durable nodes that run on
# it: nodes running side by side in a super-step share its group commits.
_engines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[int, str], tuple[Any, Engine]]] = \
    weakref.WeakKeyDictionary()


def _engine(store: Any, durability: str) -> Engine:
    per_loop = _engines.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get((id(store), durability))
    if found is None or found[0] is not store:  # (an id may be reused by a later store)
        found = per_loop[(id(store), durability)] = (store, Engine(store, durability=durability))
    return found[1]


class DurableNodeError(JournalError):
    """A durable node cannot run (the graph's checkpointer is not a `JournalSaver`, ...)."""


async def _node_handler(ctx: Context, where: dict[str, str]) -> list[Any]:
    """The journal handler behind every durable node: runs the node, returns its update.

    When the node stops for LangGraph (`interrupt()`, a `Command` for a parent graph), the
    invocation suspends, waiting on nothing: it keeps its journal, gives its lease back,
    and no worker runs it; the graph, resumed, runs the node again and replays it. A worker
    that finds one orphaned by a crash suspends it the same way."""
    try:
        fn, state, saver, paused = _running.get()
    except LookupError:
        pause()  # run outside its graph (`journal resume`, a worker): only the graph can
    try:
        update = await fn(state, ctx)
    except GraphBubbleUp as exc:
        paused.append(exc)
        pause()
    type_, data = saver.serde.dumps_typed(update)
    return [type_, data]


def node_invocation_id(thread_id: str, checkpoint_ns: str) -> str:
    """The journal invocation of a node's task (a digest when the plain form is not a valid id)."""
    plain = f"lg.{thread_id}.{checkpoint_ns}"
    try:
        validate_id(plain)
        return plain
    except InvalidId:
        node = checkpoint_ns.rsplit("|", 1)[-1].split(":", 1)[0][:40]
        digest = hashlib.sha256(f"{thread_id}\x00{checkpoint_ns}".encode("utf-8", "surrogatepass")).hexdigest()
        return f"lg.{''.join(c for c in node if c.isprintable())}.{digest[:40]}"


def durable_node(fn: NodeFn | None = None, *, durability: str = "sync") -> Any:
    """Make `async def node(state, ctx)` a LangGraph node whose `ctx.run` steps are journaled.

    Use it in a graph compiled with `checkpointer=JournalSaver(...)`; its journal lives in
    the same store. Call `interrupt()` in the node's body (not inside a step). `durability`
    is the journal's (`sync`, `async` or `exit`) for the node's steps.

        @durable_node
        async def research(state, ctx):
            plan = await ctx.run("plan", llm, state["question"])
            ...
    """
    if fn is None:
        return functools.partial(durable_node, durability=durability)

    # Named like `fn` (for the graph's node name), but without `__wrapped__`: LangGraph reads the
    # signature to decide whether to pass `config`, and the wrapper is the one that takes it.
    @functools.wraps(fn, updated=())
    async def node(state: Any, config: dict[str, Any]) -> Any:
        conf = config.get("configurable", {})
        saver = conf.get("__pregel_checkpointer")
        if not isinstance(saver, JournalSaver):
            raise DurableNodeError(
                f"durable node {fn.__name__!r} needs its graph compiled with checkpointer=JournalSaver(...) "
                f"(it keeps the node's journal in the same store); this graph's checkpointer is {saver!r}"
            )
        thread_id, ns = str(conf.get("thread_id")), str(conf.get("checkpoint_ns", ""))
        invocation_id = node_invocation_id(thread_id, ns)
        where = {"node": ns.rsplit("|", 1)[-1].split(":", 1)[0], "thread_id": thread_id, "checkpoint_ns": ns}
        paused: list[GraphBubbleUp] = []
        token = _running.set((fn, state, saver, paused))
        try:
            outcome = await _engine(saver.store, durability).run(_node_handler, where, id=invocation_id)
        finally:
            _running.reset(token)
        if paused:
            raise paused[0]
        if outcome.status == Status.SUSPENDED:
            raise DurableNodeError(
                f"durable node {where['node']!r} (invocation {invocation_id!r}) waited on a promise or a timer; "
                "a node cannot wait inside the graph: use LangGraph's interrupt() in the node's body instead"
            )
        type_, data = outcome.value()
        return saver.serde.loads_typed((type_, data))

    del node.__wrapped__
    return node
