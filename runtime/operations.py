"""What an operator does to an invocation from outside, over the `Store` protocol: whether
one can be resumed here, and the fork that retries a failed one.

The HTTP actions (`POST /invocations/{id}/resume`, `/retry`) are built on these, so that a
command line can be too, with the same rules and messages.
"""

from __future__ import annotations

import uuid

from journal import Failed, InvocationRecord, Promise, Status, Step, Store, decode_entry, fork
from journal.errors import JournalError

from ._clock import now_us
from .errors import InvocationNotFound


class NotResumable(JournalError, ValueError):
    """The invocation is in a state no resume can continue (finished, suspended, or run by a live owner)."""


class NotRetryable(JournalError, ValueError):
    """Only a failed invocation can be retried."""


def check_resumable(store: Store, record: InvocationRecord, now: int | None = None) -> None:
    """Raise `NotResumable` unless `record` is pending, or running with its owner gone (no live lease)."""
    if record.status == Status.PENDING:
        return
    if record.status == Status.RUNNING:
        if store.live_lease(record.id, now_us() if now is None else now) is None:
            return
        raise NotResumable(f"invocation {record.id!r} is running and its owner is alive; it goes on there "
                           "(cancel it first to stop it)")
    hint = {
        Status.SUSPENDED: "it waits for a promise or a timer: resolve the promise, and it runs",
        Status.DIVERGED: "it diverged: fork it from before the divergence, or resume it with "
                         "`journal resume` once the code is fixed",
        Status.FAILED: "it failed: retry it (a fork from before its failing step)",
    }.get(record.status, "it has finished; fork it to run part of it again")
    raise NotResumable(f"invocation {record.id!r} is {record.status.value}, not pending or orphaned; {hint}")


def retry_point(store: Store, invocation_id: str) -> int:
    """The seq a retry of a failed invocation forks at: its last step (or promise) that recorded
    an error, or else the `failed` entry itself (the handler raised outside any step)."""
    record = store.get(invocation_id)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r}; `journal ls` lists them")
    if record.status != Status.FAILED:
        raise NotRetryable(f"invocation {invocation_id!r} is {record.status.value}; only a failed invocation "
                           "can be retried (fork it to run part of it again)")
    failing: int | None = None
    for seq, data in store.entries(invocation_id):
        entry = decode_entry(data, invocation_id=invocation_id, seq=seq)
        if isinstance(entry, Step | Promise) and entry.error is not None:
            failing = seq
        elif isinstance(entry, Failed):
            return failing if failing is not None else seq
    raise NotRetryable(f"invocation {invocation_id!r} records no `failed` entry (was its journal trimmed?); "
                       "it cannot be retried")


def retry(store: Store, invocation_id: str, *, new_id: str | None = None) -> InvocationRecord:
    """Fork a failed invocation just before its failing step (`retry_point`) into a new pending
    invocation, `<id>-retry-<6 hex digits>` unless `new_id` is given; return its record.

    The failing step runs again live when the fork runs; everything before it is replayed."""
    at = retry_point(store, invocation_id)
    return fork(store, invocation_id, at=at, new_id=new_id or f"{invocation_id[:180]}-retry-{uuid.uuid4().hex[:6]}")


__all__ = ("NotResumable", "NotRetryable", "check_resumable", "retry", "retry_point")
