"""Limits on PostgreSQL: three tables of `(k, v)` rows beside the journal's, on a connection of
their own with `synchronous_commit` off (a unit acquired or released waits for no disk; a
crash of the server may forget the last ones, and the units of the processes that crash
with it come back through their sessions anyway).

Row locks keep every process's transactions on one limited name in line: a transaction locks
the state rows of its names in name order (the runtime sorts them), so two never wait on each
other. A holder or a waiter is dead once no session holds its owner's advisory lock
(`_owners.py`): the server ended the session of its process.

On asyncio, `acquire_async` and `release_async` do the same in one round trip from the event
loop (`_limits_loop.py`), and hand what they cannot decide alone to the transaction here. A
step's acquisition on an uncontended limit takes a share of it for this process's next steps,
which use it with no round trip at all (`journal/limits/_shares.py`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ...errors import StoreError
from ...kv._rules import Txn, prefix_end
from ...limits import LIMIT_TABLES, LimitRule, Request, _logic, _shares
from ...limits._model import Blocked, Granted
from ...limits._shares import Share, SharingTable
from ...limits._table import RULES_FOR, now_us
from ._connect import conninfo
from ._limits_loop import (
    CREATE_FUNCTION,
    LOCK_CLASS_NEW_STATE,
    Fallback,
    Guess,
    LimitWriter,
    Row,
    call_params,
    no_alive,
    open_writer,
    running_loop,
)
from ._rows import CHANNEL, SCHEMA, owner_lock_key
from ._urls import redact_url

if TYPE_CHECKING:
    from ._store import PostgresStore

T = TypeVar("T")

_LOCK_CLASS = LOCK_CLASS_NEW_STATE  # advisory lock class of a state row that does not exist yet
_DDL = [*(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{table} (k bytea PRIMARY KEY, v bytea NOT NULL)"
          for table in LIMIT_TABLES), CREATE_FUNCTION]
_log = logging.getLogger("journal.limits")
_DEFER = 0.02  # seconds a release waits for the next acquisition to carry it, when nobody waits
_TRIES = 3  # calls of the loop's path, each after another process changed a row it read
_SEEN_MOST = 10_000  # rows remembered for the loop's path (beyond: forgotten, read again)
_LINED_GONE = 5.0  # seconds after which a step of this process no longer counts as in a line (`_lined`)
_GRANTED = Granted()
_SHARED = object()  # (what the loop's call answered when it took a share)
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


class _Release(msgspec.Struct, frozen=True, gc=False):
    """A release not sent yet: `_logic.release`'s arguments."""

    hid: str
    names: tuple[str, ...]
    used_tokens: int | None
    known: dict[str, LimitRule] | None
    at: int
    claim: int | None = None
    unused: int = 0  # a share's rate units never used, taken out of the buckets `counted` again
    counted: tuple[tuple[str, bytes], ...] = ()


class PostgresLimits(SharingTable):
    """`LimitTable` of a PostgreSQL store."""

    blocking = True
    # The event loop that took a share ends it at the end of its life, and its give-back rides
    # with the loop's next call; the table's thread ends one whose loop did not (ended since).
    _REAP_AFTER = 2 * _shares.LIFE

    def __init__(self, store: PostgresStore) -> None:
        import psycopg

        super().__init__()
        self._store = store
        self._psycopg = psycopg
        self._lock = threading.Lock()
        self._session: Any = None
        self._ready = False
        self._writer: LimitWriter | None = None  # the loop's connection (`_limits_loop.py`)
        self._seen: dict[Row, bytes | None] = {}  # the rows as the loop's path last saw them
        self._deferred: list[_Release] = []  # releases not sent yet (`release_async`), in order
        self._deferred_lock = threading.Lock()
        self._flush: asyncio.TimerHandle | None = None  # sends them alone when no acquisition took them
        self._flushing: set[asyncio.Task[None]] = set()
        # The steps' holds of this process that stand in a line (`_lined`), with their names and
        # when they last asked, and how many stand in each name's line.
        self._in_lines: dict[str, tuple[tuple[str, ...], float]] = {}
        self._lined_names: dict[str, int] = {}

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
                    if connector.unsettled:
                        # A session this process dropped (the loop's connection, cancelled in the
                        # middle of a call) may still be committing what it was sent: ended first,
                        # so what this transaction does (a waiter's give-back) comes after it.
                        connector.settle(conn)
                    with conn.cursor() as cur:
                        if not self._ready:
                            for statement in _DDL:
                                cur.execute(statement)
                            self._ready = True
                        cur.execute("BEGIN")
                        if durable:
                            cur.execute("SET LOCAL synchronous_commit = on")
                        # The releases the loop has not sent go first: whatever this process
                        # does next on a thread comes after them.
                        releases = self._deferred_now()
                        if releases:
                            txn = _LimitTxn(cur, True)
                            if any([_release(txn, release) for release in releases]):
                                _wake_workers(cur)
                        result = work(_LimitTxn(cur, write))
                        cur.execute("COMMIT")
                        self._sent(releases)
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

    def release(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                claim: int | None = None) -> None:
        if self._users:
            share = self._share_of(hid, used_tokens)
            if share is not None:  # a step's hold on a share: the share ends here, and its hold goes back
                self._end_share(share)
                return self._run(lambda txn: None, write=True)  # (`_run` sends it first)
        if self._in_lines:
            self._unlined(hid)
        release = _Release(hid, names, used_tokens, self._rules() if used_tokens is not None else None, now_us(),
                           claim)

        def work(txn: _LimitTxn) -> None:
            if _release(txn, release):
                _wake_workers(txn._cur)

        self._run(work, write=True)

    def acquire(self, request: Request) -> Granted | Blocked:
        if request.hid in self._users:
            return _GRANTED  # (on a share: granted already)
        # The owner's advisory lock is what tells others it lives: held before it holds a unit.
        self._store._lives.hold(request.owner)
        known = self._rules()
        now = now_us()
        return self._lined(request, self._run(lambda txn: _logic.acquire(txn, request, now, txn.owner_alive, known),
                                              write=True))

    # -- from the event loop, in one round trip ------------------------------------------------

    async def acquire_async(self, request: Request) -> Granted | Blocked | None:
        if self._shares and self._use_share(request):
            return _GRANTED
        if not self._store._lives.held(request.owner):
            return None  # taking the owner's lock is a round trip: the thread's
        share_known = self._known  # (the rules a share would be taken under)
        known = self._fresh_rules()
        if known is None or share_known is None or share_known[1] is not known:
            return None
        if any(self._in_line(name) for name in request.names):
            return None  # a line: whether its first waiters live is the thread's question (no call to find out)
        # A step's attempt (no tokens to count, no invocation's claim or place in line) takes a
        # share where there is plenty of room, else its own hold.
        units = _logic.share_units(known, request.names) \
            if request.tokens == 0 and request.claim == 0 and request.arrival is None \
            and not (self._lined_names and self._lined_on(request.names)) else 0
        if units == 0:
            answer = await self._apply_async(lambda txn, now: _logic.acquire(txn, request, now, no_alive, known))
            return None if answer is None or answer is True else self._lined(request, answer)  # type: ignore[arg-type]
        key = (request.names, request.owner)
        share_request = msgspec.structs.replace(request, hid=request.hid + _shares.SUFFIX)
        until = time.monotonic() + _shares.LIFE  # (before `now`: the share ends before its window's count does)
        counted: list[tuple[str, bytes]] = []

        def work(txn: Guess, now: int) -> object:
            if key not in self._shares:
                buckets = _logic.acquire_share(txn, share_request, now, now + _shares.LIFE_US, units, known)
                if buckets is not None:
                    counted[:] = buckets
                    return _SHARED
            return _logic.acquire(txn, request, now, no_alive, known)

        shared = await self._apply_async(work)
        if shared is _SHARED:
            seen = {row: self._seen.get(row) for row in [("limit_state", name.encode()) for name in request.names]}
            self._new_share(share_request, request.hid, units, until, tuple(counted), share_known, seen)
            return _GRANTED
        if shared is None:  # in doubt whether the call took the share: given back, with the next call
            self._give_back(_Release(share_request.hid, request.names, None, None, now_us()))
        return None if shared is None or shared is True else self._lined(request, shared)  # type: ignore[arg-type]

    async def release_async(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                            awaited: bool = False, claim: int | None = None) -> bool:
        if self._users:
            share = self._share_of(hid, used_tokens)
            if share is not None:  # a step's hold on a share: the share is free for the next step
                # (`awaited` says someone in this process waits, but not for which limit: a step
                # of this process in the line of one of the share's names ends it, `_share_usable`.)
                if share.ended or not self._share_usable(share):
                    self._end_share(share, awaited)
                return True
        if self._in_lines:
            self._unlined(hid)
        known = self._fresh_rules() if used_tokens is not None else None
        if used_tokens is not None and known is None:
            return False
        loop = running_loop()
        if loop is None:
            return False
        release = _Release(hid, names, used_tokens, known, now_us(), claim)
        if self._writer is None or self._writer.loop is not loop:  # the loop's first: sent now
            done = await self._apply_async(lambda txn, now: _release(txn, release))
            if done is True:  # a unit went back to a line
                writer = self._writer
                if writer is not None:
                    async with writer.lock:
                        await writer.notify()
            return done is not None
        # Kept a moment: the next acquisition of this process carries it in its own call (a
        # step under a limit then costs one round trip, not two), else it goes alone after
        # `_DEFER`; at once when the unit may be wanted (`_wanted`, or `awaited`). A process that
        # has not stood in line yet finds the unit held a little longer: it looks again within a
        # few tens of milliseconds anyway. Any call of this process on a thread sends it first (`_run`).
        self._give_back(release, awaited)
        return True

    def _give_back(self, release: _Release, awaited: bool = False) -> None:
        """Send `release` with the next call of this process (see `release_async`); off the
        event loop, with its next call on a thread."""
        with self._deferred_lock:
            self._deferred.append(release)
        loop = running_loop()
        if loop is None:
            return
        waited = awaited or self._wanted(release.names)
        if waited or self._flush is None:
            if self._flush is not None:
                self._flush.cancel()
            self._flush = loop.call_later(0 if waited else _DEFER, self._flush_now, loop)

    # -- shares (`journal/limits/_shares.py`) ---------------------------------------------------

    def _lined(self, request: Request, answer: Granted | Blocked) -> Granted | Blocked:
        """`answer`, noting whether a step's `request` stands in a line now: a request in a line
        never goes on a share (it would leave its place in the line behind, in everyone's way),
        and no share of its names is used while it waits (the next steps would pass it)."""
        if request.tokens == 0 and request.claim == 0 and request.arrival is None:
            if answer.__class__ is Blocked:
                with self._share_lock:  # (on a thread, or on the loop)
                    if request.hid not in self._in_lines:
                        for name in request.names:
                            self._lined_names[name] = self._lined_names.get(name, 0) + 1
                    self._in_lines[request.hid] = (request.names, time.monotonic())
            elif self._in_lines:
                self._unlined(request.hid)
        return answer

    def _unlined(self, hid: str) -> None:
        with self._share_lock:
            names, _ = self._in_lines.pop(hid, ((), 0.0))
            for name in names:
                left = self._lined_names.pop(name, 1) - 1
                if left:
                    self._lined_names[name] = left

    def _lined_on(self, names: tuple[str, ...]) -> bool:
        """Whether a step of this process stands in the line of one of `names` (a line this
        process may not have seen in the rows, if the step joined it on a thread)."""
        if not any(name in self._lined_names for name in names):
            return False
        # A waiter asks again at least every second: one not seen for long has gone without a
        # word (a cancelled wait whose acquisition ended on a thread after its release).
        gone = time.monotonic() - _LINED_GONE
        for hid in [hid for hid, (_, seen) in list(self._in_lines.items()) if seen < gone]:
            self._unlined(hid)
        return any(name in self._lined_names for name in names)

    def _share_usable(self, share: Share) -> bool:
        """Whether the next step may use `share`: as `Share.usable`, and no step of this process
        stands in the line of one of its names (the next steps would pass it)."""
        if self._lined_names and self._lined_on(share.names):
            return False
        return share.usable(self._known, self._seen)

    def _may_share(self, request: Request) -> bool:
        return super()._may_share(request) and request.hid not in self._in_lines

    def _end_later(self, share: Share) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, share.until - time.monotonic()), self._share_expired, share)
        super()._end_later(share)

    def _reaped(self) -> None:
        if self._store._connector.outage.down:
            return  # (the server cannot be reached: given back with this process's next call, or at close)
        try:
            self._release_deferred()  # (from the thread: what it ended is given back now, with a transaction)
        except StoreError as exc:
            _log.warning("could not give back units of limits: %s", exc)

    def _return_share(self, share: Share, awaited: bool) -> None:
        self._give_back(_Release(share.hid, share.names, share.used or None, share.known[1], now_us(),
                                 unused=share.left or 0, counted=share.counted), awaited)

    def _in_line(self, name: str) -> bool:
        """Whether someone waited for `name` when this process last saw it."""
        raw = self._seen.get(("limit_state", name.encode()))
        return raw is not None and bool(_logic.decode_state(raw).waiters)

    def _wanted(self, names: tuple[str, ...]) -> bool:
        """Whether a unit of `names` given back may be wanted now, as this process last saw them:
        someone waits in line, the concurrency was full (those waiting may not stand in line:
        a worker keeps most of a long queue in the store's run queue), a tokens window (what is
        given back settles it), or a name not seen here at all."""
        known = self._known[1] if self._known is not None else {}
        for name in names:
            raw = self._seen.get(("limit_state", name.encode()))
            rule = _logic.rule_in(known, name)
            if raw is None or rule is None or rule.tokens is not None:
                return True
            state = _logic.decode_state(raw)
            if state.waiters or (rule.concurrency is not None and len(state.holds) >= rule.concurrency):
                return True
        return False

    def _deferred_now(self) -> list[_Release]:
        with self._deferred_lock:
            return list(self._deferred)

    def _sent(self, releases: list[_Release]) -> None:
        """`releases` are done (by whichever path took them first)."""
        if releases:
            with self._deferred_lock:
                self._deferred = [r for r in self._deferred if not any(r is done for done in releases)]

    def _flush_now(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush = None
        if self._deferred:
            task = loop.create_task(self._send_deferred())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def _send_deferred(self) -> None:
        try:
            if await self._apply_async(None) is None and self._deferred:
                await asyncio.get_running_loop().run_in_executor(None, self._release_deferred)
        except Exception as exc:  # nobody awaits it: said, and the units go back when this process ends
            _log.warning("could not give back units of limits: %s", exc)

    def _release_deferred(self) -> None:
        if self._deferred:
            self._run(lambda txn: None, write=True)  # (`_run` sends them first)

    async def settle(self) -> None:
        self._end_shares()
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._deferred and running_loop() is not None:
            self._flush_now(asyncio.get_running_loop())
        while self._flushing:
            await asyncio.wait(list(self._flushing))

    def _fresh_rules(self) -> dict[str, LimitRule] | None:
        """The rules kept, if still fresh (reading them again is the thread's)."""
        known = self._known
        if known is None or time.monotonic() - known[0] > RULES_FOR:
            return None
        return known[1]

    async def _apply_async(self, work: Callable[[Guess, int], T] | None) -> T | bool | None:
        """The deferred releases, then `work`, over the rows as last seen; then one call that
        writes what they wrote if the rows they read are unchanged. What `work` returned
        (True without one); None when the transaction on a thread must do `work`."""
        if self._store._connector.unsettled:
            return None  # a dropped session may still commit what it was sent: the thread ends it first (`_run`)
        writer = await self._loop_writer()
        if writer is None:
            return None
        async with writer.lock:
            if writer is not self._writer:
                return None
            for _ in range(_TRIES):
                guess = Guess(self._seen)
                now = now_us()
                releases = self._deferred_now()
                wake = False
                for release in releases:  # (never a fallback: a release reads no scan and asks nobody's life)
                    wake = _release(guess, release) or wake
                result: T | bool | None = True
                fell_back = False
                if work is not None:
                    try:
                        result = work(guess, now)
                    except Fallback:
                        # Maybe only as far as this process knows (a line that has moved since):
                        # the call sends the releases alone and checks what `work` read.
                        checked = Guess(self._seen)
                        for release in releases:
                            _release(checked, release)
                        for row, value in guess.reads.items():
                            checked.reads.setdefault(row, value)
                        guess, fell_back = checked, True
                if guess.reads:
                    try:
                        current = await writer.apply(call_params(guess))
                    except self._psycopg.errors.DeadlockDetected:
                        continue
                    except self._psycopg.Error as exc:
                        self._drop_writer(writer)
                        if self._store._connector.is_fault(exc, writer.conn):
                            self._store._connector.outage.failed(writer.generation, exc)
                            return None  # in doubt: done again on a thread (acquiring and releasing are idempotent)
                        raise StoreError(f"PostgreSQL error in {redact_url(self._store.path)}: {exc}") from None
                    except BaseException:  # cancelled: the reply would meet the next call
                        self._drop_writer(writer)
                        raise
                    if len(self._seen) > _SEEN_MOST:
                        self._seen.clear()
                    if current is not None:
                        self._seen.update(zip(guess.reads, current, strict=True))
                        continue
                    self._seen.update(guess.reads)
                    self._seen.update(guess.writes)
                self._sent(releases)
                if wake:
                    await writer.notify()
                return None if fell_back else result  # (fell back on rows as they are: the thread's)
        return None

    async def _loop_writer(self) -> LimitWriter | None:
        """This table's connection for the running event loop, opened on first use; None off
        asyncio, under another loop than the one it was opened on, or while the server cannot
        be reached (the thread's path waits for it: the loop never does)."""
        loop = running_loop()
        if loop is None:
            return None
        writer = self._writer
        if writer is not None and writer.loop.is_closed():
            self._drop_writer(writer)
            writer = None
        if writer is not None:
            return writer if writer.loop is loop else None
        outage = self._store._connector.outage
        if outage.down or self._store._closed:
            return None
        try:
            writer = await open_writer(conninfo(self._store.path, "limits"), outage.generation, not self._ready)
        except self._psycopg.Error as exc:
            if not self._store._connector.is_fault(exc):
                raise StoreError(f"cannot connect to the journal store at {redact_url(self._store.path)}: {exc}") \
                    from None
            outage.failed(None, exc)
            return None
        if self._writer is not None or self._store._closed:  # another task connected meanwhile
            writer.close()
            return self._writer if self._writer is not None and self._writer.loop is loop else None
        self._writer = writer
        return writer

    def _drop_writer(self, writer: LimitWriter) -> None:
        if writer is self._writer:
            self._writer = None
        self._seen.clear()
        writer.close()
        if writer.identity is not None:  # its session may live on at the server: ended by the next `settle`
            self._store._connector.forget_identity(writer.identity)

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        self._stop_reaper(wait=1.0)  # (a give-back of its own on the network may be under way: this one follows it)
        self._close_shares()  # (a step still on a share: the store is closing anyway)
        try:
            self._release_deferred()
        except StoreError as exc:
            _log.warning("could not give back units of limits: %s", exc)
        with self._lock:
            if self._session is not None:
                self._store._connector.forget(self._session)
                self._session = None
        if self._writer is not None:
            self._drop_writer(self._writer)


def _release(txn: Txn, release: _Release) -> bool:
    if release.unused:  # a share's: once (the loop's call and a thread's may both carry it)
        return _logic.release_share(txn, release.hid, release.names, release.used_tokens, release.at,
                                    release.known, release.unused, release.counted)
    return _logic.release(txn, release.hid, release.names, release.used_tokens, release.at, release.known,
                          release.claim)


def _wake_workers(cur: Any) -> None:
    """A unit went back to a limit with a line: every worker looks again (at this transaction's
    commit), so the first in line goes now, not at its worker's next look a second later."""
    cur.execute(f"NOTIFY {CHANNEL}")


def _rollback(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.execute("ROLLBACK")
    except Exception:  # the connection is being given up anyway
        pass
