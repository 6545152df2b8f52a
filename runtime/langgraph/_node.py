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

import contextvars
import functools
import hashlib
from typing import Any, Awaitable, Callable

from langgraph.errors import GraphBubbleUp

from journal import SetStatus, Status, Transition
from journal.errors import InvalidId, JournalError
from journal._ids import validate_id

from .._clock import now_us
from .._context import Context
from .._engine import Engine
from ._saver import JournalSaver

NodeFn = Callable[[Any, Context], Awaitable[Any]]

# What the running node needs that its journaled input does not carry (the live state and
# function): set by the LangGraph-facing wrapper, read by the journal handler below.
_running: contextvars.ContextVar[tuple[NodeFn, Any, JournalSaver]] = contextvars.ContextVar("durable_node")


class _Paused(BaseException):
    """The node stopped for LangGraph (an `interrupt()`, a `Command` to a parent graph).

    A BaseException, so the engine treats it as a stop from outside: nothing is journaled
    for it, and the invocation stays resumable."""

    def __init__(self, bubble: GraphBubbleUp) -> None:
        super().__init__(bubble)
        self.bubble = bubble


class DurableNodeError(JournalError):
    """A durable node cannot run (the graph's checkpointer is not a `JournalSaver`, ...)."""


async def _node_handler(ctx: Context, where: dict[str, str]) -> list[Any]:
    """The journal handler behind every durable node: runs the node, returns its update."""
    try:
        fn, state, saver = _running.get()
    except LookupError:
        raise DurableNodeError(
            f"invocation {ctx.invocation_id!r} is the journal of LangGraph node {where.get('node')!r} "
            f"(thread {where.get('thread_id')!r}); it runs only inside its graph: resume the graph "
            "(graph.ainvoke(None, config)) rather than this invocation"
        ) from None
    try:
        update = await fn(state, ctx)
    except GraphBubbleUp as exc:
        raise _Paused(exc) from None
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
        token = _running.set((fn, state, saver))
        engine = Engine(saver.store, durability=durability)
        try:
            outcome = await engine.run(_node_handler, where, id=invocation_id)
        except BaseException as exc:
            paused = _find_paused(exc)
            if paused is None:
                raise
            _park(saver, engine, invocation_id)
            raise paused.bubble from None
        finally:
            _running.reset(token)
        type_, data = outcome.value()
        return saver.serde.loads_typed((type_, data))

    del node.__wrapped__
    return node


def _find_paused(exc: BaseException) -> _Paused | None:
    if isinstance(exc, _Paused):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = exc.subgroup(lambda e: isinstance(e, _Paused))
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        return found
    return None


def _park(saver: JournalSaver, engine: Engine, invocation_id: str) -> None:
    """Give the lease back and mark the invocation suspended while the graph waits, so that
    no worker picks it up: only the graph, resumed, runs it again."""
    lease = saver.store.lease(invocation_id)
    if lease is not None and lease.owner == engine.owner:
        saver.store.apply_one(SetStatus(
            invocation_id, Transition(Status.SUSPENDED, now_us(), release=True), lease.epoch,
        ))
