"""Limits on PostgreSQL: three tables of `(k, v)` rows beside the journal's, on a connection of
their own with `synchronous_commit` off (a unit acquired or released waits for no disk; a
crash of the server may forget the last ones, and the units of the processes that crash
with it come back through their sessions anyway).

Row locks keep every process's transactions on one limited name in line: a transaction locks
the state rows of its names in name order (the runtime sorts them), so two never wait on each
other. A holder or a waiter is dead once no session holds its owner's advisory lock
(`_owners.py`): the server ended the session of its process.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import StoreError
from ...kv._rules import Txn, prefix_end
from ...limits import LIMIT_TABLES, LimitTable, Request, _logic
from ...limits._model import Blocked, Granted
from ...limits._table import now_us
from ._rows import SCHEMA, owner_lock_key
from ._urls import redact_url

if TYPE_CHECKING:
    from ._store import PostgresStore

T = TypeVar("T")

_LOCK_CLASS = 5  # advisory lock class of a state row that does not exist yet
_DDL = [f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{table} (k bytea PRIMARY KEY, v bytea NOT NULL)"
        for table in LIMIT_TABLES]
_ALIVE = ("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
          "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
          "AND classid = %s::int::oid AND objid = %s::int::oid AND objsubid = 2)")


class _LimitTxn(Txn):
    def __init__(self, cursor: Any, write: bool) -> None:
        self._cur = cursor
        self._write = write
        self._alive: dict[str, bool] = {}

    def get(self, table: str, key: bytes) -> bytes | None:
        sql = f"SELECT v FROM {SCHEMA}.{table} WHERE k = %s"
        if not (self._write and table == "limit_state"):
            row = self._cur.execute(sql, (key,)).fetchone()
            return None if row is None else bytes(row[0])
        row = self._cur.execute(sql + " FOR UPDATE", (key,)).fetchone()
        if row is None:  # nothing to lock yet: lock its key, then look again
            self._cur.execute("SELECT pg_advisory_xact_lock(%s::int, %s::int)",
                              (_LOCK_CLASS, zlib.crc32(key) & 0x7FFFFFFF))
            row = self._cur.execute(sql + " FOR UPDATE", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._cur.execute(f"INSERT INTO {SCHEMA}.{table} (k, v) VALUES (%s, %s) "
                          "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", (key, value))

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        cur = self._cur.execute(f"INSERT INTO {SCHEMA}.{table} (k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING",
                                (key, value))
        return bool(cur.rowcount == 1)

    def delete(self, table: str, key: bytes) -> None:
        self._cur.execute(f"DELETE FROM {SCHEMA}.{table} WHERE k = %s", (key,))

    def _range(self, table: str, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        low = start if start is not None and start > prefix else prefix
        high = prefix_end(prefix)
        if high is None:
            return f"SELECT k, v FROM {SCHEMA}.{table} WHERE k >= %s ORDER BY k", [low]
        return f"SELECT k, v FROM {SCHEMA}.{table} WHERE k >= %s AND k < %s ORDER BY k", [low, high]

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        sql, args = self._range(table, prefix, start)
        return iter([(bytes(k), bytes(v)) for k, v in self._cur.execute(sql, args).fetchall()])

    def scan_some(self, table: str, prefix: bytes, start: bytes, limit: int) -> Iterator[tuple[bytes, bytes]]:
        sql, args = self._range(table, prefix, start)
        return iter([(bytes(k), bytes(v)) for k, v in self._cur.execute(sql + " LIMIT %s", [*args, limit]).fetchall()])

    def last(self, table: str, prefix: bytes) -> bytes | None:
        raise NotImplementedError("the limits' rules never ask for the last key")

    def owner_alive(self, owner: str, host: str, pid: int) -> bool:
        known = self._alive.get(owner)
        if known is None:
            known = self._alive[owner] = bool(self._cur.execute(_ALIVE, owner_lock_key(owner)).fetchone()[0])
        return known


class PostgresLimits(LimitTable):
    """`LimitTable` of a PostgreSQL store."""

    blocking = True

    def __init__(self, store: PostgresStore) -> None:
        import psycopg

        self._store = store
        self._psycopg = psycopg
        self._lock = threading.Lock()
        self._session: Any = None
        self._ready = False

    def _run(self, work: Callable[[_LimitTxn], T], *, write: bool, durable: bool = False) -> T:
        connector = self._store._connector
        with self._lock:
            for attempt in range(3):
                session = self._session
                if session is None:
                    session = self._session = connector.open("limits")
                    session.conn.autocommit = True
                    session.conn.execute("SET synchronous_commit = off")
                conn = session.conn
                try:
                    with conn.cursor() as cur:
                        if not self._ready:
                            for statement in _DDL:
                                cur.execute(statement)
                            self._ready = True
                        cur.execute("BEGIN")
                        if durable:
                            cur.execute("SET LOCAL synchronous_commit = on")
                        result = work(_LimitTxn(cur, write))
                        cur.execute("COMMIT")
                        return result
                except self._psycopg.errors.DeadlockDetected:
                    _rollback(conn)
                    continue
                except self._psycopg.Error as exc:
                    if not connector.is_fault(exc, conn):
                        _rollback(conn)
                        raise StoreError(f"PostgreSQL error in {redact_url(self._store.path)}: {exc}") from None
                    self._session = None
                    connector.lost(session, exc)
                    if attempt == 2:
                        raise StoreError(f"PostgreSQL error in {redact_url(self._store.path)}: {exc}") from None
                except BaseException:
                    _rollback(conn)
                    raise
            raise StoreError(f"PostgreSQL kept refusing a limits transaction in {redact_url(self._store.path)}")

    def _transact(self, work: Callable[[Txn], T], *, durable: bool = False) -> T:
        return self._run(work, write=True, durable=durable)

    def _read(self, work: Callable[[Txn], T]) -> T:
        return self._run(work, write=False)

    def acquire(self, request: Request) -> Granted | Blocked:
        # The owner's advisory lock is what tells others it lives: held before it holds a unit.
        self._store._lives.hold(request.owner)
        now = now_us()
        return self._run(lambda txn: _logic.acquire(txn, request, now, txn.owner_alive), write=True)

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._store._connector.forget(self._session)
                self._session = None


def _rollback(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.execute("ROLLBACK")
    except Exception:  # the connection is being given up anyway
        pass
