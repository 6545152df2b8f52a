"""Where code is running: `current_context()`, the invocation whose handler code calls it,
and `current_step()`, what a step function can learn about its step (and how it streams
live output to the invocation's followers).

Both are `ContextVar`s. The context is set where the handler runs (`Executor._drive`, and
`replay_journal`'s own drive), so every task the handler spawns inherits it, and code the
handler calls (an agent framework, a tool) finds its invocation without being handed it."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .._handler._context import Context

_context: ContextVar[Context | None] = ContextVar("journal_current_context", default=None)

# Result types that are certainly not awaitable: a step returning one skips `inspect.isawaitable`.
PLAIN = frozenset({bytes, str, int, float, bool, dict, list, tuple, type(None)})


def current_context() -> Context:
    """The `Context` of the invocation whose handler (or a task it spawned) is calling.

    Raises `LookupError` outside a handler. Inside a step function it is the step's
    invocation too, but context operations belong in handler code: call them there.
    """
    ctx = _context.get()
    if ctx is None:
        raise LookupError(
            "current_context() was called outside a handler: call it from code that an `async def "
            "handler(ctx, ...)` runs (or a task it spawned), under Engine.run, journal run or a worker"
        )
    return ctx


def handler_context() -> Context | None:
    """The context of the invocation when handler code calls (a handler, or a task it spawned),
    and None from a step function or outside any handler: where code that makes its own calls
    durable (an agent framework's integration) should journal them, or not."""
    ctx = _context.get()
    return ctx if ctx is not None and _current.get() is None else None


class StepInfo(NamedTuple):
    invocation_id: str
    seq: int
    name: str
    attempt: int
    # Stable across retries and crashes: the invocation id and a hash of the step's
    # position in its branch (see `runtime.idempotency_key`), not its seq.
    idempotency_key: str

    def emit(self, chunk: str | bytes) -> None:
        """Send `chunk` (text or bytes: an LLM's tokens, a line of progress) live to whoever
        follows the invocation (`Engine.stream`, the HTTP events stream, `journal tail -f`,
        the web UI). Not journaled and never fsynced: the step's result is what the journal
        keeps. Costs the step about a microsecond; a replayed step runs nothing and emits nothing.
        Call it from the step function this `StepInfo` describes, while it runs."""
        invocation_id, seq, _, attempt, _, ctx = _current.get() or _NOT_IN_A_STEP
        if seq != self.seq or invocation_id != self.invocation_id:
            raise LookupError(
                f"emit() of step {self.name!r} (seq {self.seq}) was called outside that step; "
                "call current_step().emit(...) from the step function while it runs"
            )
        ctx.emit_chunk(self.seq, attempt, chunk)

    def used(self, tokens: int | None = None, cost: float | None = None) -> None:
        """Report what this attempt of the step really used: model tokens and cost (USD). Under
        a limit with a `--tokens` rule, the step's estimate (`ctx.run(..., tokens=N)`) is settled
        with it when the attempt ends: what was reserved too much is given back, too little is
        charged. Calls add up (a step making several model calls reports each). Call it from the
        step function this `StepInfo` describes, while it runs."""
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0):
            raise ValueError(f"used(tokens=...) takes a count of tokens (an int, 0 or more), got {tokens!r}")
        if cost is not None and (not isinstance(cost, (int, float)) or isinstance(cost, bool) or cost < 0):
            raise ValueError(f"used(cost=...) takes an amount in USD (0 or more), got {cost!r}")
        running = _current.get()
        if running is None or running[1] != self.seq or running[0] != self.invocation_id:
            raise LookupError(
                f"used() of step {self.name!r} (seq {self.seq}) was called outside that step; "
                "call current_step().used(...) from the step function while it runs"
            )
        usage = _usage.get()
        if usage is not None:
            usage.add(tokens, cost)


class Usage:
    """What one attempt of a step reported using (`StepInfo.used`)."""

    __slots__ = ("tokens", "cost", "parent")

    def __init__(self, parent: Usage | None = None) -> None:
        self.tokens: int | None = None
        self.cost: float | None = None
        self.parent = parent  # who counts it too (a budget's charge around a limit's settling)

    def add(self, tokens: int | None, cost: float | None) -> None:
        if self.parent is not None:
            self.parent.add(tokens, cost)
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost


# The usage of the attempt running now, when someone counts it (a step under limits).
_usage: ContextVar[Usage | None] = ContextVar("journal_step_usage", default=None)


# The step whose function runs now: `(invocation_id, seq, name, attempt, token, ctx)`, where
# `token` is the branch's position token (the idempotency key is built from it) and `ctx`
# the invocation context (`StepInfo.emit` sends through it). A plain tuple, built once per
# attempt: a step pays for a `StepInfo` and its key only if it asks for them, and not for a
# NamedTuple's constructor (a tenth of a step's time in W1) either.
Running = tuple[str, int, str, int, int, Any]


_NOT_IN_A_STEP: Running = ("", -1, "", 0, 0, None)
_current: ContextVar[Running | None] = ContextVar("journal_current_step", default=None)


def current_step() -> StepInfo:
    """The step being executed. Only valid inside a function run by `ctx.run`."""
    info = _current.get()
    if info is None:
        raise LookupError(
            "current_step() was called outside a step; call it from a function passed to ctx.run(...)"
        )
    invocation_id, seq, name, attempt, token, ctx = info
    key_id = getattr(ctx, "key_id", None) or invocation_id  # a retry's steps keep the keys of those it retries
    return StepInfo(invocation_id, seq, name, attempt, f"{key_id}:{token:016x}")


def in_step() -> bool:
    """Whether the caller runs inside a step function (where nondeterminism is allowed)."""
    return _current.get() is not None
