"""The steps' statement, sent from the event loop straight through libpq.

`PostgresStore.apply_async` commits a batch of plain steps with one statement
(`_postgres_rows.fast_append_sql`). A step waits for that round trip and its WAL flush,
so what the client adds on top counts: psycopg's asyncio connection added about 50 µs a
statement here over libpq's own non-blocking calls with a prepared statement (measured
on a 2-CPU VM: 151-176 against 101-129 µs for the same INSERT). So this module keeps one
connection (opened by psycopg, which handles the connection string and the asynchronous
connect) and drives its libpq handle itself: the statement is prepared once per batch
size, its parameters and results travel in binary (bytea as is, seq as int4), and the
loop waits on the socket only when libpq would block. Errors come back as psycopg's
exception classes, so a deadlock is recognised as one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._rows import _fast_append_sql

_BYTEA, _INT4 = 17, 23
_PREPARED_SIZES = 64  # batch sizes prepared per connection; larger ones go unprepared


def _sql(rows: int) -> bytes:
    return _fast_append_sql(rows, numbered=True).encode()


class LoopWriter:
    """One connection whose statements the event loop that opened it sends and awaits."""

    def __init__(self, conn: Any, loop: asyncio.AbstractEventLoop, generation: int = 0,
                 identity: tuple[int, Any] | None = None) -> None:
        import psycopg

        self._psycopg = psycopg
        self.conn = conn  # kept so that psycopg does not close the handle under us
        self.generation = generation  # the outage count when it was opened (`_connect.Outage`)
        self.identity = identity  # the server's `(pid, backend_start)` for its session
        self._pg = conn.pgconn
        self._pg.nonblocking = 1
        self.loop = loop
        self.lock = asyncio.Lock()
        self._prepared: set[int] = set()
        self._sync_commit: bool | None = None

    @classmethod
    async def open(cls, conninfo: str, generation: int = 0) -> LoopWriter:
        """Connect (asynchronously), with the session settings every connection of the store
        gets (`_connect.py`), in one round trip."""
        import psycopg

        from ._connect import IDENTITY, SESSION_SETUP

        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        try:
            try:
                cur = await conn.execute(SESSION_SETUP)
                while cur.pgresult is not None and cur.pgresult.status != psycopg.pq.ExecStatus.TUPLES_OK:
                    if not cur.nextset():
                        break
            except psycopg.Error:
                if conn.broken:
                    raise
                cur = await conn.execute(IDENTITY)  # a server too old for some setting: without them
            row = await cur.fetchone()
        except BaseException:
            await conn.close()
            raise
        return cls(conn, asyncio.get_running_loop(), generation, (int(row[0]), row[1]) if row else None)

    async def append(self, rows: list[tuple[bytes, int, bytes, bytes]], *, durable: bool,
                     deferred: list[BaseException] | None = None) -> list[tuple[bytes, int]]:
        """Run the statement over `(id, seq, data, lease bytes)` rows; the `(id, seq)` inserted.
        The caller holds `lock`. With `deferred`, a native cancellation is kept there and the
        statement waited for to its end."""
        pq = self._psycopg.pq
        if self._sync_commit is not durable:
            self._pg.send_query(b"SET synchronous_commit = " + (b"on" if durable else b"off"))
            await self._result(deferred)
            self._sync_commit = durable
        n = len(rows)
        params: list[bytes] = []
        for id_bytes, seq, data, lease in rows:
            params += (id_bytes, seq.to_bytes(4, "big"), data, lease)
        name = b"journal_append_%d" % n
        if n not in self._prepared and len(self._prepared) < _PREPARED_SIZES:
            self._pg.send_prepare(name, _sql(n), [_BYTEA, _INT4, _BYTEA, _BYTEA] * n)
            await self._result(deferred)
            self._prepared.add(n)
        if n in self._prepared:
            self._pg.send_query_prepared(name, params, [1] * len(params), 1)
        else:
            self._pg.send_query_params(_sql(n), params, [_BYTEA, _INT4, _BYTEA, _BYTEA] * n, [1] * len(params), 1)
        res = await self._result(deferred)
        assert res.status == pq.ExecStatus.TUPLES_OK
        return [(bytes(res.get_value(i, 0)), int.from_bytes(res.get_value(i, 1), "big"))
                for i in range(res.ntuples)]

    async def _result(self, deferred: list[BaseException] | None) -> Any:
        """Flush what was sent, wait for the whole reply, and return its (last) result."""
        pg, pq = self._pg, self._psycopg.pq
        while pg.flush():
            await self._wait(True, deferred)
        pg.consume_input()
        result, failed = None, None
        while True:
            # Before every result, not only the first: a reply of several statements comes in
            # parts, and libpq's get_result waits for the next part holding the GIL, which
            # stalls the loop (and every thread) until the server sends it.
            try:
                while pg.is_busy():
                    await self._wait(False, deferred)
                    pg.consume_input()
            except self._psycopg.OperationalError:
                if failed is None:
                    raise
                break  # the server said why, then closed the connection (FATAL): say what it said
            if (res := pg.get_result()) is None:
                break
            if res.status == pq.ExecStatus.FATAL_ERROR and failed is None:
                failed = res
            result = res
        if failed is not None:
            raise self._psycopg.errors.error_from_result(failed, encoding="utf-8")
        return result

    async def _wait(self, write: bool, deferred: list[BaseException] | None) -> None:
        """Until the socket is ready. A cancellation kept in `deferred` waits again: the
        statement is on its way, and its reply must be read (a future of our own, rather than
        a shield, costs the statement nothing when no cancellation comes)."""
        fd = self._pg.socket
        add, remove = (self.loop.add_writer, self.loop.remove_writer) if write else (
            self.loop.add_reader, self.loop.remove_reader)
        while True:
            done = self.loop.create_future()
            add(fd, _set_ready, done)
            try:
                await done
                return
            except asyncio.CancelledError as exc:
                if deferred is None:
                    raise
                deferred.append(exc)
            finally:
                remove(fd)

    def close(self) -> None:
        """Close the socket at once, from any thread and without the loop."""
        self._pg.finish()


def _set_ready(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
