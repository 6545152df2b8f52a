"""Forking: a new invocation that starts from a copy of another one's journal prefix.

`fork(store, source, at=SEQ)` copies entries `0 … SEQ-1` into a new invocation, which
is pending: when resumed it replays the copy and runs live from `SEQ`. The source is
only read. Recorded step or promise values may be replaced on the way (`values`), to
edit an agent's state and go on from there.

Only the `Store` protocol is used, so every backend can fork. It takes two transactions:
`create` (entry 0, the record parked as `diverged` with a note saying a fork is being
copied) and then one `apply` batch that takes the lease, appends the copied entries and
makes the invocation pending while giving the lease back. A crash between the two leaves
a parked invocation that no worker runs, never a half-copied runnable one.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping

import msgspec

from ._codec import decode_entry, encode_entry
from ._entries import NIL, TERMINAL_KINDS, Entry, Failed, Promise, Started, Step, kind_of
from ._records import HOST, InvocationRecord, Status
from ._store import Acquire, Append, Store, Transition
from .errors import InvocationConflict, InvocationNotFound, JournalError

_EDITABLE = (Step, Promise)


class ForkError(JournalError, ValueError):
    """A fork cannot be made as asked (a fork point or a replaced value does not fit the journal)."""


def fork(
    store: Store,
    source_id: str,
    *,
    at: int,
    new_id: str | None = None,
    values: Mapping[int, bytes] | None = None,
    now_us: int | None = None,
) -> InvocationRecord:
    """Copy entries `0 … at-1` of `source_id` into a new pending invocation; return its record.

    `new_id` defaults to `<source>-fork-<6 hex digits>`. `values` maps the seq of a
    recorded step or promise (below `at`) to the msgpack bytes of a new value, which
    replaces the recorded value (and clears a recorded error). Raises
    `InvocationNotFound`, `InvocationConflict` (the new id exists) or `ForkError`.
    """
    if new_id is not None and not new_id.strip():
        raise ForkError("the new invocation id is empty; give a name (--new-id NAME) or leave it out for a generated one")
    source = store.get(source_id)
    if source is None:
        raise InvocationNotFound(f"no invocation {source_id!r} to fork; `journal ls` lists the invocations")
    raw = dict(store.entries(source_id))
    entries = {seq: decode_entry(data, invocation_id=source_id, seq=seq) for seq, data in raw.items()}
    started = entries.get(0)
    if not isinstance(started, Started):
        raise ForkError(f"invocation {source_id!r} has no start entry (was its journal trimmed?); it cannot be forked")
    end = min((s for s, e in entries.items() if isinstance(e, TERMINAL_KINDS)), default=max(entries) + 1)
    if not 1 <= at <= end:
        raise ForkError(
            f"cannot fork {source_id!r} at seq {at}: its journal holds seqs 0 to {end - 1}"
            + (f" before its {kind_of(entries[end])} entry" if end in entries else "")
            + f"; pick a fork point from 1 to {end} (entries before it are copied)"
        )
    edits = dict(values or {})
    copied: list[tuple[int, bytes]] = []
    for seq in sorted(s for s in entries if 0 < s < at):
        entry = entries[seq]
        if seq in edits:
            entry = _replace_value(source_id, seq, entry, edits.pop(seq))
            copied.append((seq, encode_entry(entry, store.max_entry_bytes)))
        else:
            copied.append((seq, raw[seq]))
    if edits:
        seq = min(edits)
        raise ForkError(
            f"cannot replace the value at seq {seq} of {source_id!r}: "
            + (f"the fork copies only seqs below {at}" if seq >= at or seq < 0 else
               "seq 0 is the start entry (fork a new `journal run` instead)" if seq == 0 else
               "nothing is recorded at that seq")
        )

    new_id = new_id or f"{source_id[:180]}-fork-{uuid.uuid4().hex[:6]}"
    now = now_us if now_us is not None else time.time_ns() // 1000
    note = (f"fork of {source_id!r} at seq {at} is being copied; if this stays, the copy was interrupted "
            "and this invocation can be ignored: fork again")
    record = InvocationRecord(
        new_id, source.handler, Status.DIVERGED, now, now, started.key, started.input_digest,
        divergence=note, parent=source_id, tags=dict(source.tags),
    )
    # Entry 0 is copied as recorded, except that it names the invocation it was forked from.
    first = msgspec.structs.replace(started, parent=source_id)
    created_record, created = store.create(record, encode_entry(first, store.max_entry_bytes))
    if not created:
        raise InvocationConflict(f"invocation {new_id!r} already exists; pick another --new-id")
    # A new invocation has no lease, so the first acquisition is epoch 1.
    return _fill(store, new_id, copied, now, epoch=1)


def _fill(store: Store, new_id: str, copied: list[tuple[int, bytes]], now: int, *, epoch: int) -> InvocationRecord:
    """The fork's second transaction: lease `new_id` (at `epoch`), append the copy, make it pending."""
    acquire = Acquire(new_id, f"{HOST}:{os.getpid()}:fork", HOST, os.getpid(), 60_000_000, now, ignore_queue=True)
    append = Append(new_id, epoch, copied, Transition(Status.PENDING, now, release=True))
    results = store.apply([acquire, append])
    for result in results:
        if isinstance(result, BaseException):
            raise result
    forked = results[1]
    assert isinstance(forked, InvocationRecord)  # an Append with a transition returns the record
    return forked


def finish_retry_copy(store: Store, retry: InvocationRecord) -> InvocationRecord:
    """`retry` as it stands, or, if a crash interrupted its copy (parked with the note `fork`
    leaves until the copy is made), with the copy made now: the same entries its retry
    point gives, so that a batch that made it before the crash need not make another."""
    if (retry.status != Status.DIVERGED or retry.parent is None or retry.divergence is None
            or "is being copied" not in retry.divergence):
        return retry
    if [seq for seq, _ in store.entries(retry.id)] != [0]:
        return retry  # not the state a fork's first transaction leaves: someone else's to look at
    at = retry_point(store, retry.parent)
    copied = [(seq, data) for seq, data in store.entries(retry.parent) if 0 < seq < at]
    lease = store.lease(retry.id)
    return _fill(store, retry.id, copied, time.time_ns() // 1000, epoch=(lease.epoch if lease else 0) + 1)


def retry_point(store: Store, invocation_id: str) -> int:
    """Where `journal retry` forks a failed invocation: at its failing step (the step whose
    error the invocation failed with, so that the fork runs it live again), else at the last
    step or promise that recorded an error, else at its `failed` entry (the handler itself raised: the fork replays every step and runs the
    handler on from there). Raises `ForkError` for an invocation that has not failed."""
    record = store.get(invocation_id)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r} to retry; `journal ls` lists the invocations")
    if record.status != Status.FAILED:
        raise ForkError(
            f"invocation {invocation_id!r} is {record.status.value}, not failed: only a failed invocation is retried "
            f"(`journal resume {invocation_id}` continues one that has not finished; `journal fork {invocation_id} "
            "--at SEQ` copies any journal)"
        )
    entries = [(seq, decode_entry(data, invocation_id=invocation_id, seq=seq)) for seq, data in store.entries(invocation_id)]
    failed = next(((seq, e) for seq, e in reversed(entries) if isinstance(e, Failed)), None)
    if failed is None:
        raise ForkError(f"invocation {invocation_id!r} has no `failed` entry (was its journal trimmed?); it cannot be retried")
    end, entry = failed
    for seq, step in reversed(entries[:end]):
        if isinstance(step, Step) and step.error is not None and (step.error.type, step.error.message) == (
                entry.error.type, entry.error.message):
            return seq
    # Else the last step or promise that recorded an error (a rejected approval the handler
    # let through, a step error it turned into another): the fork asks or runs it again.
    for seq, step in reversed(entries[:end]):
        if isinstance(step, Step | Promise) and step.error is not None:
            return seq
    return end


def retry_fork(store: Store, invocation_id: str, *, new_id: str | None = None,
               force: bool = False) -> InvocationRecord:
    """A failed invocation forked at its `retry_point`, pending: resumed, it replays what
    succeeded and runs the rest live. Its id defaults to `ID-retry-N`, the first N free.

    A failed invocation that already has a retry that has not failed (pending, running,
    suspended, diverged or completed: `retries`) is not retried again, so that a second
    click or a script that retries every failed invocation does not pay twice:
    `InvocationConflict` names that retry, unless `force`."""
    at = retry_point(store, invocation_id)
    if new_id is None:
        root = _root(invocation_id)
        n = 1
        while store.get(f"{root}-retry-{n}") is not None:
            n += 1
        new_id = f"{root}-retry-{n}"
    # The id is chosen before the check: a retry made by another process after the check
    # takes that same id first, and this one's creation then finds it (below).
    if not force:
        going = [r for r in retries(store, invocation_id) if r.status not in (Status.FAILED, Status.CANCELLED)]
        if going:
            raise AlreadyRetried(going[0])
    try:
        return fork(store, invocation_id, at=at, new_id=new_id)
    except InvocationConflict:
        made = store.get(new_id)
        if made is not None and made.parent == invocation_id and not force:
            raise AlreadyRetried(made) from None  # another process retried it at the same moment
        raise


class AlreadyRetried(InvocationConflict):
    """A failed invocation already has a retry that has not failed: `retry` is its record."""

    def __init__(self, retry: InvocationRecord) -> None:
        source = retry.parent or "it"
        super().__init__(
            f"invocation {source!r} was already retried as {retry.id!r}, which is {retry.status.value}: it is not "
            f"retried twice (see `journal show {retry.id}`); to run another retry anyway, "
            f"`journal retry {source} --force`")
        self.retry = retry


def _root(invocation_id: str) -> str:
    """The invocation a chain of retries began with: `pay-8` for `pay-8-retry-2`."""
    return invocation_id.split("-retry-")[0][:180]


def retries(store: Store, invocation_id: str) -> list[InvocationRecord]:
    """The retries made of `invocation_id` with generated ids (`ROOT-retry-N`, whose parent it
    is), in the order they were made. Reads one record per retry of its chain, and one more."""
    root = _root(invocation_id)
    found: list[InvocationRecord] = []
    n = 1
    while (record := store.get(f"{root}-retry-{n}")) is not None:
        if record.parent == invocation_id:
            found.append(record)
        n += 1
    return found


def retry_lineage(invocation_id: str, parent: str | None) -> str:
    """The invocation whose step idempotency keys a retry keeps, so that a provider that saw
    the failed attempt's key recognises the retry's call as the same one: for `ROOT-retry-N`
    forked from ROOT or from another retry of ROOT, ROOT; for any other invocation, itself."""
    root = _root(invocation_id)
    head, sep, number = invocation_id.rpartition("-retry-")
    if sep and head == root and number.isdigit() and parent is not None and _root(parent) == root:
        return root
    return invocation_id


def _replace_value(source_id: str, seq: int, entry: Entry, raw: bytes) -> Entry:
    if not isinstance(entry, _EDITABLE):
        raise ForkError(
            f"cannot replace the value at seq {seq} of {source_id!r}: it is a {kind_of(entry)} entry; "
            "only step and promise values can be replaced"
        )
    return msgspec.structs.replace(entry, value=msgspec.Raw(raw) if raw is not None else NIL, error=None)


__all__ = ("AlreadyRetried", "ForkError", "fork", "retries", "retry_fork", "retry_lineage", "retry_point")
