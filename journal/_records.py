"""What the store keeps about an invocation besides its entries."""

from __future__ import annotations

import enum
import socket

import msgspec

from ._entries import NIL, ErrorInfo


class PromiseType(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What a typed wait (`ctx.promise(name, type=T)`) accepts, recorded with the wait so that
    a resolver without the handler's code can check a value: the type as the code spells it
    and its JSON Schema (JSON text; `journal/_schema.py` checks values against it)."""

    name: str
    type: str
    schema: str


class Status(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    DIVERGED = "diverged"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


# The name leases record as their owner's host: an owner on this host can be checked by pid.
HOST = socket.gethostname()

# An invocation's priority is bounded so that the run queue's key stays a u64 whatever the sign.
PRIORITY_MIN, PRIORITY_MAX = -(1 << 31), (1 << 31) - 1

FINISHED = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class InvocationRecord(msgspec.Struct, array_like=True, gc=False):
    """The invocation's current state; its history is the entries."""

    id: str
    handler: str
    status: Status
    created_at: int
    updated_at: int
    key: str | None = None
    input_digest: int = 0
    result: msgspec.Raw = NIL
    error: ErrorInfo | None = None
    waiting: str | None = None  # the promise name it is suspended on
    wake_at: int | None = None  # the timer it is suspended on (µs)
    divergence: str | None = None  # the nondeterminism report that parked it
    cancel_requested: bool = False
    parent: str | None = None  # the invocation that started this one with ctx.call/ctx.send
    queued_at: int = 0  # its place in its key's queue (a continuation keeps its predecessor's)
    continued_from: str | None = None  # continue-as-new chain: the invocation this one continues
    continued_as: str | None = None  # ... and the one that continues it
    waiting_any: list[str] = []  # more promise names that wake it (a select over several)
    cancel_rollback: bool = False  # the cancel asks to undo its state changes (stays once asked)
    promise_types: list[PromiseType] = []  # the types its current wait accepts (typed promises only)
    # Higher first, then the oldest: the order runnable invocations are claimed in, and the
    # place in a limit's line.
    priority: int = 0
    start_at: int | None = None  # a delayed start: pending, but not run before then (µs)
    tags: dict[str, str] = {}
    limits: list[str] = []  # limits it holds a unit of while it runs (`journal start --limit`)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class Lease(msgspec.Struct, array_like=True, gc=False):
    """Who owns an invocation. `epoch` grows with every acquisition and fences stale owners."""

    epoch: int
    owner: str = ""
    host: str = ""
    pid: int = 0
    expires_at: int = 0


class Resolution(msgspec.Struct, array_like=True, gc=False):
    """A promise's outcome, waiting to be consumed by the handler."""

    at: int
    value: msgspec.Raw = NIL
    error: str | None = None
