"""Running a batch (`journal/batches.py` keeps it): one action over every invocation its
filter matched, one invocation at a time, its progress written after each, so that a batch
interrupted by a crash goes on where it stopped (`resume_batches`, when a worker or a
server starts) and acts on no invocation twice.

`retry` with `check` first replays each failed journal, up to the point its retry would
copy, against the code the retry would run (`runtime.testing.replay_journal`, read-only):
a journal that replays cleanly is retried, one that would diverge is listed with its
first difference and left alone.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

from journal import (
    HOST,
    Acquire,
    Append,
    InvocationRecord,
    MemoryStore,
    SetStatus,
    Status,
    Store,
    Transition,
    batches,
    retry_fork,
    retry_point,
)
from journal.errors import JournalError

from ._clock import now_us
from .errors import NondeterminismError

if TYPE_CHECKING:
    from ._engine import Engine

STEP = 64  # invocations between two progress writes
_MAX_ERRORS = 100  # kept in the batch's record; the count of the rest is said in the last one
_MAX_DIFFERENCE = 2000


async def start_batch(engine: Engine, action: str, filter: dict[str, Any], *, check: bool = False,
                      dry_run: bool = False) -> batches.Batch:
    """Make a batch: the filter's matches now, fixed, in a record of the store."""
    if action not in batches.ACTIONS:
        raise JournalError(f"a batch's action is one of {', '.join(batches.ACTIONS)}, not {action!r}")
    if check and action != "retry":
        raise JournalError("check applies to retry only: it replays failed journals against the code a retry runs")
    query = batches.query_of(filter)
    store = engine.store
    ids = await engine.committer.read(batches.matching, store, query)
    batch = batches.Batch(uuid.uuid4().hex[:12], action, dict(filter), check, dry_run, now_us(), len(ids))
    await engine.committer.read(batches.create, store, batch, ids)
    return batch


async def run_batch(engine: Engine, batch_id: str) -> batches.Batch:
    """Go on with the batch from where its record says it is, to its end."""
    read, store = engine.committer.read, engine.store
    batch = await read(batches.load, store, batch_id)
    if batch is None:
        raise JournalError(f"no batch {batch_id!r} in this store")
    ids: list[str] = []
    chunk = -1
    while batch.next < batch.matched:
        if batch.next // batches.CHUNK != chunk:
            chunk = batch.next // batches.CHUNK
            ids = await read(batches.ids_of, store, batch.id, chunk)
        # A step of the batch: up to STEP invocations, then one sync and one progress write
        # for all of them. Redone after a crash, a step finds its forks made (their ids are
        # the batch's own) and makes none twice.
        end = min(batch.next + STEP, (chunk + 1) * batches.CHUNK, batch.matched)
        diverged: list[tuple[str, str]] = []
        for position in range(batch.next, end):
            invocation_id = ids[position % batches.CHUNK]
            try:
                how = await _one(engine, batch, invocation_id)
            except JournalError as exc:
                how = "error"
                if len(batch.errors) < _MAX_ERRORS:
                    batch.errors.append(f"{invocation_id}: {exc}")
            if isinstance(how, tuple):
                diverged.append((invocation_id, how[1][:_MAX_DIFFERENCE]))
                batch.diverging += 1
            elif how == "done":
                batch.done += 1
            elif how == "skipped":
                batch.skipped += 1
        if batch.action == "retry" and not batch.dry_run:
            await read(store.sync)  # the forks are durable before the batch says they are made
        batch.next = end
        await read(batches.save, store, batch, diverged)
    if not batch.finished:
        batch.finished = True
        await read(batches.save, store, batch)
    return batch


async def resume_batches(engine: Engine) -> list[batches.Batch]:
    """Finish every batch a crash interrupted (a starting worker or server calls it)."""
    out = []
    for batch in await engine.committer.read(batches.unfinished, engine.store):
        out.append(await run_batch(engine, batch.id))
    return out


async def _one(engine: Engine, batch: batches.Batch, invocation_id: str) -> str | tuple[str, str]:
    """Act on one invocation: "done", "skipped" (the action no longer applies), or
    ("diverging", its first difference)."""
    read, store = engine.committer.read, engine.store
    record = await read(store.get, invocation_id)
    if record is None:
        return "skipped"  # trimmed since the batch was made
    if batch.action == "cancel":
        if record.finished:
            return "skipped"
        if not batch.dry_run:
            await engine.cancel(invocation_id, run=False)
        return "done"
    if batch.action == "resume":
        if record.status not in (Status.SUSPENDED, Status.DIVERGED):
            return "skipped"  # pending ones are runnable already; running and finished ones are not resumed
        if not batch.dry_run:
            await engine.committer.submit(SetStatus(invocation_id, Transition(Status.PENDING, now_us())),
                                          durable=True)
        return "done"
    if record.status != Status.FAILED:
        return "skipped"
    if batch.check:
        difference = await _diverges(engine, record)
        if difference is not None:
            return ("diverging", difference)
    if not batch.dry_run:
        # An id of the batch's own: redone after a crash, the fork is found, not made twice.
        new_id = f"{invocation_id[:150]}-retry-{batch.id}"
        if await read(store.get, new_id) is None:
            await read(lambda: retry_fork(store, invocation_id, new_id=new_id))  # (synced with its step)
    return "done"


async def _diverges(engine: Engine, record: InvocationRecord) -> str | None:
    """The first difference between `record`'s journal, up to where its retry would copy it,
    and the code its retry would run; None if it replays cleanly."""
    from .testing import replay_journal

    try:
        fn = engine.handler_for(record.handler)
    except JournalError as exc:
        raise JournalError(f"cannot check it: {exc}") from None
    prefix = await engine.committer.read(_prefix_copy, engine.store, record)
    try:
        await replay_journal(fn, prefix, record.id)
    except NondeterminismError as exc:
        return str(exc)
    finally:
        prefix.close()
    return None


def _prefix_copy(store: Store, record: InvocationRecord) -> MemoryStore:
    """The journal a retry of `record` would start from (its entries before `retry_point`),
    in a store of its own, unfinished: what the replay is checked against."""
    at = retry_point(store, record.id)
    entries = store.entries(record.id, 0)
    copy = MemoryStore(max_entry_bytes=store.max_entry_bytes)
    fresh = InvocationRecord(record.id, record.handler, Status.PENDING, record.created_at, record.created_at,
                             record.key, record.input_digest)
    copy.create(fresh, entries[0][1])
    rest = [(seq, data) for seq, data in entries if 0 < seq < at]
    if rest:
        now = now_us()
        epoch, _ = copy.apply_one(Acquire(record.id, "check", HOST, os.getpid(), 60_000_000, now))
        copy.apply_one(Append(record.id, epoch, rest, Transition(Status.PENDING, now, release=True)))
    return copy




__all__ = ("resume_batches", "run_batch", "start_batch")
