"""The PostgreSQL store: the same rules as LMDB (`_kvstore`), for workers on many hosts.

Every rule lives in `KVStore`; this module only opens transactions. The tables, where
every row of one invocation is keyed by its `invocation_id` first, and the transaction
that maps the rules' keys onto their columns are in `_postgres_rows.py`. Entries stay
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
from typing import TYPE_CHECKING, Any, TypeVar

from ..._codec import DEFAULT_MAX_ENTRY_BYTES
from ..._ids import validate_id
from ..._records import InvocationRecord, Lease
from ..._store import Acquire, Append, Capability, Create, Op, Renew
from ...errors import FormatVersionError, InvocationBusy, JournalError, StoreError
from ...kv._listing import BUILT as LISTING_BUILT
from ...kv._rules import Txn, _lease_dec, _owned_id, check_lease, entry_key, lease_is_live
from ...kv._store import KVStore
from ._owners import OwnerSession
from ._rows import (
    DDL,
    FORMAT_VERSION,
    LAYOUTS,
    LOCK_CLASS,
    SCHEMA,
    PgTxn,
)
from ._tables import CREATE as CREATE_TABLES
from ._tables import PostgresTables

if TYPE_CHECKING:
    import asyncio

    import psycopg

    from ._live import PostgresChannel
    from ._loop import LoopWriter

T = TypeVar("T")

CHANNEL = "journal_runnable"
_RETRIES = 50
# The ordered key-value tables of `journal.Tables` (checkpoints, memory) share one more
# `(k bytea PRIMARY KEY, v bytea)` table, created in `_create_schema` (`_postgres_tables.py`).


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


class PostgresStore(PostgresTables, KVStore):
    """A journal store in a PostgreSQL database named by a libpq URL (`postgresql://...`)."""

    blocking = True
    path: str
    capabilities = frozenset({Capability.CANCEL_COUNTER, Capability.LEASE_AT_CREATE, Capability.LOOP_COMMITS,
                              Capability.WAKE_ON_WORK, Capability.TABLES})

    def __init__(self, url: str, *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "a postgresql:// store needs psycopg: pip install 'journal[postgres]'"
            ) from None
        self._psycopg = psycopg
        self.path = url
        self.max_entry_bytes = max_entry_bytes
        self._closed = False
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._fenced: dict[bytes, tuple[int, bytes]] = {}  # id -> (epoch, lease bytes) that gave it ownership
        self._sync_commit: bool | None = None
        self._writer = self._connect(autocommit=True)  # transactions are explicit: see `_write`
        self._reader = self._connect(autocommit=True)
        self._lives = OwnerSession(lambda: self._connect(autocommit=True), psycopg.Error, self._guard)
        self._listener: psycopg.Connection[Any] | None = None
        self._aio: LoopWriter | None = None  # the connection of `apply_async`
        self._live: PostgresChannel | None = None
        try:
            self._create_schema()
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.path)!r})"

    def _connect(self, *, autocommit: bool) -> psycopg.Connection[Any]:
        try:
            conn = self._psycopg.connect(self.path, autocommit=autocommit)
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to the journal store at {redact_url(self.path)}: {exc}") from None
        return conn

    def _create_schema(self) -> None:
        """Create the schema on first use; refuse one of another format untouched (its version
        is read before any table is created, so an older layout is never half-upgraded)."""
        with self._write_lock, self._guard(), self._writer.transaction():
            conn = self._writer
            conn.execute("SELECT pg_advisory_xact_lock(%s::int, 0)", (LOCK_CLASS,))  # one creator at a time
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (k bytea PRIMARY KEY, v bytea NOT NULL)")
            row = conn.execute(f"SELECT v FROM {SCHEMA}.meta WHERE k = 'format'").fetchone()
            found = bytes(row[0]) if row is not None else None
            if found is None:
                for statement in DDL:
                    conn.execute(statement)
                conn.execute(CREATE_TABLES)
                conn.execute(f"INSERT INTO {SCHEMA}.meta (k, v) VALUES ('format', %s)", (str(FORMAT_VERSION).encode(),))
                # Nothing to index yet: the listing index is complete from the start.
                conn.execute(f"INSERT INTO {SCHEMA}.meta (k, v) VALUES (%s, '1')", (LISTING_BUILT,))
            elif found == str(FORMAT_VERSION).encode():
                # A table added within the format (the listing index, filled on the first
                # page: journal/kv/_listing.py); every other table exists already.
                conn.execute(LAYOUTS["listing"].ddl[0])
        if found is not None and found != str(FORMAT_VERSION).encode():
            version = found.decode(errors="replace")
            older = version.isdigit() and int(version) < FORMAT_VERSION
            where = redact_url(self.path)
            raise FormatVersionError(
                f"the PostgreSQL store at {where} has format version {version}, but this version of journal "
                f"reads PostgreSQL format {FORMAT_VERSION} (nothing was changed); "
                + (f"convert it, with every worker stopped, in one transaction: journal migrate --db {shlex.quote(where)}"
                   if older else "open it with the journal release that wrote it")
            )

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None

    @contextmanager
    def _read(self) -> Iterator[PgTxn]:
        with self._read_lock, self._guard():
            with self._reader.cursor() as cur:
                yield PgTxn(cur)

    def _transact(self, work: Callable[[Txn], T]) -> T:
        return self._write(work, durable=True)

    def _write(self, work: Callable[[PgTxn], T], *, durable: bool, block: bool = True) -> T:
        """`work` in a write transaction, retried whole on a deadlock. `block=False`: `work` is
        one statement, which the server runs as a transaction of its own, so no `BEGIN` and
        `COMMIT` round trips (the writer is in autocommit mode)."""
        errors = self._psycopg.errors
        if self._closed:
            raise StoreError(f"the store at {redact_url(self.path)} is closed")
        with self._write_lock:
            conn = self._writer
            for attempt in range(_RETRIES):
                try:
                    with self._guard_retryable():
                        if self._sync_commit is not durable:
                            conn.execute("SET synchronous_commit = " + ("on" if durable else "off"))
                            self._sync_commit = durable
                        with conn.cursor() as cur:
                            txn = PgTxn(cur, write=True)
                            if not block:
                                return work(txn)
                            cur.execute("BEGIN")
                            result = work(txn)
                            if txn.notify:
                                cur.execute(f"NOTIFY {CHANNEL}")
                            cur.execute("COMMIT")
                        self._remember_leases(txn.leases)
                        return result
                except (errors.SerializationFailure, errors.DeadlockDetected):
                    _rollback(conn)
                    time.sleep(0.001 * (attempt + 1))  # back off: the other transaction is finishing
                except BaseException:
                    _rollback(conn)
                    raise
            raise StoreError(f"PostgreSQL kept refusing a transaction as conflicting after {_RETRIES} attempts")

    @contextmanager
    def _guard_retryable(self) -> Iterator[None]:
        errors = self._psycopg.errors
        try:
            yield
        except (errors.SerializationFailure, errors.DeadlockDetected):
            raise
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None

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
        on a connection of this store's that the loop drives (`_postgres_loop.py`), so the
        step waits for its commit without a thread hop each way (measured: 60-80 us a step
        on a small VM). None (nothing done) for
        any other batch, under another event loop than the first, or when the statement
        conflicted: the caller runs `apply` on a thread then. With `deferred`, a native
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
            self._drop_loop_writer(writer)
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
        """This store's connection for the event loop, opened on first use; None off asyncio
        or under another loop than the one it was opened on (a connection belongs to one loop)."""
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

        try:
            writer = await LoopWriter.open(self.path)
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to the journal store at {redact_url(self.path)}: {exc}") from None
        if self._aio is not None or self._closed:  # another task connected meanwhile, or the store closed
            writer.close()
            return await self._loop_writer()
        self._aio = writer
        return writer

    def _drop_loop_writer(self, writer: LoopWriter | None = None) -> None:
        """Close the loop's connection: `writer`, if given, and the store's if it is that one
        (another may have replaced it meanwhile, which goes on)."""
        if writer is None or writer is self._aio:
            writer, self._aio = self._aio, None
        if writer is not None:
            writer.close()

    def _fast_rows(self, ops: Sequence[Op]) -> tuple[list[tuple[bytes, bytes, bytes, bytes]], list[int]]:
        """The steps of a batch that one statement can append (instead of a lease read and an
        insert per step): appends of one entry whose lease bytes are those that last passed
        `_check_epoch` for their epoch (the same rule's verdict, as for LMDB's cache). Their
        rows for `PgTxn.append_fast`, and their positions in `ops`."""
        rows, where = [], []
        for i, op in enumerate(ops):
            if not (op.__class__ is Append and op.transition is None and not op.state and not op.cancel_seen
                    and len(op.entries) == 1):
                continue
            id_bytes = _owned_id(op.id)
            fenced = self._fenced.get(id_bytes)
            if fenced is None or fenced[0] != op.epoch:
                continue
            ((seq, data),) = op.entries
            rows.append((entry_key(id_bytes, seq), data, id_bytes, fenced[1]))
            where.append(i)
        return rows, where

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
        lease = None if seen is None else _lease_dec.decode(seen)
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
        """Leases this store just committed, as `_check_epoch` would remember them on the next
        append: an invocation's first step after its claim (or a renewal) takes the one-statement
        path at once. Only a cache: `append_fast` compares the bytes with the row, in the database."""
        for id_bytes, data in leases.items():
            lease = _lease_dec.decode(data)
            if lease.owner:
                if len(self._fenced) >= 4096:
                    self._fenced.clear()
                self._fenced[id_bytes] = (lease.epoch, data)
            else:
                self._fenced.pop(id_bytes, None)

    def _check_epoch(self, txn: Txn, id_bytes: bytes, invocation_id: str, epoch: int) -> Lease:
        data = txn.get("leases", id_bytes)
        lease = check_lease(data, invocation_id, epoch)
        assert data is not None  # check_lease raised otherwise
        if len(self._fenced) >= 4096:
            self._fenced.clear()
        self._fenced[id_bytes] = (epoch, bytes(data))
        return lease

    def _lease_live(self, txn: Txn, lease: Lease | None, now_us: int) -> bool:
        if not lease_is_live(lease, now_us):
            return False
        assert isinstance(txn, PgTxn)
        return txn.owner_alive(lease.owner)

    def wait_for_work(self, timeout: float) -> None:
        """Block until an invocation may have become runnable (a NOTIFY) or `timeout` passes."""
        listener = self._listener
        if listener is None:
            with self._guard():
                self._listener = listener = self._connect(autocommit=True)
                listener.execute(f"LISTEN {CHANNEL}")
        try:
            for _ in listener.notifies(timeout=timeout, stop_after=1):
                pass
        except self._psycopg.Error as exc:
            if self._closed:  # closed from another thread while this one waited: nothing to wait for
                return
            raise StoreError(f"PostgreSQL error in {redact_url(self.path)}: {exc}") from None

    def live(self) -> PostgresChannel:
        with self._read_lock:
            if self._live is None:
                from ._live import PostgresChannel  # (a store that never streams imports nothing of it)

                self._live = PostgresChannel(lambda: self._connect(autocommit=True))
            return self._live

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.close()
        self._drop_loop_writer()
        for conn in (self._writer, self._reader, self._lives.conn, self._listener):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a broken connection: nothing to save
                    pass

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rollback(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - the connection is broken; the transaction is gone with it
        pass


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, userinfo = head.partition("//")
    return f"{scheme}//{userinfo.split(':', 1)[0]}:***@{tail}"


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
