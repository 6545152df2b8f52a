"""The `Tables` protocol for `LmdbStore` (see `journal._tables` for the rules).

Every table lives in one sub-database, `tables`, its keys prefixed by the table's name and
a NUL (names have no NUL, so tables never share keys): opening the environment needs one
more sub-database whatever the number of tables, and a batch touching several tables
dirties one B-tree, which keeps the fsync after it small. A batch is one write transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import lmdb

from ..._tables import (
    TableDeletePrefix,
    TableOp,
    TablePut,
    check_key,
    check_ops,
    check_scan,
    prefix_end,
    table_prefix,
)
from ._subdbs import open_db

if TYPE_CHECKING:
    from ._txn import Reading

T = TypeVar("T")

_SUBDB = b"tables"
# Opening a sub-database writes to LMDB's main database: one opener at a time per process.
_open_lock = threading.Lock()


class LmdbTables:
    """Mixed into `LmdbStore`, whose `_env`, `_dbs`, `_read`, `_transact` and `sync` it uses."""

    _env: lmdb.Environment
    _dbs: dict[str, Any]
    readonly: bool

    if TYPE_CHECKING:  # what the host store provides
        def _read(self) -> Reading: ...
        def _transact(self, work: Callable[[Any], T]) -> T: ...
        def _grow(self) -> None: ...
        def sync(self) -> None: ...

    def _tables_db(self, create: bool) -> Any:
        db = self._dbs.get("tables")
        if db is not None:
            return db
        with _open_lock:
            db = self._dbs.get("tables")
            while db is None:
                try:
                    db = open_db(self._env, _SUBDB, create=create and not self.readonly)
                except lmdb.NotFoundError:
                    return None  # never written: reads see empty tables
                except lmdb.MapResizedError:
                    self._env.set_mapsize(0)
                except lmdb.MapFullError:
                    self._grow()
            self._dbs["tables"] = db
        return db

    def table_get(self, table: str, key: bytes) -> bytes | None:
        key = table_prefix(table) + check_key(key)
        db = self._tables_db(create=False)
        if db is None:
            return None
        with self._read() as txn:
            value = txn._txn.get(key, db=db)
            return None if value is None else bytes(value)

    def table_scan(self, table: str, prefix: bytes = b"", *, start: bytes | None = None,
                   reverse: bool = False, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(prefix, start, limit)
        db = self._tables_db(create=False)
        if db is None or limit == 0:
            return []
        name = table_prefix(table)
        prefix, start = name + prefix, None if start is None else name + start
        out: list[tuple[bytes, bytes]] = []
        with self._read() as txn:
            with txn._txn.cursor(db=db) as cursor:
                if reverse:
                    items = _backward(cursor, prefix, start)
                else:
                    found = cursor.set_range(start if start is not None else prefix)
                    items = cursor.iternext() if found else iter(())
                for key, value in items:
                    if not key.startswith(prefix):
                        break
                    out.append((bytes(key[len(name):]), bytes(value)))
                    if limit is not None and len(out) >= limit:
                        break
        return out

    def table_write(self, ops: Sequence[TableOp], *, durable: bool = True) -> None:
        check_ops(ops)
        if not ops:
            return
        db = self._tables_db(create=True)

        def work(txn: Any) -> None:
            raw = txn._txn
            for op in ops:
                name = table_prefix(op.table)
                if isinstance(op, TablePut):
                    raw.put(name + op.key, op.value, db=db, overwrite=op.overwrite)
                elif isinstance(op, TableDeletePrefix):
                    prefix = name + op.prefix
                    with raw.cursor(db=db) as cursor:
                        if cursor.set_range(prefix):
                            while cursor.key().startswith(prefix):
                                if not cursor.delete():
                                    break
                else:
                    raw.delete(name + op.key, db=db)

        self._transact(work)
        if durable:
            self.sync()


def _backward(cursor: lmdb.Cursor[bytes], prefix: bytes, start: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Position `cursor` on the last key <= `start` (or the last key with `prefix`), then walk back."""
    target = start if start is not None else prefix_end(prefix)
    if target is None:
        found = cursor.last()
    elif cursor.set_range(target):
        found = True if start is not None and cursor.key() == start else cursor.prev()
    else:
        found = cursor.last()
    return cursor.iterprev() if found else iter(())
