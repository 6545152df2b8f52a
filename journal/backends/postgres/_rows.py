"""The PostgreSQL schema of the journal, and the transactions `KVStore`'s rules run in.

The rules (`journal/kv/_rules.py`) speak of ordered keys, as LMDB stores them. Here a row that
belongs to one invocation holds that invocation's id in a column of its own,
`invocation_id`, first in its primary key: the column a distributed PostgreSQL (Citus)
would shard by. `_PgTxn` turns each key into its columns and back.

| table | primary key | the rules' key | index for the scans across invocations |
| --- | --- | --- | --- |
| invocations | invocation_id | id | |
| entries | invocation_id, seq | id NUL seq(4) | |
| leases | invocation_id | id | |
| promises | invocation_id, name | id NUL name | |
| status | invocation_id, status | status NUL id | (status, invocation_id) |
| timers | invocation_id, wake_at | wake_at(8) id | (wake_at, invocation_id) |
| inbox, messages, published, topics | invocation_id, name | id NUL name | |
| state, keyq, meta, listing | k | the key | |

`state` and `keyq` belong to a key (a conversation thread) rather than to one invocation,
`meta` to the store, and `listing` (the index that pages invocations newest first,
`journal/kv/_listing.py`) to all of them: they keep `(k, v)`. Ids hold no NUL (`_ids.validate_id`), so a
key splits at its first NUL.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ...kv._rules import TABLES, Txn, entry_key, prefix_end
from ._version import FORMAT_VERSION as FORMAT_VERSION

SCHEMA = "journal"
# What a worker LISTENs on: a NOTIFY on it says an invocation may run now (one became runnable,
# or a limit with a line gave a unit back).
CHANNEL = "journal_runnable"
LOCK_CLASS = 0x6A6F  # high half of the advisory lock keys of owners ("jo")
_LOCKED = {"invocations": 1, "leases": 2}  # tables whose rows a write transaction locks when it reads them
_PREFIX_LOCK = 3  # the advisory lock class of a prefix that `last` reads in a write transaction


# Counts (`Txn.add`) added in the database, a u64 BE in `v` read as a bigint and back, in key
# order (two transactions adding to the same rows take them in one order: no deadlock).
_AS_BIGINT = "('x' || encode({}, 'hex'))::bit(64)::bigint"
_ADD = ("INSERT INTO {table} AS t (k, v) SELECT u.k, int8send(u.d) FROM unnest(%b::bytea[], %b::bigint[]) "
        "AS u (k, d) ORDER BY u.k ON CONFLICT (k) DO UPDATE SET v = int8send("
        + _AS_BIGINT.format("t.v") + " + " + _AS_BIGINT.format("EXCLUDED.v") + ")")


def owner_lock_key(owner: str) -> tuple[int, int]:
    """The advisory lock `(classid, objid)` that a live owner's session holds."""
    return LOCK_CLASS, zlib.crc32(owner.encode()) & 0x7FFFFFFF


def _split_nul(key: bytes) -> tuple[bytes, bytes]:
    head, _, tail = key.partition(b"\x00")
    return head, tail


class _Layout:
    """One table: its columns (the key's parts, then `v`), how a key splits into them and
    joins back, and the DDL."""

    def __init__(self, table: str, columns: tuple[str, ...], types: tuple[str, ...],
                 split: Callable[[bytes], tuple[Any, ...]], join: Callable[[tuple[Any, ...]], bytes],
                 pk: tuple[str, ...], index: tuple[str, ...] | None = None) -> None:
        self.table, self.columns, self.split, self.join = f"{SCHEMA}.{table}", columns, split, join
        where = " AND ".join(f"{c} = %s" for c in columns)
        names = ", ".join((*columns, "v"))
        values = ", ".join(["%s"] * (len(columns) + 1))
        conflict = ", ".join(pk)
        self.get = f"SELECT v FROM {self.table} WHERE {where}"
        self.get_locked = self.get + " FOR UPDATE"
        self.put = (f"INSERT INTO {self.table} ({names}) VALUES ({values}) "
                    f"ON CONFLICT ({conflict}) DO UPDATE SET v = EXCLUDED.v")
        self.insert = f"INSERT INTO {self.table} ({names}) VALUES ({values}) ON CONFLICT ({conflict}) DO NOTHING"
        self.delete = f"DELETE FROM {self.table} WHERE {where}"
        # Many rows in one statement whose text does not depend on how many: arrays, one per
        # column (psycopg parses a long query's text again at each call, and prepares it
        # only once it has seen the same text a few times), sent in binary (as text every
        # element is escaped). The client's CPU for a batch of 100 sends: 38-61 µs a send
        # with a VALUES list of the rows, 17 µs with these.
        arrays = ", ".join(f"%b::{t}[]" for t in (*types, "bytea"))
        # Each key looked up by the primary key, whatever the planner thinks of the table's
        # size (a join of the keys would scan a small table whole, and a generic plan does
        # not know how many keys come): a subquery per key, kept one by its LIMIT.
        on = " AND ".join(f"t.{c} = k.{c}" for c in columns)
        self.get_many = (f"SELECT {', '.join(f'k.{c}' for c in columns)}, x.v "
                         f"FROM unnest({arrays.rsplit(', ', 1)[0]}) AS k ({', '.join(columns)}) "
                         f"CROSS JOIN LATERAL (SELECT t.v FROM {self.table} t WHERE {on} LIMIT 1) x")
        self.put_many = (f"INSERT INTO {self.table} ({names}) SELECT * FROM unnest({arrays}) "
                         f"ON CONFLICT ({conflict}) DO UPDATE SET v = EXCLUDED.v")
        self.select = f"SELECT {', '.join(columns)}, v FROM {self.table}"
        # Rows removed many at a time, the keys as arrays too (`flush`).
        self.delete_many = (f"DELETE FROM {self.table} t USING unnest({arrays.rsplit(', ', 1)[0]}) AS k "
                            f"({', '.join(columns)}) WHERE {on}")
        cols = ", ".join(f"{c} {t} NOT NULL" for c, t in zip(columns, types, strict=True))
        self.ddl = [f"CREATE TABLE IF NOT EXISTS {self.table} ({cols}, v bytea NOT NULL, PRIMARY KEY ({conflict}))"]
        if index is not None:
            self.ddl.append(f"CREATE INDEX IF NOT EXISTS {table}_by_{index[0]} ON {self.table} ({', '.join(index)})")

    def columns_of(self, keys: Sequence[bytes]) -> list[list[Any]]:
        """The keys as one list per column (the arrays of `put_many` and `delete_many`)."""
        if len(self.columns) == 1:
            return [list(keys)]
        return [list(column) for column in zip(*(self.split(key) for key in keys), strict=True)]

    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        """The query for the rules' `scan(prefix, start)`, in key order."""
        low = start if start is not None and start > prefix else prefix
        high = prefix_end(prefix)
        (first,) = self.columns
        if high is None:
            return f"{self.select} WHERE {first} >= %s ORDER BY {first}", [low]
        return f"{self.select} WHERE {first} >= %s AND {first} < %s ORDER BY {first}", [low, high]

    def last(self, prefix: bytes) -> tuple[str, list[Any]]:
        """The query for the rules' `last(prefix)`: the greatest key under `prefix`."""
        high = prefix_end(prefix)
        (first,) = self.columns
        below = "" if high is None else f" AND {first} < %s"
        return (f"SELECT {first} FROM {self.table} WHERE {first} >= %s{below} ORDER BY {first} DESC LIMIT 1",
                [prefix] if high is None else [prefix, high])


class _Entries(_Layout):
    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        id_bytes = _one_invocation(prefix)
        seq = 0 if start is None or start <= prefix else int.from_bytes(start[len(prefix):], "big")
        return f"{self.select} WHERE invocation_id = %s AND seq >= %s ORDER BY seq", [id_bytes, seq]


class _Promises(_Layout):
    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        id_bytes = _one_invocation(prefix)
        low = b"" if start is None or start <= prefix else start[len(prefix):]
        return f"{self.select} WHERE invocation_id = %s AND name >= %s ORDER BY name", [id_bytes, low]


class _ByInvocation(_Layout):
    """A table of rows that belong to one invocation, keyed `id NUL rest` (`rest` in `name`):
    scanned by any prefix within one invocation, and its greatest key read without a scan."""

    def _range(self, prefix: bytes, start: bytes | None) -> tuple[bytes, bytes, bytes | None]:
        id_bytes, _, rest = prefix.partition(b"\x00")
        if b"\x00" not in prefix:
            raise ValueError(f"this table is scanned within one invocation only, not by {prefix!r}")
        low = start[len(id_bytes) + 1:] if start is not None and start > prefix else rest
        return id_bytes, low, prefix_end(rest) if rest else None

    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        id_bytes, low, high = self._range(prefix, start)
        below = "" if high is None else " AND name < %s"
        return (f"{self.select} WHERE invocation_id = %s AND name >= %s{below} ORDER BY name",
                [id_bytes, low] + ([] if high is None else [high]))

    def last(self, prefix: bytes) -> tuple[str, list[Any]]:
        id_bytes, low, high = self._range(prefix, None)
        below = "" if high is None else " AND name < %s"
        return (f"SELECT invocation_id, name FROM {self.table} WHERE invocation_id = %s AND name >= %s{below} "
                "ORDER BY name DESC LIMIT 1", [id_bytes, low] + ([] if high is None else [high]))


def _by_invocation(table: str) -> _ByInvocation:
    return _ByInvocation(table, ("invocation_id", "name"), ("bytea", "bytea"), _split_nul,
                         lambda r: bytes(r[0]) + b"\x00" + bytes(r[1]), ("invocation_id", "name"))


class _Status(_Layout):
    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        status = _one_invocation(prefix).decode()
        low = b"" if start is None or start <= prefix else start[len(prefix):]
        return (f"{self.select} WHERE status = %s AND invocation_id >= %s ORDER BY invocation_id",
                [status, low])


class _Timers(_Layout):
    def scan(self, prefix: bytes, start: bytes | None) -> tuple[str, list[Any]]:
        if prefix or start:
            raise ValueError("timers are scanned from the earliest only")
        return f"{self.select} ORDER BY wake_at, invocation_id", []


def _one_invocation(prefix: bytes) -> bytes:
    """`id NUL` (or `status NUL`): the first key part, which the scan is confined to."""
    if not prefix.endswith(b"\x00") or prefix.count(b"\x00") != 1:
        raise ValueError(f"this table is scanned by its first key part only, not by {prefix!r}")
    return prefix[:-1]


def _split_status(key: bytes) -> tuple[str, bytes]:
    status, invocation_id = _split_nul(key)
    return status.decode(), invocation_id


def _whole(key: bytes) -> tuple[bytes]:
    return (key,)


def _join_whole(row: tuple[Any, ...]) -> bytes:
    return bytes(row[0])


_ID = ("invocation_id",)
LAYOUTS: dict[str, _Layout] = {
    "meta": _Layout("meta", ("k",), ("bytea",), _whole, _join_whole, ("k",)),
    "state": _Layout("state", ("k",), ("bytea",), _whole, _join_whole, ("k",)),
    "keyq": _Layout("keyq", ("k",), ("bytea",), _whole, _join_whole, ("k",)),
    "listing": _Layout("listing", ("k",), ("bytea",), _whole, _join_whole, ("k",)),
    "invocations": _Layout("invocations", _ID, ("bytea",), _whole, _join_whole, _ID),
    "leases": _Layout("leases", _ID, ("bytea",), _whole, _join_whole, _ID),
    "entries": _Entries("entries", ("invocation_id", "seq"), ("bytea", "integer"),
                        lambda k: (k[:-5], int.from_bytes(k[-4:], "big")),
                        lambda r: entry_key(bytes(r[0]), r[1]), ("invocation_id", "seq")),
    "promises": _Promises("promises", ("invocation_id", "name"), ("bytea", "bytea"), _split_nul,
                          lambda r: bytes(r[0]) + b"\x00" + bytes(r[1]), ("invocation_id", "name")),
    "status": _Status("status", ("status", "invocation_id"), ("text", "bytea"),
                      _split_status,
                      lambda r: r[0].encode() + b"\x00" + bytes(r[1]), ("invocation_id", "status"),
                      index=("status", "invocation_id")),
    "timers": _Timers("timers", ("wake_at", "invocation_id"), ("bigint", "bytea"),
                      lambda k: (int.from_bytes(k[:8], "big"), k[8:]),
                      lambda r: r[0].to_bytes(8, "big") + bytes(r[1]), ("invocation_id", "wake_at"),
                      index=("wake_at", "invocation_id")),
    "inbox": _by_invocation("inbox"),
    "messages": _by_invocation("messages"),
    "published": _by_invocation("published"),
    "topics": _by_invocation("topics"),
}
assert set(LAYOUTS) == set(TABLES)
# Tables added without a new format version: created when a store of this format is opened.
ADDED_TABLES = ("listing", "inbox", "messages", "published", "topics")
DDL = [statement for layout in LAYOUTS.values() for statement in layout.ddl]

_CLAIM = {table: f"SELECT 1 FROM {SCHEMA}.{table} WHERE invocation_id = %s FOR UPDATE SKIP LOCKED"
          for table in _LOCKED}


# The lease row is locked (FOR KEY SHARE) for the rest of the transaction, so an Acquire,
# which reads it FOR UPDATE, waits for this append to commit, as it would for the generic
# path. The rows of a batch go in one statement, a VALUES list: one round trip however
# many steps the batch holds. (A pipeline of one INSERT per row measured slower, and an
# `unnest` of arrays 3x slower.)
def _fast_append_sql(rows: int, *, numbered: bool = False) -> str:
    """`numbered`: `$1, $2, ...` placeholders, for libpq itself (`_loop.py`),
    rather than psycopg's `%s`; the types are then given when the statement is prepared."""
    if numbered:
        values = ", ".join(f"(${4 * i + 1}, ${4 * i + 2}, ${4 * i + 3}, ${4 * i + 4})" for i in range(rows))
    else:
        values = ", ".join(["(%s::bytea, %s::integer, %s::bytea, %s::bytea)"] * rows)
    return (f"INSERT INTO {SCHEMA}.entries (invocation_id, seq, v) SELECT x.i, x.s, x.v "
            f"FROM (VALUES {values}) AS x (i, s, v, lv) WHERE EXISTS (SELECT 1 FROM {SCHEMA}.leases l "
            "WHERE l.invocation_id = x.i AND l.v = x.lv FOR KEY SHARE) "
            "ON CONFLICT (invocation_id, seq) DO NOTHING RETURNING invocation_id, seq")


_FAST_APPEND: dict[int, str] = {}


def fast_append_sql(rows: int) -> str:
    sql = _FAST_APPEND.get(rows)
    if sql is None:
        sql = _fast_append_sql(rows)
        if len(_FAST_APPEND) < 64:  # the common batch sizes; psycopg prepares each after a few uses
            _FAST_APPEND[rows] = sql
    return sql


def fast_append_args(rows: list[tuple[bytes, bytes, bytes, bytes]]) -> list[Any]:
    """`(entry key, data, id, lease bytes)` rows as the statement's parameters."""
    args: list[Any] = []
    for key, data, id_bytes, lease in rows:
        args += (id_bytes, int.from_bytes(key[-4:], "big"), data, lease)
    return args


def inserted_keys(result: list[tuple[Any, ...]]) -> set[bytes]:
    return {entry_key(bytes(i), s) for i, s in result}


def _prefix_hash(table: str, prefix: bytes) -> int:
    return zlib.crc32(table.encode() + b"\x00" + prefix) & 0x7FFFFFFF


_ROWS_A_STATEMENT = 1000  # rows held by a transaction written by one statement at most


def _holdable(table: str) -> bool:
    """Whether a write may be held until `flush`: not a lease (what the append path checks
    against)."""
    return table != "leases"


class PgTxn(Txn):
    """A transaction of the rules on one cursor: each key read or written as its row."""

    __slots__ = ("cursor", "notify", "_write", "leases", "redo", "pipeline", "_held", "_ahead", "_tried", "_adds",
                 "_saved_adds")

    def __init__(self, cursor: Any, *, write: bool = False, redo: bool = False) -> None:
        self.cursor = cursor
        # In a pipeline (`PostgresStore._transact_many`), a statement whose answer nothing
        # reads is sent without waiting for it; reading one waits for every answer before it.
        self.pipeline: Any = None
        # With `hold_writes`, rows written are held here (None: deleted) and written at
        # `flush`, one statement per table, rather than one statement per row: a new
        # invocation writes about ten rows. A read of a held row answers from here; any
        # other read of a table with held rows writes them first.
        self._held: dict[str, dict[bytes, bytes | None]] | None = None
        self._ahead: dict[str, dict[bytes, bytes | None]] = {}  # rows read ahead (`read_ahead`), kept current
        self._tried: dict[tuple[str, bytes], bool] = {}  # prefix locks tried ahead (`try_locks`)
        # Counts to add as the transaction ends (`add`, `finish`), and as they stood at the savepoint.
        self._adds: dict[str, dict[bytes, int]] = {}
        self._saved_adds: dict[str, dict[bytes, int]] | None = None
        self.notify = False
        self._write = write
        self.redo = redo  # a transaction done again after its connection was lost: it may have committed
        self.leases: dict[bytes, bytes] = {}  # lease rows written: what `append_fast` may check against

    def hold_writes(self) -> None:
        self._held = {}

    def flush(self, table: str | None = None) -> None:
        """Write the rows held (of `table`, or all): deletions, then one upsert per table, the
        rows as arrays (a statement's text the same however many: psycopg parses a long
        text again at each call, 11 ms for a VALUES list of 2,560 rows)."""
        held = self._held
        if not held:
            return
        for name in [table] if table is not None else list(held):
            rows = held.pop(name, None)
            if not rows:
                continue
            layout = LAYOUTS[name]
            gone = [k for k, v in rows.items() if v is None]
            kept = [k for k, v in rows.items() if v is not None]
            if gone:
                self.cursor.execute(layout.delete_many, layout.columns_of(gone))
            if kept:
                self.cursor.execute(layout.put_many, [*layout.columns_of(kept), [rows[k] for k in kept]])

    def add(self, table: str, key: bytes, delta: int) -> None:
        """Kept until the transaction ends (`finish`): then one statement adds them all,
        in the database, to the rows as they stand."""
        adds = self._adds.setdefault(table, {})
        adds[key] = adds.get(key, 0) + delta

    def finish(self) -> None:
        """The end of the transaction's work: the rows held, then the counts added."""
        self.flush()
        adds, self._adds = self._adds, {}
        for table, rows in adds.items():
            keys = sorted(k for k, d in rows.items() if d)
            if keys:
                assert LAYOUTS[table].columns == ("k",), table  # (counts live in tables keyed by `k`)
                self.cursor.execute(_ADD.format(table=LAYOUTS[table].table), (keys, [rows[k] for k in keys]))

    def _added(self, table: str) -> None:
        """Before a read of `table`: the counts added to it so far, written (a read sees them)."""
        if self._adds.get(table):
            rows = self._adds.pop(table)
            others, self._adds = self._adds, {table: rows}
            self.finish()
            self._adds = others

    def try_locks(self, table: str, prefixes: Sequence[bytes]) -> None:
        hashes = [_prefix_hash(table, prefix) for prefix in prefixes]
        rows = self.cursor.execute(
            "SELECT pg_try_advisory_xact_lock(%s::int, u.h) FROM unnest(%s::int[]) WITH ORDINALITY AS u (h, n) "
            "ORDER BY u.n", (_PREFIX_LOCK, hashes)).fetchall()
        for prefix, row in zip(prefixes, rows, strict=True):
            self._tried[(table, prefix)] = bool(row[0]) or self._tried.get((table, prefix), False)

    def peek_many(self, table: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        if self._adds:
            self._added(table)
        layout = LAYOUTS[table]
        if not keys or len(layout.columns) != 1:
            return super().peek_many(table, keys)
        if self._held:
            self.flush(table)
        (column,) = layout.columns
        return {bytes(k): bytes(v) for k, v in self.cursor.execute(
            f"SELECT {column}, v FROM {layout.table} WHERE {column} = ANY(%b::bytea[])", (list(keys),)).fetchall()}

    def read_ahead(self, table: str, keys: Sequence[bytes], *, for_update: bool = False) -> None:
        if self._adds:
            self._added(table)
        layout = LAYOUTS[table]
        if not keys or len(layout.columns) != 1:
            return
        (column,) = layout.columns
        if self._held:
            self.flush(table)
        locked = self._write and table in _LOCKED
        if locked:  # as `get` does for a row not there yet: its key locked, in one order (no deadlock)
            self.cursor.execute("SELECT pg_advisory_xact_lock(%s::int, h) FROM (SELECT DISTINCT h FROM "
                                "unnest(%s::int[]) AS u (h) ORDER BY h) AS s",
                                (_LOCKED[table], [zlib.crc32(k) & 0x7FFFFFFF for k in keys]))
        lock = " ORDER BY 1 FOR UPDATE" if locked or (for_update and self._write) else ""
        found = {bytes(k): v for k, v in self.cursor.execute(
            f"SELECT {column}, v FROM {layout.table} WHERE {column} = ANY(%b::bytea[]){lock}", (list(keys),)).fetchall()}
        ahead = self._ahead.setdefault(table, {})
        for key in keys:
            ahead[key] = found.get(key)

    def get(self, table: str, key: bytes) -> bytes | None:
        if self._adds:
            self._added(table)
        layout = LAYOUTS[table]
        if self._held is not None and key in self._held.get(table, ()):
            return self._held[table][key]
        ahead = self._ahead.get(table)
        if ahead is not None and key in ahead:
            return ahead[key]
        if not self._write or table not in _LOCKED:
            row = self.cursor.execute(layout.get, layout.split(key)).fetchone()
            return None if row is None else row[0]
        row = self.cursor.execute(layout.get_locked, (key,)).fetchone()
        if row is None:
            # Nothing to lock yet: lock the key itself, then look again (a new statement sees
            # whatever a creator holding that lock committed before releasing it).
            self.cursor.execute("SELECT pg_advisory_xact_lock(%s::int, %s::int)",
                              (_LOCKED[table], zlib.crc32(key) & 0x7FFFFFFF))
            row = self.cursor.execute(layout.get_locked, (key,)).fetchone()
        return None if row is None else row[0]

    def savepoint(self, *, rollback: bool = False, release: bool = False) -> None:
        if self._held:
            self.flush()
        if rollback and self._saved_adds is not None:
            self._adds = self._saved_adds
        self._saved_adds = None if rollback or release else {t: dict(rows) for t, rows in self._adds.items()}
        self.cursor.execute("ROLLBACK TO SAVEPOINT claim" if rollback else
                          "RELEASE SAVEPOINT claim" if release else "SAVEPOINT claim")

    def peek(self, table: str, key: bytes) -> bytes | None:
        """Read a row without locking it, even in a write transaction."""
        if self._adds:
            self._added(table)
        if self._held:
            self.flush(table)
        layout = LAYOUTS[table]
        row = self.cursor.execute(layout.get, layout.split(key)).fetchone()
        return None if row is None else row[0]

    def claim(self, id_bytes: bytes) -> bool:
        """Lock the invocation's record and lease rows unless another transaction holds one
        (another worker claiming it, or its owner appending): False then. For a row that does
        not exist yet (a pending invocation has no lease), the lock `get` takes on its key is
        tried instead of waited for: claims never wait, so a batch of them cannot deadlock
        with another worker's."""
        if self._held:
            self.flush()
        for table in ("invocations", "leases"):
            if self.cursor.execute(_CLAIM[table], (id_bytes,)).fetchone() is not None:
                continue
            if self.cursor.execute(LAYOUTS[table].get, (id_bytes,)).fetchone() is not None:
                return False  # locked by another transaction
            row = self.cursor.execute("SELECT pg_try_advisory_xact_lock(%s::int, %s::int)",
                                    (_LOCKED[table], zlib.crc32(id_bytes) & 0x7FFFFFFF)).fetchone()
            if not row[0]:
                return False
        return True

    def append_fast(self, rows: list[tuple[bytes, bytes, bytes, bytes]]) -> set[bytes]:
        """Insert entries `(entry key, data, id, lease bytes)`, each only while its
        invocation's lease row still holds exactly those bytes; the keys inserted. One
        statement for the batch: one round trip, and, outside a transaction block, its own
        transaction and commit."""
        if self._held:
            self.flush()
        return inserted_keys(self.cursor.execute(fast_append_sql(len(rows)), fast_append_args(rows)).fetchall())

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if self._ahead:
            ahead = self._ahead.get(table)
            if ahead is not None and key in ahead:
                ahead[key] = value
        if table == "timers" or (table == "status" and key.startswith(b"pending\x00")):
            self.notify = True
        if self._held is not None and _holdable(table):
            self._held.setdefault(table, {})[key] = value
            return
        layout = LAYOUTS[table]
        self.cursor.execute(layout.put, (*layout.split(key), value))
        if table == "leases":
            self.leases[key] = value

    def get_many(self, table: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """One statement for every key (a locked table's rows are read one by one, as `get` locks them)."""
        if self._adds:
            self._added(table)
        if not keys or (self._write and table in _LOCKED):
            return super().get_many(table, keys)
        layout = LAYOUTS[table]
        columns = [list(column) for column in zip(*(layout.split(key) for key in keys), strict=True)]
        found = {layout.join(row[:-1]): row[-1] for row in self.cursor.execute(layout.get_many, columns).fetchall()}
        return [found.get(key) for key in keys]

    def put_many(self, table: str, items: Sequence[tuple[bytes, bytes]]) -> None:
        """One statement for every item (an upsert may not meet one row twice: a key given
        twice keeps its last value, as one `put` after another would)."""
        if table == "leases" or table == "timers" or table == "status":  # what `put` remembers: one by one
            super().put_many(table, items)
            return
        if not items:
            return
        layout = LAYOUTS[table]
        rows = dict(items)  # (the last value of a key given twice)
        columns = [list(column) for column in zip(*(layout.split(key) for key in rows), strict=True)]
        self.cursor.execute(layout.put_many, [*columns, list(rows.values())])

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        layout = LAYOUTS[table]
        if self._held:
            self.flush(table)
        self.cursor.execute(layout.insert, (*layout.split(key), value))
        if self.pipeline is not None:  # (a row count is known only once its answer is in)
            self.pipeline.sync()
        return bool(self.cursor.rowcount == 1)

    def delete(self, table: str, key: bytes) -> None:
        layout = LAYOUTS[table]
        if self._ahead and key in self._ahead.get(table, ()):
            self._ahead[table][key] = None
        if self._held is not None and _holdable(table):
            self._held.setdefault(table, {})[key] = None
            return
        self.cursor.execute(layout.delete, layout.split(key))

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        if self._adds:
            self._added(table)
        if self._held:
            self.flush(table)
        layout = LAYOUTS[table]
        sql, args = layout.scan(prefix, start)
        return iter([(layout.join(row[:-1]), row[-1]) for row in self.cursor.execute(sql, args).fetchall()])

    def scan_some(self, table: str, prefix: bytes, start: bytes, limit: int) -> Iterator[tuple[bytes, bytes]]:
        if self._adds:
            self._added(table)
        if self._held:
            self.flush(table)
        layout = LAYOUTS[table]
        sql, args = layout.scan(prefix, start)
        rows = self.cursor.execute(sql + " LIMIT %s", [*args, limit]).fetchall()
        return iter([(layout.join(row[:-1]), row[-1]) for row in rows])

    def last(self, table: str, prefix: bytes) -> bytes | None:
        if self._adds:
            self._added(table)
        if self._write:  # two creators must not both see the same last key of a key's queue
            self.lock(table, prefix)
        if self._held:
            self.flush(table)
        sql, args = LAYOUTS[table].last(prefix)
        row = self.cursor.execute(sql, args).fetchone()
        return None if row is None else LAYOUTS[table].join(row)

    def lock(self, table: str, prefix: bytes, *, wait: bool = True) -> bool:
        if self._tried.get((table, prefix)):
            return True
        if not wait and (table, prefix) in self._tried:
            return False
        key = (_PREFIX_LOCK, _prefix_hash(table, prefix))
        if wait:
            self.cursor.execute("SELECT pg_advisory_xact_lock(%s::int, %s::int)", key)
            return True
        return bool(self.cursor.execute("SELECT pg_try_advisory_xact_lock(%s::int, %s::int)", key).fetchone()[0])

    def owner_alive(self, owner: str) -> bool:
        classid, objid = owner_lock_key(owner)
        row = self.cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = %s::int::oid AND objid = %s::int::oid AND objsubid = 2)", (classid, objid)).fetchone()
        return bool(row[0])
