"""The `Store` protocol: everything the runtime asks of storage.

A store is synchronous and each call is one atomic transaction. `apply` takes a batch of
operations and runs them in a single transaction; each operation succeeds or fails on
its own (a failed check writes nothing), and its result or exception comes back in the
same position. Any backend (LMDB, memory, later PostgreSQL) passes tests/journal's
conformance suite.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import msgspec

from ._entries import ErrorInfo
from ._records import InvocationRecord, Lease, Resolution, Status


class Transition(msgspec.Struct, gc=False):
    """A change of an invocation's status, applied together with an append or alone."""

    status: Status
    at: int
    result: msgspec.Raw | None = None
    error: ErrorInfo | None = None
    waiting: str | None = None
    wake_at: int | None = None
    divergence: str | None = None
    release: bool = False
    waiting_any: list[str] | None = None  # give the lease up (the invocation leaves this process)


class Append(msgspec.Struct, gc=False):
    """Append entries `(seq, bytes)` if `epoch` still owns the invocation.

    `state` mutations `(name, raw value or None to clear)` apply to the invocation's key in
    the same transaction as the entries that record them.
    """

    id: str
    epoch: int
    entries: list[tuple[int, bytes]]
    transition: Transition | None = None
    state: list[tuple[str, bytes | None]] | None = None
    cancel_seen: bool = False  # the entries deliver a cancel request: it is consumed


class Acquire(msgspec.Struct, gc=False):
    """Take the lease; result is `(epoch, record)`. Raises InvocationBusy if a live owner has it."""

    id: str
    owner: str
    host: str
    pid: int
    ttl_us: int
    now_us: int
    ignore_queue: bool = False  # copying entries in (a fork) is not running: the key's queue does not apply


class Renew(msgspec.Struct, gc=False):
    id: str
    epoch: int
    ttl_us: int
    now_us: int


class SetStatus(msgspec.Struct, gc=False):
    """Change status; with `epoch` set, only while that epoch owns the invocation."""

    id: str
    transition: Transition
    epoch: int | None = None


class Resolve(msgspec.Struct, gc=False):
    """Deliver a promise's value (or rejection); wakes the invocation if it waits on it."""

    id: str
    name: str
    at: int
    value: bytes | None = None
    error: str | None = None


class Continue(msgspec.Struct, gc=False):
    """Continue-as-new: finish `id` (owned at `epoch`) and create `record` with entry 0, at once."""

    id: str
    epoch: int
    entries: list[tuple[int, bytes]]
    transition: Transition
    record: InvocationRecord
    started: bytes
    state: list[tuple[str, bytes | None]] | None = None
    cancel_seen: bool = False


class RequestCancel(msgspec.Struct, gc=False):
    """Ask for cancellation; result is the record after the request."""

    id: str
    at: int
    rollback: bool = False  # also undo the invocation's ctx.state changes when it ends cancelled


Op = Append | Acquire | Renew | SetStatus | Resolve | RequestCancel | Continue


@runtime_checkable
class Store(Protocol):
    path: str | None
    max_entry_bytes: int

    def create(self, record: InvocationRecord, started: bytes) -> tuple[InvocationRecord, bool]:
        """Create an invocation with entry 0, or return the existing one (`created` False).

        Raises InvocationConflict when the id exists with a different input digest.
        """

    def get(self, invocation_id: str) -> InvocationRecord | None: ...

    def list(self, status: Status | None = None) -> list[InvocationRecord]: ...

    def entries(self, invocation_id: str, start: int = 0) -> list[tuple[int, bytes]]: ...

    def entry_count(self, invocation_id: str) -> int: ...

    def lease(self, invocation_id: str) -> Lease | None: ...

    def resolution(self, invocation_id: str, name: str) -> Resolution | None: ...

    def due_timers(self, now_us: int) -> list[str]: ...

    def state(self, key: str) -> dict[str, bytes]:
        """The durable state of key (thread) `key`: name -> raw msgpack value."""

    def key_queue(self, key: str) -> list[str]:
        """Unfinished invocations of `key` in the order they run (the first one runs now)."""

    def apply(self, ops: Sequence[Op]) -> list[Any]: ...

    def apply_one(self, op: Op) -> Any:
        """`apply` of one operation: its result, or its error raised."""
        (result,) = self.apply([op])
        if isinstance(result, BaseException):
            raise result
        return result

    def delete(self, invocation_ids: Sequence[str], *, keep_record: bool = False) -> int: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...
