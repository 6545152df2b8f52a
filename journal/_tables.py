"""Ordered key-value tables beside the journal, for integrations that keep their own records
(LangGraph checkpoints, long-term memory) in the same store as the invocations.

The contract, which every backend keeps (`MemoryStore`, `LmdbStore`, `PostgresStore`):

1. A table is named by `[a-z0-9_]{1,48}`; it exists as soon as something is put in it. A
   table never shares keys with the journal's own tables or with another table.
2. Keys and values are bytes. A key is 1 to 480 bytes (LMDB's limit, with room to spare).
3. `table_get` returns the value, or None.
4. `table_scan(table, prefix)` returns the items whose key starts with `prefix`, in
   bytewise key order (`reverse=True`: descending), from `start` inclusive when it is given
   (`start` must itself start with `prefix`), at most `limit` items. It returns a list
   read in one snapshot.
5. `table_write(ops)` applies `TablePut`, `TableDelete` and `TableDeletePrefix` operations, in order, in
   one atomic transaction: after a crash either all of them are visible or none. A `TablePut`
   with `overwrite=False` leaves an existing value in place. With `durable=True` (the
   default) the batch is on disk when the call returns; with `durable=False` it survives a
   killed process at once and an OS crash after the store's next sync.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from .errors import StoreError

MAX_KEY_BYTES = 480
_NAME = re.compile(r"[a-z0-9_]{1,48}")


class TablePut(msgspec.Struct, frozen=True):
    table: str
    key: bytes
    value: bytes
    overwrite: bool = True


class TableDelete(msgspec.Struct, frozen=True):
    table: str
    key: bytes


class TableDeletePrefix(msgspec.Struct, frozen=True):
    table: str
    prefix: bytes


TableOp = TablePut | TableDelete | TableDeletePrefix


@runtime_checkable
class Tables(Protocol):
    """The ordered key-value tables a store offers (see the module docstring for the rules)."""

    def table_get(self, table: str, key: bytes) -> bytes | None: ...

    def table_scan(self, table: str, prefix: bytes = b"", *, start: bytes | None = None,
                   reverse: bool = False, limit: int | None = None) -> list[tuple[bytes, bytes]]: ...

    def table_write(self, ops: Sequence[TableOp], *, durable: bool = True) -> None: ...


_CHECKED: set[str] = set()  # names seen acceptable: a batch of puts checks each name once


def check_table(name: str) -> str:
    if name.__class__ is str and name in _CHECKED:
        return name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise StoreError(
            f"table name {name!r} is not acceptable: use 1 to 48 characters among a-z, 0-9 and _"
        )
    if len(_CHECKED) < 256:
        _CHECKED.add(name)
    return name


_PREFIXES: dict[str, bytes] = {}


def table_prefix(table: str) -> bytes:
    """A table's key prefix in a backend's one key space (the name, then NUL); the name is
    checked once per process, not on every operation."""
    found = _PREFIXES.get(table)
    if found is None:
        found = check_table(table).encode() + b"\x00"
        if len(_PREFIXES) < 256:
            _PREFIXES[table] = found
    return found


def check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray, memoryview)) or not 0 < len(key) <= MAX_KEY_BYTES:
        size = len(key) if isinstance(key, (bytes, bytearray, memoryview)) else type(key).__name__
        raise StoreError(f"a table key must be 1 to {MAX_KEY_BYTES} bytes, got {size}; hash long keys")
    return bytes(key)


def check_scan(prefix: bytes, start: bytes | None, limit: int | None) -> None:
    if start is not None and not start.startswith(prefix):
        raise StoreError(f"scan start {start!r} does not begin with the prefix {prefix!r}")
    if limit is not None and limit < 0:
        raise StoreError(f"scan limit must be 0 or more, got {limit}")


def check_ops(ops: Sequence[TableOp]) -> None:
    for op in ops:
        check_table(op.table)
        if isinstance(op, TableDeletePrefix):
            continue
        check_key(op.key)
        if isinstance(op, TablePut) and not isinstance(op.value, (bytes, bytearray, memoryview)):
            raise StoreError(f"a table value must be bytes, got {type(op.value).__name__}")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class MemoryTables:
    """The `Tables` protocol in process memory, mixed into `MemoryStore` (uses its `_lock`)."""

    _lock: Any

    def _table(self, table: str) -> _SortedTable:
        check_table(table)
        tables: dict[str, _SortedTable] = self.__dict__.setdefault("_user_tables", {})
        found = tables.get(table)
        if found is None:
            found = tables[table] = _SortedTable()
        return found

    def table_get(self, table: str, key: bytes) -> bytes | None:
        key = check_key(key)
        with self._lock:
            return self._table(table).data.get(key)

    def table_scan(self, table: str, prefix: bytes = b"", *, start: bytes | None = None,
                   reverse: bool = False, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(prefix, start, limit)
        with self._lock:
            t = self._table(table)
            keys: Iterable[bytes]
            if reverse:
                end = prefix_end(prefix)
                hi = bisect.bisect_right(t.keys, start) if start is not None else (
                    len(t.keys) if end is None else bisect.bisect_left(t.keys, end))
                lo = bisect.bisect_left(t.keys, prefix)
                keys = t.keys[lo:hi][::-1]
            else:
                lo = bisect.bisect_left(t.keys, start if start is not None else prefix)
                keys = itertools.takewhile(lambda k: k.startswith(prefix), t.keys[lo:])
            return [(k, t.data[k]) for k in itertools.islice(keys, limit)]

    def table_write(self, ops: Sequence[TableOp], *, durable: bool = True) -> None:
        check_ops(ops)
        with self._lock:
            # Validate first, apply after: a batch is all or nothing here too.
            tables = {op.table: self._table(op.table) for op in ops}
            for op in ops:
                t = tables[op.table]
                if isinstance(op, TablePut):
                    if op.overwrite or op.key not in t.data:
                        t.put(bytes(op.key), bytes(op.value))
                elif isinstance(op, TableDeletePrefix):
                    lo = bisect.bisect_left(t.keys, op.prefix)
                    hi = lo
                    while hi < len(t.keys) and t.keys[hi].startswith(op.prefix):
                        del t.data[t.keys[hi]]
                        hi += 1
                    del t.keys[lo:hi]
                elif t.data.pop(op.key, None) is not None:
                    del t.keys[bisect.bisect_left(t.keys, op.key)]


class _SortedTable:
    __slots__ = ("data", "keys")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            bisect.insort(self.keys, key)
        self.data[key] = value
