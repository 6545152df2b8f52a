"""The PostgreSQL store: the same rules as LMDB (`journal/kv`), for workers on many hosts.

Every rule lives in `KVStore`; this module only opens transactions. The tables, where
every row of one invocation is keyed by its `invocation_id` first, and the transaction
that maps the rules' keys onto their columns are in `_rows.py`. Entries stay
msgspec bytes.

Writes are READ COMMITTED with the rows they decide on locked: inside a write transaction,
reading an invocation's record or lease locks that row (`FOR UPDATE`), and reading one
that does not exist yet takes a transaction advisory lock on its key and reads again, so
two workers that read the same lease cannot both take it, two creators of one id cannot
both create it, and every append checks the lease epoch in its own transaction. Every
operation reads its invocation's record or lease first, so operations on one invocation
run one after another. Claiming is `FOR UPDATE SKIP LOCKED` (and a tried, never awaited,
lock for a row not yet created), in a savepoint that a lost claim rolls back; the claims
of a batch commit in a transaction of their own, apart from its steps. A batch of plain
steps is one statement (`_postgres_rows.fast_append_sql`), which checks each step's
lease bytes (those that last passed the epoch check) in the statement itself and commits
by itself; on asyncio it is sent from the event loop on a connection of its own
(`apply_async`), without waiting in a thread. (SERIALIZABLE was tried first: its
page-level predicate locks made unrelated invocations abort each other under load.) A
deadlock between two batches is retried whole. Every other call is one transaction on
one connection, synchronous and `blocking`: the runtime calls it from a thread.

A dead owner is detected when its database session ends: a store holds a session-level
advisory lock for each owner that acquires a lease through it, and a lease whose owner's
lock no session holds protects nobody. A host that vanishes without closing its TCP
connections loses its leases when they expire.

Durability: `apply(..., durable=True)` commits with `synchronous_commit = on` (the WAL is
flushed before the commit returns), `durable=False` with it off. Concurrent appends of one
process share a transaction (the committer batches them); those of different processes
share WAL flushes in the server's own group commit.

Wake-ups: a transaction that makes an invocation runnable (pending, or a timer) sends
`NOTIFY journal_runnable` at commit; `wait_for_work` listens for it.
"""

from __future__ import annotations

import functools
import shlex
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..._codec import DEFAULT_MAX_ENTRY_BYTES
from ..._ids import validate_id
from ..._records import InvocationRecord, Lease
from ..._store import Acquire, Append, Capability, Create, Op, Renew
from ...errors import FormatVersionError, InvocationBusy, JournalError, StoreError, StoreUnavailable
from ...kv import Txn, decode_lease, entry_key, lease_is_live
from ...kv._listing import BUILT as LISTING_BUILT
from ...kv._runnable import BUILT as RUNNABLE_BUILT
from ...kv._store import KVStore
from ._connect import Connector, Session, conninfo, default_patience
from ._owners import OwnerSession
from ._rows import (
    ADDED_TABLES,
    CHANNEL,
    DDL,
    FORMAT_VERSION,
    LAYOUTS,
    LOCK_CLASS,
    SCHEMA,
    PgTxn,
)
from ._tables import CREATE as CREATE_TABLES
from ._tables import PostgresTables
from ._urls import redact_url

if TYPE_CHECKING:
    import asyncio

    from ._limits import PostgresLimits
    from ._live import PostgresChannel
    from ._loop import LoopWriter

T = TypeVar("T")

_RETRIES = 50
# The ordered key-value tables of `journal.Tables` (checkpoints, memory) share one more
# `(k bytea PRIMARY KEY, v bytea)` table, created in `_create_schema` (`_tables.py`).


class PostgresStore(PostgresTables, KVStore):
    """A journal store in a PostgreSQL database named by a libpq URL (`postgresql://...`)."""

    blocking = True
    path: str
    capabilities = frozenset({Capability.CANCEL_COUNTER, Capability.LEASE_AT_CREATE, Capability.LOOP_COMMITS,
                              Capability.WAKE_ON_WORK, Capability.TABLES, Capability.RECONNECTS})

    def __init__(self, url: str, *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
                 reconnect_for: float | None | Literal["default"] = "default") -> None:
        """`reconnect_for`: how many seconds a call waits for the server when it cannot be
        reached (reconnecting with backoff meanwhile), before raising `StoreUnavailable`;
        None waits as long as it takes (`_connect.py`). By default `$JOURNAL_RECONNECT_FOR`,
        else 30."""
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "a postgresql:// store needs psycopg: pip install 'journal-agents[postgres]'"
            ) from None
        self._psycopg = psycopg
        self.path = url
        self.max_entry_bytes = max_entry_bytes
        self._closed = False
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._sync_commit: bool | None = None
        self._connector = Connector(url, default_patience() if isinstance(reconnect_for, str) else reconnect_for)
        self._format_seen = False
        # Each opened on first use, and again whenever its server went away (`_connect.py`).
        self._writer: Session | None = None  # transactions are explicit: see `_write`
        self._reader: Session | None = None
        self._listener: Session | None = None
        self._lives = OwnerSession(self._connector)
        self._aio: LoopWriter | None = None  # the connection of `apply_async`
        self._live: PostgresChannel | None = None
        self._limits: PostgresLimits | None = None
        try:
            self._create_schema()
        except BaseException:
            self.close()
            raise

    def outage(self) -> StoreUnavailable | None:
        return self._connector.outage.error()

    def wait_for_server(self, seconds: float | None) -> None:
        self._connector.outage.patience = seconds

    def reconnects(self) -> int:
        return self._connector.outage.ended

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.path)!r})"

    def _create_schema(self) -> None:
        """Create the schema on first use; refuse one of another format untouched (its version
        is read before any table is created, so an older layout is never half-upgraded)."""

        def work(txn: PgTxn) -> bytes | None:
            cur = txn.cursor
            cur.execute("SELECT pg_advisory_xact_lock(%s::int, 0)", (LOCK_CLASS,))  # one creator at a time
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (k bytea PRIMARY KEY, v bytea NOT NULL)")
            row = cur.execute(f"SELECT v FROM {SCHEMA}.meta WHERE k = 'format'").fetchone()
            found = bytes(row[0]) if row is not None else None
            if found is None:
                for statement in DDL:
                    cur.execute(statement)
                cur.execute(CREATE_TABLES)
                cur.execute(f"INSERT INTO {SCHEMA}.meta (k, v) VALUES ('format', %s)", (str(FORMAT_VERSION).encode(),))
                # Nothing to index yet: the listing index is complete from the start.
                cur.execute(f"INSERT INTO {SCHEMA}.meta (k, v) VALUES (%s, '1')", (LISTING_BUILT,))
                cur.execute(f"INSERT INTO {SCHEMA}.meta (k, v) VALUES (%s, '1')", (RUNNABLE_BUILT,))  # run queue
            elif found == str(FORMAT_VERSION).encode():
                # Tables added within the format (the listing index, filled on the first
                # page: journal/kv/_listing.py; the inbox and the rest of talking to a
                # running invocation, empty until used); every other table exists already.
                for table in ADDED_TABLES:
                    cur.execute(LAYOUTS[table].ddl[0])
            return found

        self._check_format(self._write(work, durable=True))
        self._format_seen = True

    def _check_format(self, found: bytes | None) -> None:
        if found is None or found == str(FORMAT_VERSION).encode():
            return
        version = found.decode(errors="replace")
        older = version.isdigit() and int(version) < FORMAT_VERSION
        where = redact_url(self.path)
        raise FormatVersionError(
            f"the PostgreSQL store at {where} has format version {version}, but this version of journal "
            f"reads PostgreSQL format {FORMAT_VERSION} (nothing was changed); "
            + (f"convert it, with every worker stopped, in one transaction: journal migrate --db {shlex.quote(where)}"
               if older else "open it with the journal release that wrote it")
        )

    def _open_writer(self) -> Session:
        session = self._connector.open("writer")
        self._sync_commit = None  # a new session has the server's default
        if self._format_seen:
            # Another server may answer now (a standby promoted): it must hold this same store.
            try:
                row = session.conn.execute(f"SELECT v FROM {SCHEMA}.meta WHERE k = 'format'").fetchone()
            except self._psycopg.Error as exc:
                self._connector.lost(session, exc)
                raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None
            if row is None:
                self._connector.forget(session)
                raise FormatVersionError(f"the database at {redact_url(self.path)} holds no journal store any more "
                                         "(its journal.meta has no format): is this the database the store was in?")
            self._check_format(bytes(row[0]))
        self._writer = session
        return session

    @contextmanager
    def _read(self) -> Iterator[PgTxn]:
        with self._read_lock:
            yield PgTxn(_Reads(self))

    def _reading(self, sql: Any, args: Any) -> Any:
        """One statement on the reader's connection, its rows fetched; on a new connection if
        the server went away (reads run outside a transaction, each statement on its own, so
        running one again is as good as the first time)."""
        attempt, since = 0, None
        while True:
            session = self._reader
            if session is None:
                if self._closed:
                    raise StoreError(f"the store at {redact_url(self.path)} is closed")
                session = self._reader = self._connector.open("reader")
            try:
                rows = session.conn.execute(sql, args)
            except self._psycopg.Error as exc:
                if not self._connector.is_fault(exc, session.conn):
                    raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None
                self._reader = None
                self._connector.lost(session, exc)
                since = since or time.monotonic()
                if attempt:  # a new session failed at once again: not in a tight loop
                    self._connector.outage.pause(attempt - 1, since=since)
                attempt += 1
                continue
            if self._connector.outage.down:  # another connection failed, but this server answers
                self._connector.outage.reached()
            return rows

    def _transact(self, work: Callable[[Txn], T]) -> T:
        return self._write(work, durable=True)

    def _transact_many(self, work: Callable[[Txn], T]) -> T:
        """A transaction of many statements (a batch of schedules' ticks): its rows written
        at its end, one statement per table (`PgTxn.hold_writes`), in a pipeline, so that
        only its reads wait for an answer. Measured: 17 statements a schedule, 11 of them
        writes of one row each."""
        return self._write(work, durable=True, pipeline=True)

    def _write(self, work: Callable[[PgTxn], T], *, durable: bool, block: bool = True, pipeline: bool = False) -> T:
        """`work` in a write transaction, retried whole on a deadlock, and on a new connection
        if the server went away, whether or not the lost one had committed: the rules find
        what a commit whose answer was lost did (an append of the same bytes, a lease or a
        status already written) and count it as done (`KVStore._apply_append`), so doing
        `work` again is safe. `block=False`: `work` is one statement, which the server runs
        as a transaction of its own, so no `BEGIN` and `COMMIT` round trips (the writer is
        in autocommit mode)."""
        errors = self._psycopg.errors
        with self._write_lock:
            conflicts, faults, since = 0, 0, None
            while True:
                if self._closed:
                    raise StoreError(f"the store at {redact_url(self.path)} is closed")
                session = self._writer or self._open_writer()
                conn = session.conn
                try:
                    if self._connector.unsettled:  # a lost session of the loop's (`apply_async`)
                        self._connector.settle(conn)
                    if self._sync_commit is not durable:
                        conn.execute("SET synchronous_commit = " + ("on" if durable else "off"))
                        self._sync_commit = durable
                    with conn.cursor() as cur:
                        txn = PgTxn(cur, write=True, redo=faults > 0)
                        if not block:
                            result = work(txn)
                            if self._connector.outage.down:
                                self._connector.outage.reached()
                            return result
                        cur.execute("BEGIN")
                        if pipeline:
                            with conn.pipeline() as txn.pipeline:
                                txn.hold_writes()
                                result = work(txn)
                                txn.finish()
                            txn.pipeline = None
                        else:
                            result = work(txn)
                            txn.finish()
                        if txn.notify:
                            cur.execute(f"NOTIFY {CHANNEL}")
                        cur.execute("COMMIT")
                    self._remember_leases(txn.leases)
                    if self._connector.outage.down:  # another connection failed, but this server answers
                        self._connector.outage.reached()
                    return result
                except (errors.SerializationFailure, errors.DeadlockDetected):
                    _rollback(conn)
                    conflicts += 1
                    if conflicts >= _RETRIES:
                        raise StoreError(f"PostgreSQL kept refusing a transaction as conflicting after {_RETRIES} "
                                         "attempts") from None
                    time.sleep(0.001 * conflicts)  # back off: the other transaction is finishing
                except self._psycopg.Error as exc:
                    if not self._connector.is_fault(exc, conn):
                        _rollback(conn)
                        raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None
                    self._writer = None
                    self._connector.lost(session, exc)
                    since = since or time.monotonic()
                    if faults:  # a new session failed at once again: not in a tight loop
                        self._connector.outage.pause(faults - 1, since=since)
                    faults += 1
                except BaseException:
                    _rollback(conn)
                    raise

    def apply(self, ops: Sequence[Op], *, durable: bool = True) -> list[Any]:
        renews = False
        for op in ops:
            if op.__class__ is Acquire:
                self._lives.hold(op.owner)
            elif op.__class__ is Create and op.lease is not None:  # (a new row: nobody else holds it)
                self._lives.hold(op.lease.owner)
            renews = renews or op.__class__ is Renew
        if renews:
            self._lives.keep()
        if len(ops) > 1 and any(op.__class__ is Acquire for op in ops) and not all(
                op.__class__ is Acquire for op in ops):
            # The claims go in a transaction of their own: they hold their invocations' rows
            # only until it commits, never for the length of a batch of steps. (Claims never
            # wait for a lock, so claims of two workers do not deadlock either.)
            results: list[Any] = [None] * len(ops)
            rest = [i for i, op in enumerate(ops) if op.__class__ is not Acquire]
            claims = [i for i, op in enumerate(ops) if op.__class__ is Acquire]
            for i, result in zip(claims, self.apply([ops[i] for i in claims], durable=False), strict=True):
                results[i] = result
            if rest:
                for i, result in zip(rest, self.apply([ops[i] for i in rest], durable=durable), strict=False):
                    results[i] = result
            return results

        rows, where = self._fast_rows(ops)
        if rows and len(rows) == len(ops):
            # Only plain steps: one statement, which commits by itself (one round trip).
            inserted = self._write(lambda txn: txn.append_fast(rows), durable=durable, block=False)
            if len(inserted) == len(rows):
                return [None] * len(ops)
            # What the statement did not insert goes through the rules, which say why.
            rest = [i for i, row in zip(where, rows, strict=True) if row[0] not in inserted]
            results = [None] * len(ops)
            for i, result in zip(rest, self._write(lambda txn: self._apply_all(txn, [ops[i] for i in rest]),
                                                   durable=durable), strict=True):
                results[i] = result
            return results

        def work(txn: Txn) -> list[Any]:
            assert isinstance(txn, PgTxn)
            inserted = txn.append_fast(rows) if rows else set()
            done = {i for i, row in zip(where, rows, strict=True) if row[0] in inserted}
            if not done:
                return self._apply_all(txn, ops)
            rest = self._apply_all(txn, [op for i, op in enumerate(ops) if i not in done])
            results = iter(rest)
            return [None if i in done else next(results) for i in range(len(ops))]

        return self._write(work, durable=durable)

    async def apply_async(self, ops: Sequence[Op], *, durable: bool = True,
                          deferred: list[BaseException] | None = None) -> list[Any] | None:
        """A batch of plain steps on the event loop: the one statement of `PgTxn.append_fast`
        on a connection of this store's that the loop drives (`_loop.py`), so the
        step waits for its commit without a thread hop each way (measured: 60-80 us a step
        on a small VM). None for any other batch, under another event loop than the first,
        when the statement conflicted, or when its connection failed (the server went away,
        the statement's outcome maybe lost with it): the caller runs `apply` on a thread
        then, which waits for the server and finds what the statement did, if anything
        (`_write`). With `deferred`, a native
        cancellation is kept there (`Store.apply_async`): the statement, once sent, is seen
        out, so that the other steps of the batch get their answers and the connection no
        reply left unread."""
        rows, where = self._fast_rows(ops)
        if self._closed:
            return None
        if not rows or len(rows) != len(ops):
            if self._aio is None:  # connect now, with the claim that precedes the first steps, not in a step
                await _or_nothing(self._loop_writer(), deferred)
            return None
        writer = await _or_nothing(self._loop_writer(), deferred)
        if writer is None or await _or_nothing(writer.lock.acquire(), deferred) is None:
            return None
        errors = self._psycopg.errors
        try:
            done = await writer.append([(row[2], int.from_bytes(row[0][-4:], "big"), row[1], row[3])
                                        for row in rows], durable=durable, deferred=deferred)
        except (errors.SerializationFailure, errors.DeadlockDetected):
            return None  # rolled back; the thread's path retries it
        except self._psycopg.Error as exc:
            fault = self._connector.is_fault(exc, writer.conn)
            self._drop_loop_writer(writer)
            if fault:
                self._connector.outage.failed(writer.generation, exc)
                return None  # in doubt: the thread's path does it again, finding what it did
            raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None
        except BaseException:  # a cancellation not deferred: its reply would meet the next statement
            self._drop_loop_writer(writer)
            raise
        finally:
            writer.lock.release()
        inserted = {entry_key(i, seq) for i, seq in done}
        if len(inserted) == len(rows):
            return [None] * len(ops)
        # What the statement did not insert goes through the rules, which say why (rarely: a
        # renewed or lost lease), on a thread.
        rest = [i for i, row in zip(where, rows, strict=True) if row[0] not in inserted]
        results: list[Any] = [None] * len(ops)
        again = await _seen_out(writer.loop.run_in_executor(
            None, functools.partial(self.apply, [ops[i] for i in rest], durable=durable)), deferred)
        for i, result in zip(rest, again, strict=True):
            results[i] = result
        return results

    async def _loop_writer(self) -> LoopWriter | None:
        """This store's connection for the event loop, opened on first use; None off asyncio,
        under another loop than the one it was opened on (a connection belongs to one loop),
        or while the server cannot be reached (the thread's path waits for it: the loop never does)."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio
            return None
        if self._aio is not None and self._aio.loop.is_closed():  # its loop is gone: a new loop gets its own
            self._drop_loop_writer()
        if self._aio is not None:
            return self._aio if self._aio.loop is loop else None
        from ._loop import LoopWriter

        outage = self._connector.outage
        if outage.down:
            return None
        generation = outage.generation
        try:
            writer = await LoopWriter.open(conninfo(self.path, "steps"), generation)
        except self._psycopg.Error as exc:
            if not self._connector.is_fault(exc):
                raise StoreError(f"cannot connect to the journal store at {redact_url(self.path)}: {exc}") from None
            outage.failed(None, exc)
            return None
        if self._aio is not None or self._closed:  # another task connected meanwhile, or the store closed
            writer.close()
            return await self._loop_writer()
        outage.reached()
        self._aio = writer
        return writer

    def _drop_loop_writer(self, writer: LoopWriter | None = None) -> None:
        """Close the loop's connection: `writer`, if given, and the store's if it is that one
        (another may have replaced it meanwhile, which goes on)."""
        if writer is None or writer is self._aio:
            writer, self._aio = self._aio, None
        if writer is not None:
            writer.close()
            if writer.identity is not None:  # its session may live on at the server: ended by the next `settle`
                self._connector.forget_identity(writer.identity)

    def _fast_rows(self, ops: Sequence[Op]) -> tuple[list[tuple[bytes, bytes, bytes, bytes]], list[int]]:
        """The steps of a batch that one statement can append (instead of a lease read and an
        insert per step): appends of one entry whose lease bytes are those that last passed
        the fence for their epoch (`journal/kv/_append.py`: the same rule's verdict). Their
        rows for `PgTxn.append_fast`, and their positions in `ops`."""
        rows, where = [], []
        for i, op in enumerate(ops):
            if not (op.__class__ is Append and op.transition is None and not op.state and not op.cancel_seen
                    and op.talk is None and not op.tags and len(op.entries) == 1):
                continue
            id_bytes = self._fence.owned_id(op.id)
            fenced = self._fence.fenced(id_bytes, op.epoch)
            if fenced is None:
                continue
            ((seq, data),) = op.entries
            rows.append((entry_key(id_bytes, seq), data, id_bytes, fenced))
            where.append(i)
        return rows, where

    def _apply_create(self, txn: Txn, op: Create) -> tuple[InvocationRecord, bool]:
        record, created = super()._apply_create(txn, op)
        return record, created or _created_by_lost_attempt(txn, record, op.record)

    def create(self, record: InvocationRecord, started: bytes) -> tuple[InvocationRecord, bool]:
        return self._write(lambda txn: self._apply_create(txn, Create(record, started)), durable=True)

    def _apply_acquire(self, txn: Txn, op: Acquire) -> tuple[int, InvocationRecord]:
        """Claiming is `FOR UPDATE SKIP LOCKED`: an invocation whose rows another transaction
        holds (another worker claiming it, or its owner appending) is skipped at once rather
        than waited for, which would hold up this worker's whole batch; the worker looks
        again when the database next wakes it."""
        assert isinstance(txn, PgTxn)
        id_bytes = validate_id(op.id)
        # A failed claim must not hold the rows until this batch commits (the owner's next
        # append would wait for it): first look without locking; the rule runs again under lock.
        seen = txn.peek("leases", id_bytes)
        lease = None if seen is None else decode_lease(seen)
        if lease is not None and lease.owner != op.owner and self._lease_live(txn, lease, op.now_us):
            raise InvocationBusy(
                f"invocation {op.id!r} is being run by process {lease.pid} on {lease.host} "
                f"(lease epoch {lease.epoch}); wait for it, or for its lease to expire"
            )
        # Row locks taken in a savepoint that is rolled back are released: a claim that fails
        # leaves nothing held until the batch commits, so two workers claiming at once
        # cannot block (or deadlock) each other's batches.
        txn.savepoint()
        try:
            if not txn.claim(id_bytes):
                raise InvocationBusy(
                    f"invocation {op.id!r} is being claimed or written by another process right now; "
                    "a worker looks again when it is next woken"
                )
            result = super()._apply_acquire(txn, op)
        except JournalError:
            txn.savepoint(rollback=True)
            raise
        txn.savepoint(release=True)
        return result

    def _remember_leases(self, leases: dict[bytes, bytes]) -> None:
        """Leases this store just committed, as the fence would remember them on the next
        append: an invocation's first step after its claim (or a renewal) takes the one-statement
        path at once. Only a cache: `append_fast` compares the bytes with the row, in the database."""
        for id_bytes, data in leases.items():
            self._fence.remember(id_bytes, data)

    def _lease_live(self, txn: Txn, lease: Lease | None, now_us: int) -> bool:
        if not lease_is_live(lease, now_us):
            return False
        assert isinstance(txn, PgTxn)
        return txn.owner_alive(lease.owner)

    def wait_for_work(self, timeout: float) -> None:
        """Block until an invocation may have become runnable (a NOTIFY) or `timeout` passes.

        Returns early if the listening connection was lost (a NOTIFY may have been missed
        meanwhile: the caller looks again), and gives up waiting for the server at the
        timeout. Meanwhile it checks, without a round trip, that the owners' lock session
        still stands, and takes the locks again at once if the server ended it."""
        ends = time.monotonic() + timeout
        try:
            self._lives.check(until=ends)
            listener = self._listener
            if listener is None:
                listener = self._listener = self._connector.open("listen", until=ends, setup=(f"LISTEN {CHANNEL}",))
        except StoreUnavailable:
            return
        except StoreError:
            if self._closed:
                return
            raise
        try:
            for _ in listener.conn.notifies(timeout=max(0.0, ends - time.monotonic()), stop_after=1):
                pass
        except self._psycopg.Error as exc:
            if self._closed:  # closed from another thread while this one waited: nothing to wait for
                return
            if not self._connector.is_fault(exc, listener.conn):
                raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None
            self._listener = None
            self._connector.lost(listener, exc)

    def live(self) -> PostgresChannel:
        with self._read_lock:
            if self._live is None:
                from ._live import PostgresChannel  # (a store that never streams imports nothing of it)

                self._live = PostgresChannel(lambda: self._connector.open("live").conn)
            return self._live

    def limits(self) -> PostgresLimits:
        with self._read_lock:
            if self._limits is None:
                from ._limits import PostgresLimits  # (a store that limits nothing imports nothing of it)

                self._limits = PostgresLimits(self)
            return self._limits

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.close()
        if self._limits is not None:
            self._limits.close()
        self._connector.close()  # calls waiting for the server stop waiting
        self._drop_loop_writer()
        # A call on another thread may be inside libpq on one of these connections right now
        # (a lease watcher's renewal or look, which runs on a worker thread and goes on when
        # its task is cancelled). Closing it there frees what libpq is using: the heap was
        # corrupted and a later test died with SIGSEGV. So each connection is closed under
        # the lock its calls hold, once the call in flight is done: at most one statement's
        # round trip, since the connector no longer waits for the server. The listener is
        # closed at once: `wait_for_work` waits on its socket, not inside libpq, and closing
        # it is what wakes it.
        with self._write_lock:
            _close(self._writer)
        with self._read_lock:
            _close(self._reader)
        self._lives.close()
        _close(self._listener)

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _created_by_lost_attempt(txn: Txn, found: InvocationRecord, asked: InvocationRecord) -> bool:
    """Whether the record a creation done again found is the one its first attempt wrote
    (its answer lost with the connection): same creation instant, handler and input."""
    return (isinstance(txn, PgTxn) and txn.redo and found.created_at == asked.created_at
            and found.handler == asked.handler and found.input_digest == asked.input_digest)


class _Reads:
    """The reader's connection as `PgTxn` uses a cursor: `execute` runs one statement and
    returns its fetched rows, on a new connection if the server went away."""

    __slots__ = ("_store",)

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: Any, args: Any = None) -> Any:
        return self._store._reading(sql, args)


def _close(session: Session | None) -> None:
    if session is not None:
        try:
            session.conn.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing to save
            pass


def _rollback(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - the connection is broken; the transaction is gone with it
        pass


async def _or_nothing(step: Awaitable[T], deferred: list[BaseException] | None) -> T | None:
    """`await step`, or None if a native cancellation comes first and `deferred` keeps it:
    nothing is sent yet, so the caller leaves the batch to the thread's path."""
    import asyncio  # (running in a loop: imported already; `journal ls` imports no event loop)

    try:
        return await step
    except asyncio.CancelledError as exc:
        if deferred is None:
            raise
        deferred.append(exc)
        return None


async def _seen_out(future: asyncio.Future[T], deferred: list[BaseException] | None) -> T:
    """`await future`, waited for to its end with `deferred` (see `_or_nothing`)."""
    import asyncio

    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if deferred is None or future.cancelled():
                raise
            deferred.append(exc)
