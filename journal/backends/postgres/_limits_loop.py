"""Acquiring and releasing units of limits on PostgreSQL from the event loop, in one round trip.

The transaction of `_limits.py` takes about six statements to acquire and four to release,
each a round trip, from a thread (a hop each way): against a `sync` step of under a
millisecond on a quiet server that tripled the step. Here the rules of `_logic.py` run in
this process over the rows as this process last saw them (`Guess`), and what they read and
what they write go to the server in one statement: the function `limits_apply_v1` locks the
state rows that were read (as the transaction does: `FOR UPDATE`, or the advisory lock of a
row not yet there), compares every row read with what the rules saw, and only if all are
unchanged writes what they wrote, in the statement's own transaction. So the outcome is the
one the transaction would have had. When a row differs (another process changed it), the
function returns the rows as they are, and the rules run again on those. What a guess cannot
decide alone (whether a holder or a waiter's process lives, or a scan of the window's buckets,
neither on the uncontended path) goes to the transaction on a thread, as does everything off
asyncio.

The function is created with the limits' tables, by whichever process first uses them; its
name carries a version, so a later change of it is a new function beside this one.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Iterator

from ...kv._rules import Txn
from ._loop import LoopWriter
from ._rows import CHANNEL, LOCK_CLASS, SCHEMA

FUNCTION = f"{SCHEMA}.limits_apply_v1"
_SIGNATURE = f"{FUNCTION}(int4[], bytea[], bytea[], int4[], int4[], bytea[], bytea[])"
_TABLE_NUMBER = {"limit_state": 0, "limit_events": 1}
LOCK_CLASS_NEW_STATE = 5  # the advisory lock class of a state row that does not exist yet (`_limits.py`)

# Writes after the reads compare equal: the rows read are locked (state rows), or only ever
# changed under the lock of their name's state row (the window's buckets).
_BODY = f"""
DECLARE
  cur bytea;
  seen bytea[] := ARRAY[]::bytea[];
  same boolean := true;
BEGIN
  FOR i IN 1 .. coalesce(array_length(rk, 1), 0) LOOP
    IF rt[i] = 0 THEN
      SELECT v INTO cur FROM {SCHEMA}.limit_state WHERE k = rk[i] FOR UPDATE;
      IF NOT FOUND THEN
        PERFORM pg_advisory_xact_lock({LOCK_CLASS_NEW_STATE}, rl[i]);
        SELECT v INTO cur FROM {SCHEMA}.limit_state WHERE k = rk[i] FOR UPDATE;
      END IF;
    ELSE
      SELECT v INTO cur FROM {SCHEMA}.limit_events WHERE k = rk[i];
    END IF;
    IF NOT FOUND THEN
      cur := NULL;
    END IF;
    seen := array_append(seen, cur);
    IF cur IS DISTINCT FROM rv[i] THEN
      same := false;
    END IF;
  END LOOP;
  IF NOT same THEN
    RETURN seen;
  END IF;
  FOR i IN 1 .. coalesce(array_length(wk, 1), 0) LOOP
    IF wt[i] = 0 AND wv[i] IS NULL THEN
      DELETE FROM {SCHEMA}.limit_state WHERE k = wk[i];
    ELSIF wt[i] = 0 THEN
      INSERT INTO {SCHEMA}.limit_state (k, v) VALUES (wk[i], wv[i]) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;
    ELSIF wv[i] IS NULL THEN
      DELETE FROM {SCHEMA}.limit_events WHERE k = wk[i];
    ELSE
      INSERT INTO {SCHEMA}.limit_events (k, v) VALUES (wk[i], wv[i]) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;
    END IF;
  END LOOP;
  RETURN NULL;
END"""

# Run once per process that uses limits, in one transaction: concurrent `CREATE FUNCTION`s of
# one name fail ("tuple concurrently updated"), so creators take the store's schema lock.
CREATE_FUNCTION = f"""DO $do$ BEGIN
  PERFORM pg_advisory_xact_lock({LOCK_CLASS}, 0);
  IF to_regprocedure('{_SIGNATURE}') IS NULL THEN
    CREATE FUNCTION {FUNCTION}(rt int4[], rk bytea[], rv bytea[], rl int4[], wt int4[], wk bytea[], wv bytea[])
      RETURNS bytea[] LANGUAGE plpgsql AS $fn${_BODY}$fn$;
  END IF;
END $do$"""

_CALL = f"SELECT {FUNCTION}($1, $2, $3, $4, $5, $6, $7)".encode()
_INT4_ARRAY, _BYTEA_ARRAY, _INT4, _BYTEA = 1007, 1001, 23, 17


class Fallback(Exception):
    """The rules asked what only the transaction can answer: run it there."""


Row = tuple[str, bytes]  # (table, key)


class Guess(Txn):
    """The limits' tables as this process last saw them (`known`): reads are recorded with what
    they returned (a row never seen is guessed absent), writes are kept to be sent."""

    def __init__(self, known: dict[Row, bytes | None]) -> None:
        self._known = known
        self.reads: dict[Row, bytes | None] = {}
        self.writes: dict[Row, bytes | None] = {}

    def get(self, table: str, key: bytes) -> bytes | None:
        row = (table, key)
        if row in self.writes:
            return self.writes[row]
        if row not in self.reads:
            if table not in _TABLE_NUMBER:
                raise Fallback(table)
            self.reads[row] = self._known.get(row)
        return self.reads[row]

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.get(table, key)  # compared before the write is made: no write over a row unseen
        self.writes[(table, key)] = value

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        if self.get(table, key) is not None:
            return False
        self.put(table, key, value)
        return True

    def delete(self, table: str, key: bytes) -> None:
        self.get(table, key)
        self.writes[(table, key)] = None

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        raise Fallback(table)

    def scan_some(self, table: str, prefix: bytes, start: bytes, limit: int) -> Iterator[tuple[bytes, bytes]]:
        raise Fallback(table)

    def last(self, table: str, prefix: bytes) -> bytes | None:
        raise Fallback(table)


def no_alive(owner: str, host: str, pid: int) -> bool:
    raise Fallback("alive")


def call_params(guess: Guess) -> list[bytes]:
    reads = list(guess.reads.items())
    writes = list(guess.writes.items())
    return [_array(_INT4, [_TABLE_NUMBER[t].to_bytes(4, "big") for (t, _), _ in reads]),
            _array(_BYTEA, [k for (_, k), _ in reads]),
            _array(_BYTEA, [v for _, v in reads]),
            _array(_INT4, [(zlib.crc32(k) & 0x7FFFFFFF).to_bytes(4, "big") for (_, k), _ in reads]),
            _array(_INT4, [_TABLE_NUMBER[t].to_bytes(4, "big") for (t, _), _ in writes]),
            _array(_BYTEA, [k for (_, k), _ in writes]),
            _array(_BYTEA, [v for _, v in writes])]


def _array(element: int, items: list[bytes | None]) -> bytes:
    """A one-dimensional array in PostgreSQL's binary format (`array_send`)."""
    if not items:
        return struct.pack(">iii", 0, 0, element)
    out = [struct.pack(">iiiii", 1, any(i is None for i in items), element, len(items), 1)]
    for item in items:
        out.append(b"\xff\xff\xff\xff" if item is None else len(item).to_bytes(4, "big") + item)
    return b"".join(out)


def parse_bytea_array(data: bytes) -> list[bytes | None]:
    ndim, _, _ = struct.unpack_from(">iii", data)
    if ndim == 0:
        return []
    count, _ = struct.unpack_from(">ii", data, 12)
    out: list[bytes | None] = []
    at = 20
    for _ in range(count):
        (size,) = struct.unpack_from(">i", data, at)
        at += 4
        if size < 0:
            out.append(None)
        else:
            out.append(bytes(data[at: at + size]))
            at += size
    return out


class LimitWriter(LoopWriter):
    """The limits' connection of one event loop: `limits_apply_v1` prepared, binary both ways,
    `synchronous_commit` off (a unit acquired or released waits for no disk: a crash of the
    server frees what the processes it cut off held)."""

    async def ready(self, ddl: bool) -> None:
        """Settings and the prepared call; with `ddl`, the tables and the function first (unless
        this process made sure of them already)."""
        from ...limits import LIMIT_TABLES

        statements = ["SET synchronous_commit = off"]
        if ddl:
            statements += ["BEGIN", *(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{t} (k bytea PRIMARY KEY, v bytea NOT NULL)"
                                      for t in LIMIT_TABLES), CREATE_FUNCTION, "COMMIT"]
        self._pg.send_query("; ".join(statements).encode())
        await self._result(None)
        self._pg.send_prepare(b"journal_limits_apply", _CALL, [_INT4_ARRAY, _BYTEA_ARRAY, _BYTEA_ARRAY, _INT4_ARRAY,
                                                               _INT4_ARRAY, _BYTEA_ARRAY, _BYTEA_ARRAY])
        await self._result(None)

    async def notify(self) -> None:
        """Wake every worker (a unit went back to a limit with a line): each looks again now
        rather than at its next look, a second later."""
        self._pg.send_query(f"NOTIFY {CHANNEL}".encode())
        await self._result(None)

    async def apply(self, params: list[bytes]) -> list[bytes | None] | None:
        """Send one call; None when it wrote, else the rows read as they are now."""
        self._pg.send_query_prepared(b"journal_limits_apply", params, [1] * len(params), 1)
        res = await self._result(None)
        value = res.get_value(0, 0)
        return None if value is None else parse_bytea_array(value)


async def open_writer(conninfo: str, generation: int, ddl: bool) -> LimitWriter:
    writer = await LimitWriter.open(conninfo, generation)
    assert isinstance(writer, LimitWriter)
    try:
        await writer.ready(ddl)
    except BaseException:
        writer.close()
        raise
    return writer


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # trio
        return None
