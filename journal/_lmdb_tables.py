"""The `Tables` protocol for `LmdbStore`: each table is a named sub-database of the store's
environment, and a batch is one write transaction (see `journal._tables` for the rules)."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import lmdb

from ._tables import TableDeletePrefix, TablePut, TableOp, check_key, check_ops, check_scan, check_table, prefix_end

# Sub-database names are prefixed so a table can never be one of the journal's own.
_PREFIX = "table."
# Opening a sub-database writes to LMDB's main database: one opener at a time per process.
_open_lock = threading.Lock()


class LmdbTables:
    """Mixed into `LmdbStore`, whose `_env`, `_dbs`, `_read`, `_transact` and `sync` it uses."""

    _env: lmdb.Environment
    _dbs: dict[str, Any]
    readonly: bool

    def _table_db(self, table: str, create: bool) -> Any:
        name = _PREFIX + check_table(table)
        db = self._dbs.get(name)
        if db is not None:
            return db
        with _open_lock:
            db = self._dbs.get(name)
            while db is None:
                try:
                    db = self._env.open_db(name.encode(), create=create and not self.readonly)
                except lmdb.NotFoundError:
                    return None  # never written: reads see an empty table
                except lmdb.MapResizedError:
                    self._env.set_mapsize(0)
                except lmdb.MapFullError:
                    self._grow()  # type: ignore[attr-defined]
            self._dbs[name] = db
        return db

    def table_get(self, table: str, key: bytes) -> bytes | None:
        key = check_key(key)
        db = self._table_db(table, create=False)
        if db is None:
            return None
        with self._read() as txn:  # type: ignore[attr-defined]
            value = txn._txn.get(key, db=db)
            return None if value is None else bytes(value)

    def table_scan(self, table: str, prefix: bytes = b"", *, start: bytes | None = None,
                   reverse: bool = False, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(prefix, start, limit)
        db = self._table_db(table, create=False)
        if db is None or limit == 0:
            return []
        out: list[tuple[bytes, bytes]] = []
        with self._read() as txn:  # type: ignore[attr-defined]
            with txn._txn.cursor(db=db) as cursor:
                if reverse:
                    items = _backward(cursor, prefix, start)
                else:
                    found = cursor.set_range(start if start is not None else prefix)
                    items = cursor.iternext() if found else iter(())
                for key, value in items:
                    if not key.startswith(prefix):
                        break
                    out.append((bytes(key), bytes(value)))
                    if limit is not None and len(out) >= limit:
                        break
        return out

    def table_write(self, ops: Sequence[TableOp], *, durable: bool = True) -> None:
        check_ops(ops)
        if not ops:
            return
        dbs = {op.table: self._table_db(op.table, create=True) for op in ops}

        def work(txn: Any) -> None:
            raw = txn._txn
            for op in ops:
                db = dbs[op.table]
                if isinstance(op, TablePut):
                    raw.put(op.key, op.value, db=db, overwrite=op.overwrite)
                elif isinstance(op, TableDeletePrefix):
                    with raw.cursor(db=db) as cursor:
                        if cursor.set_range(op.prefix) if op.prefix else cursor.first():
                            while cursor.key().startswith(op.prefix):
                                if not cursor.delete():
                                    break
                else:
                    raw.delete(op.key, db=db)

        self._transact(work)  # type: ignore[attr-defined]
        if durable:
            self.sync()  # type: ignore[attr-defined]


def _backward(cursor: lmdb.Cursor, prefix: bytes, start: bytes | None):
    """Position `cursor` on the last key <= `start` (or the last key with `prefix`), then walk back."""
    target = start if start is not None else prefix_end(prefix)
    if target is None:
        found = cursor.last()
    elif cursor.set_range(target):
        found = True if start is not None and cursor.key() == start else cursor.prev()
    else:
        found = cursor.last()
    return cursor.iterprev() if found else iter(())
