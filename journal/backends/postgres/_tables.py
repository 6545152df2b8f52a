"""The `Tables` protocol for `PostgresStore` (see `journal._tables` for the rules).

As in LMDB (`journal/backends/lmdb/_tables.py`), every table lives in one table, `journal.tables`, its keys
prefixed by the table's name and a NUL, so tables never share keys and any number of them
needs no DDL. `bytea` compares byte by byte, so key ranges come back in the order the
rules ask for. A batch is one transaction, durable as `durable=` says (`synchronous_commit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

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

if TYPE_CHECKING:
    from ._rows import PgTxn

T = TypeVar("T")

TABLE = "journal.tables"
CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (k bytea PRIMARY KEY, v bytea NOT NULL)"


class PostgresTables:
    """Mixed into `PostgresStore`, whose `_read` and `_write` transactions it uses."""

    if TYPE_CHECKING:  # what the host store provides
        def _read(self) -> AbstractContextManager[PgTxn]: ...
        def _write(self, work: Callable[[PgTxn], T], *, durable: bool, block: bool = True) -> T: ...

    def table_get(self, table: str, key: bytes) -> bytes | None:
        key = table_prefix(table) + check_key(key)
        with self._read() as txn:
            row = txn.cursor.execute(f"SELECT v FROM {TABLE} WHERE k = %s", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def table_scan(self, table: str, prefix: bytes = b"", *, start: bytes | None = None,
                   reverse: bool = False, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(prefix, start, limit)
        name = table_prefix(table)
        if limit == 0:
            return []
        low, high = name + prefix, prefix_end(name + prefix)  # a name ends in NUL: there is a bound
        args: list[bytes | int | None]
        where, args = "k >= %s AND k < %s", [low, high]
        if start is not None:
            # mypy infers the lists in a conditional expression without the declared type
            where, args = ("k >= %s AND k <= %s", [low, name + start]) if reverse else (  # type: ignore[assignment]
                "k >= %s AND k < %s", [name + start, high])
        sql = f"SELECT k, v FROM {TABLE} WHERE {where} ORDER BY k {'DESC' if reverse else 'ASC'}"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        with self._read() as txn:
            rows = txn.cursor.execute(sql, args).fetchall()
        return [(bytes(k[len(name):]), bytes(v)) for k, v in rows]

    def table_write(self, ops: Sequence[TableOp], *, durable: bool = True) -> None:
        check_ops(ops)
        if not ops:
            return
        single = _one_statement(ops, durable)
        if single is not None:
            # One statement is a transaction of its own: no BEGIN and COMMIT round trips. It
            # sets its own synchronous_commit (for itself only), so the session's setting
            # stays as it is: no SET round trip when durable and non-durable batches alternate,
            # as a checkpoint and a task's writes do.
            sql, args = single
            session = getattr(self, "_sync_commit", None)
            self._write(lambda txn: txn.cursor.execute(sql, args), durable=durable if session is None else session,
                        block=False)
            return

        def work(txn: Any) -> None:
            cur = txn.cursor
            for op in ops:
                name = table_prefix(op.table)
                if isinstance(op, TablePut):
                    conflict = "DO UPDATE SET v = EXCLUDED.v" if op.overwrite else "DO NOTHING"
                    cur.execute(f"INSERT INTO {TABLE} (k, v) VALUES (%s, %s) ON CONFLICT (k) {conflict}",
                                (name + op.key, bytes(op.value)))
                elif isinstance(op, TableDeletePrefix):
                    low = name + op.prefix
                    cur.execute(f"DELETE FROM {TABLE} WHERE k >= %s AND k < %s", (low, prefix_end(low)))
                else:
                    cur.execute(f"DELETE FROM {TABLE} WHERE k = %s", (name + op.key,))

        self._write(work, durable=durable)


_SQL: dict[tuple[int, int], str] = {}


def _one_statement(ops: Sequence[TableOp], durable: bool) -> tuple[str, list[Any]] | None:
    """A batch of puts of distinct keys (what a checkpoint or a task's writes are) as one
    statement, or None: the puts that keep an existing value, then those that replace it,
    in one `INSERT` and a data-modifying `WITH`. With distinct keys the order of the puts
    cannot matter, so the statement does what applying them one by one would do. The
    statement's first parameter is its transaction's `synchronous_commit`."""
    keep: list[bytes] = []
    replace: list[bytes] = []
    keys = set()
    for op in ops:
        if op.__class__ is not TablePut:
            return None
        key = table_prefix(op.table) + op.key
        if key in keys:
            return None
        keys.add(key)
        (replace if op.overwrite else keep).extend((key, bytes(op.value)))
    shape = (len(keep) // 2, len(replace) // 2)
    sql = _SQL.get(shape)
    if sql is None:
        sql = _put_sql(*shape)
        if len(_SQL) < 64:  # the common batch sizes; psycopg prepares each after a few uses
            _SQL[shape] = sql
    return sql, ["on" if durable else "off", *keep, *replace]


def _put_sql(keep: int, replace: int) -> str:
    def insert(rows: int, conflict: str) -> str:
        values = ", ".join(["(%s::bytea, %s::bytea)"] * rows)
        return f"INSERT INTO {TABLE} (k, v) SELECT x.k, x.v FROM sc, (VALUES {values}) AS x (k, v) ON CONFLICT (k) {conflict}"

    # `set_config(..., true)` lasts until the end of the statement's own transaction, and a
    # commit reads synchronous_commit when it happens: this transaction's, not the session's.
    parts = ["sc AS MATERIALIZED (SELECT set_config('synchronous_commit', %s, true))"]
    if keep and replace:
        # A data-modifying WITH runs to completion whether or not the main statement reads it.
        parts.append(f"kept AS ({insert(keep, 'DO NOTHING')})")
    main = insert(replace, "DO UPDATE SET v = EXCLUDED.v") if replace else insert(keep, "DO NOTHING")
    return f"WITH {', '.join(parts)} {main}"
