"""Batches: one action (cancel, resume, retry) over every invocation a filter matched, kept
as records in the store so that a batch interrupted by a crash goes on where it stopped.

A batch's ids are fixed when it is made (the filter's matches at that moment), in chunks,
beside a small progress record that each step of a few dozen invocations rewrites: `next`
is the position of the first invocation not yet dealt with, and the counts go with it in
the same write. So a batch resumed after a crash starts at `next`; the invocations of the
step it may have acted on without recording it are acted on again, which each action makes
harmless (a retry's fork
has an id of the batch's own, found existing the second time; a cancel request or a
return to `pending` again changes nothing).

Keys, in the store's `meta` table (`Store.batch_records`, `Store.write_batch_records`):
    b"batch\\x00" id b"\\x00p"                 -> Batch (msgpack): what, and how far
    b"batch\\x00" id b"\\x00m" chunk(u32 BE)   -> list[str]: the matched ids, CHUNK a chunk
    b"batch\\x00" id b"\\x00d" position(u32 BE) -> [id, first difference]: a diverging journal
"""

from __future__ import annotations

import datetime
from typing import Any

import msgspec

from ._listing import Query
from ._records import Status
from ._store import Store
from ._tags import parse_tag
from .errors import JournalError

ACTIONS = ("cancel", "resume", "retry")
CHUNK = 500
PREFIX = b"batch\x00"


class Batch(msgspec.Struct, gc=False):
    """A batch's progress record."""

    id: str
    action: str
    filter: dict[str, Any]
    check: bool
    dry_run: bool
    created_at: int
    matched: int
    next: int = 0  # the position of the first matched invocation not yet dealt with
    done: int = 0  # acted on
    skipped: int = 0  # left alone: no longer in a state the action applies to
    diverging: int = 0  # left alone: its journal does not replay against the code (retry --check)
    errors: list[str] = []
    finished: bool = False

    @property
    def checked(self) -> bool:
        return self.check and self.action == "retry"


_enc = msgspec.msgpack.Encoder()
_batch = msgspec.msgpack.Decoder(Batch)
_ids = msgspec.msgpack.Decoder(list[str])
_diff = msgspec.msgpack.Decoder(tuple[str, str])


def _key(batch_id: str, kind: bytes, n: int | None = None) -> bytes:
    return PREFIX + batch_id.encode() + b"\x00" + kind + (n.to_bytes(4, "big") if n is not None else b"")


def query_of(filter: dict[str, Any], limit: int = 1000) -> Query:
    """The `Query` a batch's filter (the filters of `journal ls`, as JSON) asks; JournalError
    saying what is wrong otherwise."""
    known = {"status", "handler", "key", "tag", "q", "since", "until"}
    unknown = sorted(set(filter) - known)
    if unknown:
        raise JournalError(f"a batch filter has no {', '.join(map(repr, unknown))}; it takes {', '.join(sorted(known))}")
    statuses = filter.get("status") or []
    statuses = [statuses] if isinstance(statuses, str) else statuses
    tags = filter.get("tag") or []
    tags = [tags] if isinstance(tags, str) else tags
    try:
        chosen = tuple(Status(s) for s in statuses)
    except ValueError:
        raise JournalError(f"status {statuses!r}: each one of {', '.join(s.value for s in Status)}") from None
    return Query(statuses=chosen, handler=filter.get("handler"), key=filter.get("key"), text=filter.get("q"),
                 since=_instant(filter.get("since"), "since"), until=_instant(filter.get("until"), "until"),
                 tags=tuple(parse_tag(t, ":") for t in tags), limit=limit)


def _instant(text: Any, name: str) -> int | None:
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise JournalError(f"{name} {text!r} is not an ISO 8601 time (for example 2026-12-01T09:30:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1_000_000)


def matching(store: Store, query: Query) -> list[str]:
    """The ids of every invocation `query` matches, oldest first, page by page from the index."""
    ids: list[str] = []
    while True:
        page = store.page(query)
        ids += [item.id for item in page.items]
        if page.next is None:
            break
        query = msgspec.structs.replace(query, after=page.next)
    ids.reverse()
    return ids


def create(store: Store, batch: Batch, ids: list[str]) -> None:
    """Write a new batch: its progress record and its ids, in one transaction."""
    items = [(_key(batch.id, b"p"), _enc.encode(batch))]
    items += [(_key(batch.id, b"m", n // CHUNK), _enc.encode(ids[n:n + CHUNK])) for n in range(0, len(ids), CHUNK)]
    store.write_batch_records(items)


def load(store: Store, batch_id: str) -> Batch | None:
    found = store.batch_records(_key(batch_id, b"p"))
    return _batch.decode(found[0][1]) if found else None


def ids_of(store: Store, batch_id: str, chunk: int) -> list[str]:
    found = store.batch_records(_key(batch_id, b"m", chunk))
    return _ids.decode(found[0][1]) if found else []


def save(store: Store, batch: Batch, diverged: list[tuple[str, str]] | None = None) -> None:
    """Record how far `batch` got, with the journals found diverging since the last save."""
    items = [(_key(batch.id, b"p"), _enc.encode(batch))]
    first = batch.diverging - len(diverged or ())
    items += [(_key(batch.id, b"d", first + n), _enc.encode(d)) for n, d in enumerate(diverged or ())]
    store.write_batch_records(items)


def divergences(store: Store, batch_id: str) -> list[tuple[str, str]]:
    return [_diff.decode(v) for _, v in store.batch_records(_key(batch_id, b"d"))]


def unfinished(store: Store) -> list[Batch]:
    """Batches not finished yet: what a starting worker or server goes on with."""
    out = []
    for key, value in store.batch_records(PREFIX):
        if key.endswith(b"\x00p"):
            batch = _batch.decode(value)
            if not batch.finished:
                out.append(batch)
    return out


def batch_json(store: Store, batch: Batch) -> dict[str, Any]:
    """`GET /batches/{id}` and `journal retry --where --json`: how far the batch got."""
    found = divergences(store, batch.id)
    return {"id": batch.id, "action": batch.action, "filter": batch.filter, "check": batch.check,
            "dry_run": batch.dry_run, "matched": batch.matched, "done": batch.done, "skipped": batch.skipped,
            "diverging": [i for i, _ in found], "first_differences": dict(found), "errors": batch.errors,
            "finished": batch.finished}


__all__ = ("ACTIONS", "Batch", "batch_json", "create", "divergences", "ids_of", "load", "matching", "query_of",
           "save", "unfinished")
