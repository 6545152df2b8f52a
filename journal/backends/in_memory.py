"""An in-memory store: the same rules as LMDB, for fast tests and `exit`-style experiments."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from .._codec import DEFAULT_MAX_ENTRY_BYTES
from .._store import Capability
from .._tables import MemoryTables
from ..kv._rules import TABLES, Txn, prefix_end
from ..kv._store import KVStore

if TYPE_CHECKING:
    from .._live import MemoryChannel
    from ..limits import MemoryLimits

T = TypeVar("T")


class _Table:
    """A table's rows, and its keys in order for range scans.

    New keys wait in `pending` until a scan, a delete or `last` needs the order: then a few are
    inserted one by one and many are sorted in at once. Inserting each key into one long sorted
    list moves the keys after it, so filling a table in bulk (a 100,000-invocation listing)
    cost the square of its size; a sort of two sorted runs is one merge."""

    __slots__ = ("data", "_keys", "pending")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self.pending: list[bytes] = []

    def add(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            self.pending.append(key)
        self.data[key] = value

    @property
    def keys(self) -> list[bytes]:
        pending = self.pending
        if pending:
            keys = self._keys
            if len(pending) < 16:
                for key in pending:
                    bisect.insort(keys, key)
            else:
                pending.sort()
                keys += pending
                keys.sort()
            self.pending = []
        return self._keys


class _MemoryTxn(Txn):
    def __init__(self, tables: dict[str, _Table]) -> None:
        self._tables = tables

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].data.get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._tables[table].add(key, bytes(value))

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        t = self._tables[table]
        if key in t.data:
            return False
        t.add(key, bytes(value))
        return True

    def delete(self, table: str, key: bytes) -> None:
        t = self._tables[table]
        if t.data.pop(key, None) is not None:
            keys = t.keys
            del keys[bisect.bisect_left(keys, key)]

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        t = self._tables[table]
        keys = t.keys
        i = bisect.bisect_left(keys, start if start is not None else prefix)
        # A chunk at a time, each a copy, so callers may delete while iterating; copying the
        # whole rest of the table for each scan cost as much as the table's size.
        while True:
            chunk = keys[i:i + 64]
            if not chunk:
                return
            for key in chunk:
                if not key.startswith(prefix):
                    return
                value = t.data.get(key)
                if value is not None:  # (deleted meanwhile by the caller)
                    yield key, value
            keys = t.keys
            i = bisect.bisect_right(keys, chunk[-1])

    def last(self, table: str, prefix: bytes) -> bytes | None:
        keys = self._tables[table].keys
        end = prefix_end(prefix)
        i = (bisect.bisect_left(keys, end) if end is not None else len(keys)) - 1
        return keys[i] if i >= 0 and keys[i].startswith(prefix) else None


class MemoryStore(MemoryTables, KVStore):
    """A store held in this process's memory. Lost when the process exits."""

    capabilities = frozenset({Capability.CANCEL_COUNTER, Capability.LEASE_AT_CREATE, Capability.TABLES})

    def __init__(self, *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        self.path = None
        self.max_entry_bytes = max_entry_bytes
        self._tables = {name: _Table() for name in TABLES}
        self._listing_built = True  # empty: the listing index is complete from the start
        self._ready_built = True  # (and the run queue)
        self._lock = threading.RLock()
        self._live: MemoryChannel | None = None
        self._limits: MemoryLimits | None = None

    def limits(self) -> MemoryLimits:
        with self._lock:
            if self._limits is None:
                from ..limits import MemoryLimits

                self._limits = MemoryLimits()
            return self._limits

    def live(self) -> MemoryChannel:
        with self._lock:
            if self._live is None:
                from .._live import MemoryChannel

                self._live = MemoryChannel()
            return self._live

    @contextmanager
    def _read(self) -> Iterator[Txn]:
        with self._lock:
            yield _MemoryTxn(self._tables)

    def _transact(self, work: Callable[[Txn], T]) -> T:
        with self._lock:
            return work(_MemoryTxn(self._tables))

    def __repr__(self) -> str:
        return "MemoryStore()"
