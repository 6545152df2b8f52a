"""Store logic written once over a small key-value transaction interface.

`MemoryStore`, `LmdbStore` and `PostgresStore` differ only in how they open transactions
(and in how a store tells that a lease's owner has died); every operation of the `Store`
protocol is a method of `KVStore` here, the public reads and one `_apply_<op>` per
operation, each running in one transaction, so the backends cannot drift apart. What
happens inside a transaction (keys, records and their indexes, transitions, the lease
fence) is in `_rules.py`.
"""

from __future__ import annotations

import abc
import builtins
import functools
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import msgspec

from .._codec import DEFAULT_MAX_ENTRY_BYTES
from .._entries import NIL
from .._ids import validate_id
from .._listing import HandlerSummary, Page, Query
from .._records import InboxMessage, InvocationRecord, Lease, PublishedValue, Resolution, SentMessage, Status
from .._schedules import ScheduleRecord, decode_schedule, encode_schedule
from .._schema import refusal
from .._store import (
    Acquire,
    Append,
    Capability,
    Continue,
    Create,
    Op,
    OpResult,
    Renew,
    RequestCancel,
    Resolve,
    Send,
    SetStatus,
    Store,
    Transition,
    WorkBell,
)
from .._tags import MAX_TAGS, check_tags
from ..errors import (
    InvocationBusy,
    InvocationConflict,
    InvocationNotFound,
    JournalError,
    LeaseLost,
    PromiseConflict,
    StoreUnavailable,
)
from . import _listing, _runnable, _talk
from ._append import Fence, insert_entries, landed
from ._rules import (
    _CANCELS,
    PER_INVOCATION,
    Txn,
    _check_has_key,
    _create,
    _debounce,
    _decode_record,
    _enc,
    _get_lease,
    _get_record,
    _insert,
    _put_record,
    _queue_head,
    _queue_key,
    _require_record,
    _resolution_dec,
    _transition,
    _unindex,
    _write_state,
    entry_key,
    lease_is_live,
    request_cancel,
)

T = TypeVar("T")

_GENERIC = object()  # `_append_one` leaves the operation to the generic path


class WriteAgain(Exception):  # noqa: N818 - a signal between a backend and the rules, never shown
    """Raised by a backend's `_write_once` transaction for what the generic path must do
    again (LMDB: a map to grow, or to re-read after another process grew it)."""


_SCHEDULE = b"schedule\x00"


def _schedule_key(name: str) -> bytes:
    return _SCHEDULE + validate_id(name, "schedule name") + b"\x00"


def _advance(txn: Txn, record: ScheduleRecord, expected_version: int, creates: Sequence[Create],
             cancels: Sequence[str], *, wait: bool = True, seen: bool = False) -> bool | None:
    """`Store.advance_schedule`'s rule; None (`wait=False`) if another transaction is moving
    the schedule right now. `seen`: this transaction locked the schedule and read it at
    `expected_version` already."""
    key = _schedule_key(record.name)
    if not seen:
        if not txn.lock("meta", key, wait=wait):  # one advancing transaction at a time (PostgreSQL locks the prefix)
            return None
        raw = txn.get("meta", key)
        if raw is None or decode_schedule(bytes(raw)).version != expected_version:
            return False
    for op in creates:
        _create(txn, validate_id(op.record.id), op.record, op.started)
    for invocation_id in cancels:
        id_bytes = validate_id(invocation_id)
        if _get_record(txn, id_bytes) is not None:
            request_cancel(txn, id_bytes, invocation_id, record.created_at, False)
    txn.put("meta", key, encode_schedule(msgspec.structs.replace(record, version=expected_version + 1)))
    return True


Decide = Callable[[ScheduleRecord, InvocationRecord | None], "tuple[ScheduleRecord, Sequence[Create], Sequence[str]] | None"]


def _advance_all(txn: Txn, moves: Sequence[tuple[ScheduleRecord, int, Sequence[Create], Sequence[str]]],
                 *, seen: bool = False) -> builtins.list[bool | None]:
    """`_advance` of each move, a schedule held by another transaction not waited for (None).
    The new invocations are read first (one statement on a database, rather than one for
    each); the counts they add themselves to are added as the transaction ends (`Txn.add`),
    so two batches do not wait for each other on them."""
    ids = sorted(validate_id(op.record.id) for move in moves for op in move[2])
    txn.read_ahead("invocations", ids)
    return [_advance(txn, *move, wait=False, seen=seen) for move in moves]


class KVStore(abc.ABC):
    """The `Store` protocol over `Txn`; subclasses provide `_read()` and `_transact()`."""

    path: str | None = None
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    blocking: bool = False
    capabilities: frozenset[Capability] = frozenset({Capability.CANCEL_COUNTER})
    _listing_built = False  # this store's listing index is known to cover every record
    _ready_built = False  # ... and its run queue every pending record
    # The most operations one transaction of `apply` takes (None: all of them): a backend
    # whose write transaction holds every page it changes in memory bounds it.
    ops_per_transaction: int | None = None

    @functools.cached_property
    def _fence(self) -> Fence:
        """This store's lease fence, with what it remembers (made on first use, then an
        attribute of the store)."""
        return Fence()

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Txn]: ...

    @abc.abstractmethod
    def _transact(self, work: Callable[[Txn], T]) -> T:
        """Run `work` in one write transaction and commit it (retrying it whole if needed)."""

    def _transact_many(self, work: Callable[[Txn], T]) -> T:
        """`_transact` for a transaction of many writes (a backend over the network may send
        them without waiting for each)."""
        return self._transact(work)

    def sync(self) -> None:  # noqa: B027 - a store that is durable at commit has nothing to flush
        pass

    def start_background_sync(self, interval: float) -> None:  # noqa: B027 - nothing to flush, as sync()
        pass

    async def apply_async(self, ops: Sequence[Op], *, durable: bool = True,
                          deferred: list[BaseException] | None = None) -> list[Any] | None:
        return None  # a local store's `apply` is quick enough to call from the loop

    def wait_for_work(self, timeout: float) -> None:
        time.sleep(timeout)  # nothing to listen to: the caller polls

    def work_bell(self) -> WorkBell | None:
        return None  # no bell: a worker polls (a backend that can ring says so, `Capability.WORK_BELL`)

    def close(self) -> None:  # noqa: B027 - optional: only backends holding resources override it
        pass

    def outage(self) -> StoreUnavailable | None:
        return None  # a local store has no server to lose

    def wait_for_server(self, seconds: float | None) -> None:  # noqa: B027 - no server to wait for
        pass

    def reconnects(self) -> int:
        return 0  # a local store has no server to lose

    def _lease_live(self, txn: Txn, lease: Lease | None, now_us: int) -> bool:
        """Whether `lease` still protects its owner; a backend that can tell more overrides it."""
        return lease_is_live(lease, now_us)

    def _write_once(self) -> AbstractContextManager[Txn] | None:
        """A write transaction for one append, committed when its block ends without an
        error, with none of `_transact`'s retries: what the single-append path of `apply`
        runs in. It raises `WriteAgain` for anything the backend wants done by the generic
        path (which does it again and reports it). None: the backend has no such
        transaction, and every append takes the generic path."""
        return None

    # -- reads ---------------------------------------------------------------------------

    def get(self, invocation_id: str) -> InvocationRecord | None:
        with self._read() as txn:
            return _get_record(txn, validate_id(invocation_id))

    def get_many(self, invocation_ids: Sequence[str]) -> builtins.list[InvocationRecord | None]:
        with self._read() as txn:
            keys = [validate_id(i) for i in invocation_ids]
            return [None if data is None else _decode_record(data, key)
                    for key, data in zip(keys, txn.get_many("invocations", keys), strict=True)]

    def require(self, invocation_id: str) -> InvocationRecord:
        record = self.get(invocation_id)
        if record is None:
            raise InvocationNotFound(
                f"no invocation {invocation_id!r} in {self.path or 'this store'}; "
                "`journal ls` lists the invocations it holds"
            )
        return record

    def list(self, status: Status | None = None) -> list[InvocationRecord]:
        with self._read() as txn:
            if status is None:
                return [_decode_record(v, k) for k, v in txn.scan("invocations", b"")]
            out = []
            prefix = Status(status).value.encode() + b"\x00"
            for key, _ in txn.scan("status", prefix):
                record = _get_record(txn, key[len(prefix):])
                if record is not None:
                    out.append(record)
            return out

    def ids(self, status: Status) -> builtins.list[str]:
        prefix = Status(status).value.encode() + b"\x00"
        with self._read() as txn:
            return [key[len(prefix):].decode(errors="replace") for key, _ in txn.scan("status", prefix)]

    def ids_starting(self, prefix: str, limit: int) -> builtins.list[str]:
        raw = prefix.encode("utf-8", "surrogatepass")
        with self._read() as txn:  # the records' table is keyed by id: a range of keys, no value decoded
            return [key.decode(errors="replace") for key, _ in txn.scan_some("invocations", raw, raw, limit)]

    def ready(self, limit: int | None = None, after: tuple[int, int, str] | None = None) -> builtins.list[str]:
        """Pending invocations that may start now (not delayed), in the order workers claim
        them: highest priority first, then oldest; read from the run queue (`_runnable.py`)."""
        if not self._ensure_ready():
            pending = self.ids(Status.PENDING)
            if after is not None:
                pending = pending[pending.index(after[2]) + 1:] if after[2] in pending else []
            return pending[:limit]
        with self._read() as txn:
            return _runnable.ids(txn, limit, after)

    def _ensure_ready(self) -> bool:
        """Whether the run queue covers every pending record, building it if it does not yet
        (a store written before it existed: every pending record read once); False if it
        cannot be built (a read-only store). A store made since starts with it complete."""
        if not self._ready_built:
            with self._read() as txn:
                built = txn.get("meta", _runnable.BUILT) is not None
            if not built:
                if getattr(self, "readonly", False):
                    return False
                self._transact(lambda txn: None if txn.get("meta", _runnable.BUILT) else _runnable.build(txn))
            self._ready_built = True
        return True

    def page(self, query: Query) -> Page:
        """A page of invocations newest first, through the listing index (`_listing.py`):
        only the records it returns are read (and one more, to know if a next page exists)."""
        indexed = self._ensure_listing()
        with self._read() as txn:
            return (_listing.page if indexed else _listing.page_by_scan)(txn, query, _decode_record)

    def summary(self) -> builtins.list[HandlerSummary]:
        """Counts by handler and status from the listing index's counts (`_listing.summary`)."""
        if not self._ensure_listing():  # a read-only store indexed by an older version: counted from its records
            counts: dict[str, dict[str, int]] = {}
            oldest: dict[str, int] = {}
            for record in self.list():
                by = counts.setdefault(record.handler, {})
                by[record.status.value] = by.get(record.status.value, 0) + 1
                if record.status is Status.PENDING:
                    oldest[record.handler] = min(oldest.get(record.handler, record.updated_at), record.updated_at)
            return [HandlerSummary(h, c, oldest.get(h)) for h, c in sorted(counts.items())]
        with self._read() as txn:
            return _listing.summary(txn)

    def batch_records(self, prefix: bytes) -> builtins.list[tuple[bytes, bytes]]:
        """Batch records live in `meta`, under keys that start with `batches.PREFIX`."""
        if not prefix.startswith(b"batch\x00"):
            raise JournalError("batch records are kept under b'batch\\x00' only")
        with self._read() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.scan("meta", prefix)]

    def write_batch_records(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not all(key.startswith(b"batch\x00") for key, _ in items):
            raise JournalError("batch records are kept under b'batch\\x00' only")

        def work(txn: Txn) -> None:
            for key, value in items:
                txn.put("meta", key, value)

        self._transact(work)

    def _ensure_listing(self) -> bool:
        """Whether the listing index covers every record, building it if it does not yet (a
        store written before it existed); False if it cannot be built (a read-only store)."""
        if not self._listing_built:
            with self._read() as txn:
                built = txn.get("meta", _listing.BUILT) is not None
            if not built:
                if getattr(self, "readonly", False):
                    return False
                self._transact(lambda txn: None if txn.get("meta", _listing.BUILT) else _listing.build(txn, _decode_record))
            self._listing_built = True
        return True

    def entries(self, invocation_id: str, start: int = 0) -> builtins.list[tuple[int, bytes]]:
        id_bytes = validate_id(invocation_id)
        prefix = id_bytes + b"\x00"
        with self._read() as txn:
            return [
                (int.from_bytes(k[-4:], "big"), bytes(v))
                for k, v in txn.scan("entries", prefix, entry_key(id_bytes, start))
            ]

    def entry_count(self, invocation_id: str) -> int:
        prefix = validate_id(invocation_id) + b"\x00"
        with self._read() as txn:
            return sum(1 for _ in txn.scan("entries", prefix))

    def lease(self, invocation_id: str) -> Lease | None:
        with self._read() as txn:
            return _get_lease(txn, validate_id(invocation_id))

    def live_lease(self, invocation_id: str, now_us: int) -> Lease | None:
        with self._read() as txn:
            lease = _get_lease(txn, validate_id(invocation_id))
            return lease if self._lease_live(txn, lease, now_us) else None

    def resolution(self, invocation_id: str, name: str) -> Resolution | None:
        key = validate_id(invocation_id) + b"\x00" + validate_id(name, "promise name")
        with self._read() as txn:
            raw = txn.get("promises", key)
            return None if raw is None else _resolution_dec.decode(raw)

    def next_message(self, invocation_id: str, topic: str, after: int = 0) -> tuple[int, InboxMessage] | None:
        with self._read() as txn:
            return _talk.next_message(txn, validate_id(invocation_id), validate_id(topic, "topic").decode(), after)

    def message(self, invocation_id: str, message_id: str) -> SentMessage | None:
        with self._read() as txn:
            return _talk.sent_message(txn, validate_id(invocation_id), message_id)

    def published(self, invocation_id: str, name: str | None = None) -> dict[str, PublishedValue]:
        with self._read() as txn:
            return _talk.published(txn, validate_id(invocation_id), name)

    def state(self, key: str) -> dict[str, bytes]:
        prefix = validate_id(key, "key") + b"\x00"
        with self._read() as txn:
            return {k[len(prefix):].decode(): bytes(v) for k, v in txn.scan("state", prefix)}

    def key_queue(self, key: str) -> builtins.list[str]:
        prefix = validate_id(key, "key") + b"\x00"
        with self._read() as txn:
            return [k[len(prefix) + 8:].decode() for k, _ in txn.scan("keyq", prefix)]

    def cancel_requests_made(self) -> int:
        """How many cancel requests this store has recorded, ever: a lease watcher that sees
        it unchanged knows that none of its invocations was asked to cancel meanwhile."""
        with self._read() as txn:
            raw = txn.get("meta", _CANCELS)
            return 0 if raw is None else int.from_bytes(raw, "big")

    def next_wake(self) -> int | None:
        with self._read() as txn:
            for key, _ in txn.scan("timers", b""):
                return int.from_bytes(key[:8], "big")
        return None

    def due_timers(self, now_us: int) -> builtins.list[str]:
        out = []
        with self._read() as txn:
            for key, _ in txn.scan("timers", b""):
                if int.from_bytes(key[:8], "big") > now_us:
                    break
                out.append(key[8:].decode())
        return out

    # -- writes --------------------------------------------------------------------------

    def create(self, record: InvocationRecord, started: bytes) -> tuple[InvocationRecord, bool]:
        id_bytes = validate_id(record.id)
        if record.key is not None:
            validate_id(record.key, "key")
        if record.tags:
            check_tags(record.tags)
        return self._transact(lambda txn: _create(txn, id_bytes, record, started))

    def debounce(self, record: InvocationRecord, started: bytes, wait_us: int,
                 max_us: int | None) -> tuple[InvocationRecord, bool]:
        """A debounced start (`Store.debounce`): `(record, created)`."""
        id_bytes = validate_id(record.id)
        if record.key is None:
            raise JournalError("a debounced start needs a key: it gathers the starts of one handler and key")
        validate_id(record.key, "key")
        return self._transact(lambda txn: _debounce(txn, id_bytes, record, started, wait_us, max_us))

    # -- schedules (`journal/_schedules.py`), one record each in `meta` ------------------------

    def schedules(self) -> builtins.list[ScheduleRecord]:
        with self._read() as txn:
            return [decode_schedule(bytes(v)) for _, v in txn.scan("meta", _SCHEDULE)]

    def schedule(self, name: str) -> ScheduleRecord | None:
        with self._read() as txn:
            raw = txn.get("meta", _schedule_key(name))
            return None if raw is None else decode_schedule(bytes(raw))

    def put_schedule(self, record: ScheduleRecord, *, replace: bool = False) -> ScheduleRecord:
        key = _schedule_key(record.name)

        def work(txn: Txn) -> ScheduleRecord:
            txn.lock("meta", key)  # (against a concurrent add or firing, on PostgreSQL)
            raw = txn.get("meta", key)
            if raw is not None and not replace:
                raise JournalError(f"schedule {record.name!r} exists; remove it first (journal schedule rm "
                                   f"{record.name}) or choose another name")
            stored = record if raw is None else msgspec.structs.replace(
                record, version=decode_schedule(bytes(raw)).version + 1)
            txn.put("meta", key, encode_schedule(stored))
            return stored

        return self._transact(work)

    def delete_schedule(self, name: str) -> bool:
        key = _schedule_key(name)

        def work(txn: Txn) -> bool:
            found = txn.get("meta", key) is not None
            txn.delete("meta", key)
            return found

        return self._transact(work)

    def advance_schedule(self, record: ScheduleRecord, expected_version: int, creates: Sequence[Create],
                         cancels: Sequence[str] = ()) -> bool:
        """Move a schedule on: if it is still at `expected_version`, create the ticks'
        invocations (idempotent by id), ask `cancels` to cancel, and store `record` (its
        version one more) in one transaction; False if another worker moved it first."""
        return bool(self._transact(lambda txn: _advance(txn, record, expected_version, creates, cancels)))

    def advance_schedules(self, moves: Sequence[tuple[ScheduleRecord, int, Sequence[Create], Sequence[str]]]
                          ) -> builtins.list[bool | None]:
        """`advance_schedule` for each of `moves`, all in one transaction (a tick of
        thousands of schedules is not thousands of commits); a schedule that another
        transaction is moving right now is not waited for (None)."""

        def work(txn: Txn) -> builtins.list[bool | None]:
            keys = [_schedule_key(move[0].name) for move in moves]
            txn.try_locks("meta", keys)
            txn.read_ahead("meta", keys)
            return _advance_all(txn, moves)

        return self._transact_many(work)

    def fire_schedules(self, names: Sequence[str], decide: Decide) -> builtins.list[tuple[ScheduleRecord, bool] | None]:
        """`Store.fire_schedules`: the schedules, the records of their last runs and what the
        moves change are read first, a few statements in all on a database, the schedules
        locked without waiting (`Txn.try_locks`)."""

        def work(txn: Txn) -> builtins.list[tuple[ScheduleRecord, bool] | None]:
            keys = [_schedule_key(name) for name in names]
            txn.try_locks("meta", keys)
            txn.read_ahead("meta", keys)
            found: dict[int, ScheduleRecord] = {}
            for n, key in enumerate(keys):
                if txn.lock("meta", key, wait=False) and (raw := txn.get("meta", key)) is not None:
                    found[n] = decode_schedule(bytes(raw))
            last_ids = {n: validate_id(s.last_id) for n, s in found.items() if s.last_id}
            lasts = txn.peek_many("invocations", sorted(set(last_ids.values())))
            out: builtins.list[tuple[ScheduleRecord, bool] | None] = [None] * len(names)
            moves, where = [], []
            for n, schedule in found.items():
                last_id = last_ids.get(n)
                raw = None if last_id is None else lasts.get(last_id)
                move = decide(schedule, None if raw is None else _decode_record(raw, last_id or b""))
                out[n] = (schedule, False)
                if move is not None:
                    moves.append((move[0], schedule.version, move[1], move[2]))
                    where.append(n)
            for n, (record, version, _, _), done in zip(where, moves, _advance_all(txn, moves, seen=True), strict=True):
                if done:
                    out[n] = (msgspec.structs.replace(record, version=version + 1), True)
            return out

        return self._transact_many(work)

    def _apply_create(self, txn: Txn, op: Create) -> tuple[InvocationRecord, bool]:
        id_bytes = validate_id(op.record.id)
        if op.record.key is not None:
            validate_id(op.record.key, "key")
        if op.record.tags:
            check_tags(op.record.tags)
        return _create(txn, id_bytes, op.record, op.started, op.lease, op.if_busy)

    def apply(self, ops: Sequence[Op], *, durable: bool = True) -> builtins.list[OpResult | BaseException]:
        """`Store.apply`: a lone append (a step's) in a transaction of its own through
        `_write_once`; otherwise every operation in one transaction, or in several of at
        most `ops_per_transaction` (each operation stays atomic; the caller's fsync still
        covers them all)."""
        if len(ops) == 1 and ops[0].__class__ is Append:
            result = self._append_one(ops[0])
            if result is not _GENERIC:
                return [result]
        most = self.ops_per_transaction
        if most is None or len(ops) <= most:
            return self._transact(lambda txn: self._apply_all(txn, ops))
        results: list[OpResult | BaseException] = []
        for start in range(0, len(ops), most):
            part = ops[start:start + most]
            try:
                results += self._transact(lambda txn, part=part: self._apply_all(txn, part))  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - reported per operation; earlier parts are committed
                results += [exc] * (len(ops) - start)  # (a full disk or a closed store fails the rest too)
                break
        return results

    def _append_one(self, op: Append) -> Any:
        """One append without the generic plumbing (a closure, a results list, the retry
        loop), which costs about as much again as LMDB's commit. The rule applied is the same
        `_apply_append`; what a rule refuses is returned, in a transaction that wrote nothing."""
        try:
            begin = self._write_once()  # (LMDB may refuse to begin: another process grew the map)
            if begin is None:
                return _GENERIC
            with begin as txn:
                return self._apply_append(txn, op)
        except JournalError as exc:
            return exc
        except WriteAgain:
            return _GENERIC

    def _apply_all(self, txn: Txn, ops: Sequence[Op]) -> builtins.list[OpResult | BaseException]:
        results: list[OpResult | BaseException] = []
        n, count = 0, len(ops)
        while n < count:
            op = ops[n]
            if op.__class__ is Send and n + 1 < count and ops[n + 1].__class__ is Send:
                # Consecutive sends (many senders' messages gathered by the group commit) share
                # their reads and writes; each still lands as if after the one before it.
                end = n + 2
                while end < count and ops[end].__class__ is Send:
                    end += 1
                results += _talk.apply_sends(txn, ops[n:end])  # type: ignore[arg-type]  # all Sends
                n = end
                continue
            try:
                results.append(self._apply_op(txn, op))
            except JournalError as exc:
                results.append(exc)
            n += 1
        return results

    def _apply_op(self, txn: Txn, op: Op) -> OpResult:
        """One operation's rule (through `self`, so that a backend's override counts)."""
        match op:
            case Append():
                return self._apply_append(txn, op)
            case Acquire():
                return self._apply_acquire(txn, op)
            case Renew():
                self._apply_renew(txn, op)
                return None
            case SetStatus():
                return self._apply_set_status(txn, op)
            case Resolve():
                return self._apply_resolve(txn, op)
            case RequestCancel():
                return self._apply_request_cancel(txn, op)
            case Continue():
                return self._apply_continue(txn, op)
            case Create():
                return self._apply_create(txn, op)
            case Send():
                return _talk.apply_send(txn, op)

    apply_one = Store.apply_one

    def delete(self, invocation_ids: Sequence[str], *, keep_record: bool = False) -> int:
        def work(txn: Txn) -> int:
            removed = 0
            for invocation_id in invocation_ids:
                id_bytes = validate_id(invocation_id)
                record = _get_record(txn, id_bytes)
                if record is None:
                    continue
                for table in PER_INVOCATION:
                    for key, _ in list(txn.scan(table, id_bytes + b"\x00")):
                        txn.delete(table, key)
                txn.delete("leases", id_bytes)
                if record.key is not None and not record.finished:
                    txn.delete("keyq", _queue_key(record, id_bytes))
                if not keep_record:
                    _unindex(txn, id_bytes, record)
                    _listing.delete_all(txn, id_bytes, record)
                    txn.delete("invocations", id_bytes)
                removed += 1
            return removed

        return self._transact(work)

    # -- operations (one function per op type) ----------------------------------------------

    def _apply_append(self, txn: Txn, op: Append) -> InvocationRecord | None:
        """The append rule, the one place it is written: the lease epoch is checked in the
        writing transaction, and entries are inserted, never overwritten."""
        id_bytes = self._fence.owned_id(op.id)
        try:
            self._fence.check(txn, id_bytes, op.id, op.epoch)
        except LeaseLost:
            if not landed(txn, id_bytes, op.epoch, op.entries):
                raise
            return _require_record(txn, id_bytes, op.id) if op.transition is not None else None
        if op.state:  # refused before anything is written
            _check_has_key(_require_record(txn, id_bytes, op.id))
        tags = _tagged(_require_record(txn, id_bytes, op.id), op.tags) if op.tags else None
        insert_entries(txn, id_bytes, op.id, op.entries)
        if op.state:
            _write_state(txn, id_bytes, op.id, op.state)
        if op.talk is not None:
            _talk.apply_talk(txn, id_bytes, op.talk)
        if op.cancel_seen:
            record = _require_record(txn, id_bytes, op.id)
            if record.cancel_requested:
                old = msgspec.structs.replace(record)
                record.cancel_requested = False
                _put_record(txn, id_bytes, record, old)
        if tags is not None:
            record = _require_record(txn, id_bytes, op.id)
            if tags != record.tags:  # (a new dict: the old record keeps its own, which the index compares)
                _put_record(txn, id_bytes, msgspec.structs.replace(record, tags=tags), record)
        if op.transition is not None:
            record = _transition(txn, id_bytes, op.id, op.transition)
            if op.transition.release:
                self._released(id_bytes, op.id)
            return record
        return None

    def _released(self, id_bytes: bytes, invocation_id: str) -> None:
        """The invocation's lease was given back (or lost): what the fence remembered of its
        owner goes."""
        self._fence.release(id_bytes, invocation_id)

    def _apply_continue(self, txn: Txn, op: Continue) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        new_bytes = validate_id(op.record.id)
        try:
            self._fence.check(txn, id_bytes, op.id, op.epoch)
        except LeaseLost:
            done = _get_record(txn, id_bytes)
            if done is None or done.continued_as != op.record.id or not landed(txn, id_bytes, op.epoch, op.entries):
                raise
            return done  # this very continuation, done by an attempt whose answer was lost
        if _get_record(txn, new_bytes) is not None:
            raise InvocationConflict(
                f"cannot continue invocation {op.id!r} as {op.record.id!r}: that id is taken; pass another id"
            )
        old = _require_record(txn, id_bytes, op.id)
        if op.state:
            _check_has_key(old)
        insert_entries(txn, id_bytes, op.id, op.entries)
        if op.state:
            _write_state(txn, id_bytes, op.id, op.state)
        _insert(txn, new_bytes, op.record, op.started)
        old.continued_as = op.record.id
        record = _transition(txn, id_bytes, op.id, op.transition, old)
        self._released(id_bytes, op.id)  # the next generation is another invocation
        return record

    def _apply_acquire(self, txn: Txn, op: Acquire) -> tuple[int, InvocationRecord]:
        id_bytes = validate_id(op.id)
        record = _require_record(txn, id_bytes, op.id)
        if record.finished:
            raise InvocationBusy(f"invocation {op.id!r} is already {record.status}; there is nothing to run")
        head = _queue_head(txn, record.key) if record.key is not None and not op.ignore_queue else None
        queued = head is not None and head != op.id
        if queued and not op.wait_turn:
            raise InvocationBusy(
                f"invocation {op.id!r} is queued behind {head!r} on key {record.key!r}: invocations of "
                "one key run one at a time, in arrival order; it runs when that one finishes"
            )
        if op.wait_turn and not queued:
            return 0, record  # its turn has come: nothing to wait for
        lease = _get_lease(txn, id_bytes)
        if lease is not None and self._lease_live(txn, lease, op.now_us) and lease.owner != op.owner:
            if record.status == Status.PENDING:
                raise InvocationBusy(
                    f"invocation {op.id!r} waits for its turn on key {record.key!r} in process {lease.pid} on "
                    f"{lease.host}, which started it and runs it when its turn comes"
                )
            raise InvocationBusy(
                f"invocation {op.id!r} is being run by process {lease.pid} on {lease.host} "
                f"(lease epoch {lease.epoch}); wait for it, or for its lease to expire"
            )
        epoch = (lease.epoch if lease else 0) + 1
        txn.put("leases", id_bytes, _enc.encode(Lease(epoch, op.owner, op.host, op.pid, op.now_us + op.ttl_us)))
        if not queued:  # a waiter's lease leaves the invocation pending, where its turn finds it
            record = _transition(txn, id_bytes, op.id, Transition(Status.RUNNING, op.now_us), record)
        return epoch, record

    def _apply_renew(self, txn: Txn, op: Renew) -> None:
        id_bytes = validate_id(op.id)
        lease = self._fence.check(txn, id_bytes, op.id, op.epoch)
        txn.put("leases", id_bytes, _enc.encode(msgspec.structs.replace(lease, expires_at=op.now_us + op.ttl_us)))

    def _apply_set_status(self, txn: Txn, op: SetStatus) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        if op.epoch is not None:
            try:
                self._fence.check(txn, id_bytes, op.id, op.epoch)
            except LeaseLost:
                done = _get_record(txn, id_bytes)
                if done is None or not _set_already(txn, id_bytes, op, done):
                    raise
                return done  # this very change, done by an attempt whose answer was lost
        if op.owner is not None:
            lease = _get_lease(txn, id_bytes)
            if lease is None or lease.owner != op.owner:
                raise LeaseLost(f"invocation {op.id!r} is not leased to {op.owner}; nothing to give back")
        record = _transition(txn, id_bytes, op.id, op.transition)
        if op.transition.release:
            self._released(id_bytes, op.id)
        return record

    def _apply_resolve(self, txn: Txn, op: Resolve) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        key = id_bytes + b"\x00" + validate_id(op.name, "promise name")
        record = _require_record(txn, id_bytes, op.id)
        existing = txn.get("promises", key)
        if existing is not None:
            old = _resolution_dec.decode(existing)
            if (bytes(old.value) if old.error is None else None) == op.value and old.error == op.error:
                return record
            raise PromiseConflict(
                f"promise {op.name!r} of invocation {op.id!r} was already "
                + ("rejected" if old.error is not None else "resolved")
                + " with a different outcome; a promise is settled once"
            )
        if record.finished:
            raise PromiseConflict(
                f"invocation {op.id!r} is already {record.status}; promise {op.name!r} can no longer be delivered"
            )
        if op.error is None and op.value is not None:
            refused = refusal(record, op.name, op.value)
            if refused is not None:
                raise refused
        value = msgspec.Raw(op.value) if op.value is not None else NIL
        txn.put("promises", key, _enc.encode(Resolution(op.at, value, op.error)))
        if record.status == Status.SUSPENDED and (record.waiting == op.name or op.name in record.waiting_any):
            record = _transition(txn, id_bytes, op.id, Transition(Status.PENDING, op.at), record)
        return record

    def _apply_request_cancel(self, txn: Txn, op: RequestCancel) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        return request_cancel(txn, id_bytes, op.id, op.at, op.rollback)



def _tagged(record: InvocationRecord, added: list[tuple[str, str]]) -> dict[str, str]:
    """`record`'s tags with `added` set, checked before anything is written."""
    tags = {**record.tags, **check_tags(added)}
    if len(tags) > MAX_TAGS:
        raise JournalError(f"invocation {record.id!r} would have {len(tags)} tags; it may have at most {MAX_TAGS}: "
                           "set fewer with ctx.tag")
    return tags


def _set_already(txn: Txn, id_bytes: bytes, op: SetStatus, record: InvocationRecord) -> bool:
    """Whether `op`, refused for its epoch, is a change its owner already made: the lease
    was given back at that epoch, and the record shows this status since this instant."""
    lease = _get_lease(txn, id_bytes)
    return (lease is not None and not lease.owner and lease.epoch == op.epoch and op.transition.release
            and record.updated_at == op.transition.at and record.status.value == Status(op.transition.status).value)
