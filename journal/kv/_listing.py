"""The listing index of the key-value stores: invocations newest first, overall and by
status, handler, key and tag, so that `Store.page` reads only the records it returns; and
the counts by handler and status that `Store.summary` reads instead of the records.

One table, `listing`, whose keys are `dimension value NUL newest(u64 BE) id` -> b"":
    b"*" NUL ...           every invocation
    b"s" status NUL ...    by status (moves with the record's status)
    b"h" handler NUL ...   by handler
    b"k" key NUL ...       by key
    b"t" K=V NUL ...       by tag (a tag key holds no "=", a value no NUL: journal/_tags.py)
`newest` is 2**64 - 1 - created_at, so a forward scan (the only kind every backend has)
meets the newest first. Beside them, kept in the same transactions as the records:
    b"c" handler NUL status NUL shard -> u64 BE: how many invocations of handler have status,
                                          among those whose id falls in shard (of SHARDS)
    b"r" handler NUL since(u64 BE) id  -> b"": pending invocations, longest waiting first
                                          (`since` is when it became pending: its updated_at)
Stores written before the index (or before its counts) are indexed on their first page or
summary (`build`), marked done in `meta`.

A count changes by `Txn.add`: PostgreSQL adds it to the row as the transaction ends (READ
COMMITTED: a count read, changed and written back lost the additions of transactions
that committed in between), so the row is locked only from then to the commit. The
counts are split in shards by invocation id, so that concurrent transactions seldom
touch the same row even then. An invocation's changes always go to its own shard, so no
shard goes below zero; `summary` adds the shards up (a database keeps a shard that came
back to 0).
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .._listing import Cursor, Damaged, HandlerSummary, Page, Query, handler_matches
from .._records import InvocationRecord, Status
from ..errors import CorruptEntry

if TYPE_CHECKING:  # `_rules` writes through this module: it is imported there, not here
    from ._rules import Txn

Decode = Callable[[bytes, bytes], InvocationRecord]

# In `meta`: the listing index covers every record. The second version added the counts
# and the runnable dimension, so a store indexed by the first is indexed again, once.
BUILT = b"listing-index-2"
_TOP = (1 << 64) - 1
_BATCH = 64  # index keys read at a time when filters are checked on the records


def _newest(created_at: int) -> bytes:
    return (_TOP - max(0, min(created_at, _TOP))).to_bytes(8, "big")


def _prefixes(record: InvocationRecord) -> list[bytes]:
    out = [b"*\x00", b"h" + record.handler.encode("utf-8", "surrogatepass") + b"\x00"]
    if record.key is not None:
        out.append(b"k" + record.key.encode() + b"\x00")
    out.extend(_tag_prefix(k, v) for k, v in record.tags.items())
    return out


def _tag_prefix(key: str, value: str) -> bytes:
    return b"t" + key.encode() + b"=" + value.encode("utf-8", "surrogatepass") + b"\x00"


SHARDS = 16


def _count_key(handler: str, status: str, id_bytes: bytes) -> bytes:
    shard = zlib.crc32(id_bytes) % SHARDS
    return b"c" + handler.encode("utf-8", "surrogatepass") + b"\x00" + status.encode() + b"\x00" + bytes((shard,))


def _runnable_key(record: InvocationRecord, id_bytes: bytes) -> bytes:
    return (b"r" + record.handler.encode("utf-8", "surrogatepass") + b"\x00"
            + max(0, min(record.updated_at, _TOP)).to_bytes(8, "big") + id_bytes)


def _count(txn: Txn, handler: str, status: str, delta: int, id_bytes: bytes) -> None:
    txn.add("listing", _count_key(handler, status, id_bytes), delta)


def moved(txn: Txn, id_bytes: bytes, record: InvocationRecord, old: InvocationRecord | None) -> None:
    """Keep the index in step with `record` written over `old` (None: a new invocation):
    every dimension of a new one, and what changed of an existing one (its count by
    status, its place among the runnable, its tags). Its status key is `_put_record`'s."""
    if old is None:
        put_all(txn, id_bytes, record)
        _count(txn, record.handler, record.status.value, 1, id_bytes)
        if record.status is Status.PENDING:
            txn.put("listing", _runnable_key(record, id_bytes), b"")
        return
    if old.status != record.status:
        _count(txn, old.handler, old.status.value, -1, id_bytes)
        _count(txn, record.handler, record.status.value, 1, id_bytes)
    was = _runnable_key(old, id_bytes) if old.status is Status.PENDING else None
    now = _runnable_key(record, id_bytes) if record.status is Status.PENDING else None
    if was != now:
        if was is not None:
            txn.delete("listing", was)
        if now is not None:
            txn.put("listing", now, b"")
    if old.tags != record.tags:
        suffix = _newest(record.created_at) + id_bytes
        for k, v in old.tags.items():
            if record.tags.get(k) != v:
                txn.delete("listing", _tag_prefix(k, v) + suffix)
        for k, v in record.tags.items():
            if old.tags.get(k) != v:
                txn.put("listing", _tag_prefix(k, v) + suffix, b"")


def summary(txn: Txn) -> list[HandlerSummary]:
    """Counts by handler and status, and each handler's longest waiting runnable one: read
    from the counts and the first runnable key of each handler, never from the records."""
    found: dict[str, dict[str, int]] = {}
    for key, value in txn.scan("listing", b"c"):
        name, _, status = bytes(key[1:-2]).rpartition(b"\x00")  # (the last two: NUL and the shard)
        n = int.from_bytes(value, "big", signed=True)
        if n > 0:  # (a database keeps a count that came back to 0: `Txn.add`)
            by_status = found.setdefault(name.decode("utf-8", "surrogatepass"), {})
            by_status[status.decode()] = by_status.get(status.decode(), 0) + n
    out = []
    for handler, counts in sorted(found.items()):
        oldest = None
        if counts.get(Status.PENDING.value):
            prefix = b"r" + handler.encode("utf-8", "surrogatepass") + b"\x00"
            for key, _ in txn.scan_some("listing", prefix, prefix, 1):
                oldest = int.from_bytes(key[len(prefix):len(prefix) + 8], "big")
        out.append(HandlerSummary(handler, counts, oldest))
    return out


def status_key(record: InvocationRecord, id_bytes: bytes) -> bytes:
    return b"s" + record.status.value.encode() + b"\x00" + _newest(record.created_at) + id_bytes


def put_all(txn: Txn, id_bytes: bytes, record: InvocationRecord) -> None:
    """Index a new invocation (its status key is `_put_record`'s, which moves it)."""
    suffix = _newest(record.created_at) + id_bytes
    for prefix in _prefixes(record):
        txn.put("listing", prefix + suffix, b"")


def delete_all(txn: Txn, id_bytes: bytes, record: InvocationRecord) -> None:
    suffix = _newest(record.created_at) + id_bytes
    for prefix in _prefixes(record):
        txn.delete("listing", prefix + suffix)
    txn.delete("listing", status_key(record, id_bytes))
    _count(txn, record.handler, record.status.value, -1, id_bytes)
    if record.status is Status.PENDING:
        txn.delete("listing", _runnable_key(record, id_bytes))


def build(txn: Txn, decode: Decode) -> None:
    """Index every record (a store written before the index existed); a record that does
    not decode is indexed as the oldest, so that listings show it as damaged. The counts
    are made afresh (those an earlier version left, or none)."""
    for prefix in (b"c", b"r"):
        for key, _ in list(txn.scan("listing", prefix)):
            txn.delete("listing", bytes(key))
    for id_bytes, data in list(txn.scan("invocations", b"")):
        try:
            record = decode(data, id_bytes)
        except CorruptEntry:
            txn.put("listing", b"*\x00" + _newest(0) + bytes(id_bytes), b"")
            continue
        moved(txn, bytes(id_bytes), record, None)
        txn.put("listing", status_key(record, bytes(id_bytes)), b"")
    txn.put("meta", BUILT, b"1")


def page(txn: Txn, query: Query, decode: Decode) -> Page:
    """The page `query` asks for, reading the records its index leads to and no others."""
    prefixes = _chosen(txn, query)
    start = _newest(query.until - 1) if query.until is not None else b""
    if query.after is not None:
        after = _newest(query.after.created_at) + query.after.id.encode()
        start = max(start, after + b"\x00")  # the least key after the cursor's
    stop = _newest(query.since) if query.since is not None else None  # older than `since` from here
    items: list[InvocationRecord | Damaged] = []
    for suffix in heapq.merge(*(_suffixes(txn, p, start) for p in prefixes)):
        if stop is not None and suffix[:8] > stop:
            break
        id_bytes = suffix[8:]
        created_at = _TOP - int.from_bytes(suffix[:8], "big")
        data = txn.get("invocations", id_bytes)
        if data is None:
            continue  # trimmed under a read that saw its index key
        try:
            record = decode(data, id_bytes)
        except CorruptEntry as exc:
            item: InvocationRecord | Damaged = Damaged(id_bytes.decode(errors="replace"), str(exc), created_at)
        else:
            if not query.matches(record):
                continue
            item = record
        if len(items) == query.limit:
            last = items[-1]
            return Page(items, Cursor(last.created_at, last.id))
        items.append(item)
    return Page(items, None)


def page_by_scan(txn: Txn, query: Query, decode: Decode) -> Page:
    """`page` without the index, reading every record: for a store written before the index
    existed and opened read-only (nothing may build the index then)."""
    found: list[tuple[bytes, InvocationRecord | Damaged]] = []
    for id_bytes, data in txn.scan("invocations", b""):
        try:
            record = decode(bytes(data), bytes(id_bytes))
        except CorruptEntry as exc:
            found.append((_newest(0) + bytes(id_bytes), Damaged(bytes(id_bytes).decode(errors="replace"), str(exc))))
            continue
        if query.matches(record):
            found.append((_newest(record.created_at) + bytes(id_bytes), record))
    found.sort(key=lambda pair: pair[0])
    if query.after is not None:
        after = _newest(query.after.created_at) + query.after.id.encode()
        found = [pair for pair in found if pair[0] > after]
    items = [item for _, item in found[:query.limit]]
    more = len(found) > query.limit
    return Page(items, Cursor(items[-1].created_at, items[-1].id) if more else None)


def _chosen(txn: Txn, query: Query) -> list[bytes]:
    """The index that narrows `query` most: its key, a tag, its handler(s), its statuses, or all."""
    if query.key is not None:
        return [b"k" + query.key.encode() + b"\x00"]
    if query.tags:
        return [_tag_prefix(*query.tags[0])]
    if query.handler is not None:
        if ":" not in query.handler:  # a NAME: only itself
            return [b"h" + query.handler.encode("utf-8", "surrogatepass") + b"\x00"]
        return [b"h" + name + b"\x00" for name in _handler_names(txn)
                if handler_matches(query.handler, name.decode("utf-8", "surrogatepass"))]
    if query.statuses:
        return [b"s" + s.value.encode() + b"\x00" for s in dict.fromkeys(query.statuses)]
    return [b"*\x00"]


def _handler_names(txn: Txn) -> Iterator[bytes]:
    """Every handler name in the index, each read once: one key per name, then a jump past
    that name's keys (a TARGET filter such as `ops.py:slow` may match several)."""
    low = b"h"
    while True:
        found = next(iter(txn.scan_some("listing", b"h", low, 1)), None)
        if found is None:
            return
        key = bytes(found[0])
        name = key[1:key.index(b"\x00", 1)]
        yield name
        low = b"h" + name + b"\x01"


def _suffixes(txn: Txn, prefix: bytes, start: bytes) -> Iterator[bytes]:
    """`newest id` of the index keys under `prefix` from `start`, in order, read in batches
    (a database backend then fetches a batch per query, not the whole index)."""
    low = prefix + start
    while True:
        got = 0
        for key, _ in txn.scan_some("listing", prefix, low, _BATCH):
            got += 1
            yield bytes(key[len(prefix):])
            low = bytes(key) + b"\x00"
        if got < _BATCH:
            return


