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

import uuid
from typing import TYPE_CHECKING, Any

from journal import (
    InvocationRecord,
    MemoryStore,
    SetStatus,
    Status,
    Store,
    Transition,
    batches,
    finish_retry_copy,
    now_us,
    retries,
    retry_fork,
    retry_point,
)
from journal.errors import JournalError

from ..errors import NondeterminismError

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
    # The retry gets the id `journal retry` gives (`ROOT-retry-N`), so that its steps keep the
    # idempotency keys of the steps they retry, and a later `journal retry` sees it.
    made = await read(retries, store, invocation_id)
    mine = [r for r in made if r.created_at >= batch.created_at]
    if mine:  # by this batch, before a crash: the step is redone, the fork not made twice
        if not batch.dry_run:
            for retry in mine:  # a copy the crash cut short is finished, or it would wait for ever
                await read(finish_retry_copy, store, retry)
        return "done"
    if any(r.status not in (Status.FAILED, Status.CANCELLED) for r in made):
        return "skipped"  # retried already, and that retry has not failed: a failed run is retried once
    if batch.check:
        difference = await _diverges(engine, record)
        if difference is not None:
            return ("diverging", difference)
    if not batch.dry_run:
        await read(lambda: retry_fork(store, invocation_id))  # (synced with its step)
    return "done"


async def _diverges(engine: Engine, record: InvocationRecord) -> str | None:
    """The first difference between `record`'s journal, up to where its retry would copy it,
    and the code its retry would run; None if it replays cleanly."""
    from .._handler._replay_journal import replay_journal

    try:
        fn = engine.handler_for(record.handler)
    except JournalError as exc:
        raise JournalError(f"cannot check it: {exc}") from None
    prefix = await engine.committer.read(_Prefix.of, engine.store, record)
    try:
        await replay_journal(fn, prefix, record.id)
    except NondeterminismError as exc:
        return str(exc)
    finally:
        prefix.close()
    return None


class _Prefix:
    """The journal a retry of a record would start from (its entries before `retry_point`),
    unfinished, as a store holding only that journal answers for it: what the check replays.

    Read from the store once and kept as it is, instead of written into a scratch store:
    a copy paid the store's write rules (the record, its lease, its indexes and counts) for
    every invocation checked, a fifth of a checked batch retry's time. Whatever else a
    replay reads (a promise's resolution, a key's state, tables) comes from an empty store,
    as it did from the copy, which held nothing else."""

    def __init__(self, record: InvocationRecord, entries: list[tuple[int, bytes]], max_entry_bytes: int) -> None:
        self.path = None
        self.max_entry_bytes = max_entry_bytes
        self._record = record
        self._entries = entries
        self._empty: MemoryStore | None = None

    @classmethod
    def of(cls, store: Store, record: InvocationRecord) -> _Prefix:
        at = retry_point(store, record.id)
        fresh = InvocationRecord(record.id, record.handler, Status.PENDING, record.created_at, record.created_at,
                                 record.key, record.input_digest)
        return cls(fresh, [(seq, data) for seq, data in store.entries(record.id, 0) if seq < at],
                   store.max_entry_bytes)

    def get(self, invocation_id: str) -> InvocationRecord | None:
        return self._record if invocation_id == self._record.id else None

    def entries(self, invocation_id: str, start: int = 0) -> list[tuple[int, bytes]]:
        if invocation_id != self._record.id:
            return []
        return [(seq, data) for seq, data in self._entries if seq >= start]

    def entry_count(self, invocation_id: str) -> int:
        return len(self.entries(invocation_id))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._empty is None:
            self._empty = MemoryStore(max_entry_bytes=self.max_entry_bytes)
        return getattr(self._empty, name)

    def close(self) -> None:
        if self._empty is not None:
            self._empty.close()


__all__ = ("resume_batches", "run_batch", "start_batch")
