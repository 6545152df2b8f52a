"""The listing index of the key-value stores: invocations newest first, overall and by
status, handler and key, so that `Store.page` reads only the records it returns.

One table, `listing`, whose keys are `dimension value NUL newest(u64 BE) id` -> b"":
    b"*" NUL ...           every invocation
    b"s" status NUL ...    by status (moves with the record's status)
    b"h" handler NUL ...   by handler
    b"k" key NUL ...       by key
`newest` is 2**64 - 1 - created_at, so a forward scan (the only kind every backend has)
meets the newest first. Stores written before the index are indexed on their first page
(`build`), marked done in `meta`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .._listing import Cursor, Damaged, Page, Query, handler_matches
from .._records import InvocationRecord
from ..errors import CorruptEntry

if TYPE_CHECKING:  # `_rules` writes through this module: it is imported there, not here
    from ._rules import Txn

Decode = Callable[[bytes, bytes], InvocationRecord]

BUILT = b"listing-index"  # in `meta`: the listing index covers every record
_TOP = (1 << 64) - 1
_BATCH = 64  # index keys read at a time when filters are checked on the records


def _newest(created_at: int) -> bytes:
    return (_TOP - max(0, min(created_at, _TOP))).to_bytes(8, "big")


def _prefixes(record: InvocationRecord) -> list[bytes]:
    out = [b"*\x00", b"h" + record.handler.encode("utf-8", "surrogatepass") + b"\x00"]
    if record.key is not None:
        out.append(b"k" + record.key.encode() + b"\x00")
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


def build(txn: Txn, decode: Decode) -> None:
    """Index every record (a store written before the index existed); a record that does
    not decode is indexed as the oldest, so that listings show it as damaged."""
    for id_bytes, data in list(txn.scan("invocations", b"")):
        try:
            record = decode(data, id_bytes)
        except CorruptEntry:
            txn.put("listing", b"*\x00" + _newest(0) + bytes(id_bytes), b"")
            continue
        put_all(txn, bytes(id_bytes), record)
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
    """The index that narrows `query` most: its key, its handler(s), its statuses, or all."""
    if query.key is not None:
        return [b"k" + query.key.encode() + b"\x00"]
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


