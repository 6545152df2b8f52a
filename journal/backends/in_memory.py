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
    __slots__ = ("data", "keys")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []  # kept sorted for range scans


class _MemoryTxn(Txn):
    def __init__(self, tables: dict[str, _Table]) -> None:
        self._tables = tables

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].data.get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        t = self._tables[table]
        if key not in t.data:
            bisect.insort(t.keys, key)
        t.data[key] = bytes(value)

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        if key in self._tables[table].data:
            return False
        self.put(table, key, value)
        return True

    def delete(self, table: str, key: bytes) -> None:
        t = self._tables[table]
        if t.data.pop(key, None) is not None:
            del t.keys[bisect.bisect_left(t.keys, key)]

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        t = self._tables[table]
        i = bisect.bisect_left(t.keys, start if start is not None else prefix)
        # Snapshot the slice so callers may delete while iterating.
        for key in t.keys[i:]:
            if not key.startswith(prefix):
                break
            yield key, t.data[key]

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
