"""What the runtime writes, built by hand: for the contract's tests and for tests of your own."""

from __future__ import annotations

import os
from typing import Any

from .. import (
    HOST,
    Acquire,
    Append,
    Create,
    InvocationRecord,
    Started,
    Status,
    Step,
    Store,
    Transition,
    digest,
    encode_entry,
    encode_value,
)

T0 = 1_700_000_000_000_000
"""The time the builders below write, in µs since the epoch."""


def create(store: Store, invocation_id: str = "inv-1", *, value: Any = "hello", handler: str = "pkg.mod:agent",
           key: str | None = None, at: int = T0, priority: int = 0,
           start_at: int | None = None, tags: dict[str, str] | None = None) -> tuple[InvocationRecord, bool]:
    """Create an invocation as `Engine.start` does: a pending record and its entry 0 (with
    `start_at`, a delayed start, waiting on its timer until then)."""
    raw = encode_value(value)
    d = digest(bytes(raw))
    record = InvocationRecord(invocation_id, handler, Status.PENDING, at, at, key, d, priority=priority,
                              start_at=start_at, wake_at=start_at, tags=dict(tags or {}))
    return store.create(record, encode_entry(Started(handler, raw, at, key, d)))


def creation_op(invocation_id: str, value: Any, key: str | None = None, lease: Acquire | None = None,
                at: int = T0, tags: dict[str, str] | None = None, handler: str = "pkg.mod:agent") -> Create:
    """The `Create` operation of `create`, for a batch."""
    raw = encode_value(value)
    d = digest(bytes(raw))
    record = InvocationRecord(invocation_id, handler, Status.PENDING, at, at, key, d, tags=dict(tags or {}))
    return Create(record, encode_entry(Started(handler, raw, at, key, d)), lease)


def acquire(store: Store, invocation_id: str = "inv-1", owner: str = "me", *, pid: int | None = None,
            host: str = HOST, ttl_us: int = 30_000_000, now: int = T0) -> tuple[int, InvocationRecord]:
    """Take the invocation's lease: `(epoch, record)`."""
    return store.apply_one(Acquire(invocation_id, owner, host, pid or os.getpid(), ttl_us, now))


def step(name: str = "s", value: Any = "v", at: int = T0) -> bytes:
    """A step entry's bytes."""
    return encode_entry(Step(name, digest(name), at, encode_value(value)))


def append(store: Store, invocation_id: str, epoch: int, *pairs: tuple[int, bytes],
           transition: Transition | None = None) -> InvocationRecord | None:
    """Append `(seq, bytes)` pairs under `epoch`."""
    return store.apply_one(Append(invocation_id, epoch, list(pairs), transition))
