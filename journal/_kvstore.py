"""Store logic written once over a small key-value transaction interface.

`MemoryStore`, `LmdbStore` and `PostgresStore` differ only in how they open transactions
(and in how a store tells that a lease's owner has died); every rule (idempotent create,
the append rule, lease fencing, status indexes, promise wake-ups) lives here, so they
cannot drift apart.

Tables and keys (keys sort the way we scan: invocation, then big-endian seq):
    meta         b"format"              -> the format version (LMDB, PostgreSQL)
                 b"cancel-requests"     -> u64 BE: cancel requests recorded so far
    invocations  id                     -> InvocationRecord
    entries      id 0x00 seq(u32 BE)    -> entry bytes
    leases       id                     -> Lease
    status       status 0x00 id         -> b""
    timers       wake_at(u64 BE) id     -> b""
    promises     id 0x00 name           -> Resolution
    state        key 0x00 name          -> raw value (a thread's durable state)
    keyq         key 0x00 queued_at(u64 BE) id -> b"" (invocations of a key, in run order)
"""

from __future__ import annotations

import abc
import builtins
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeGuard, TypeVar

import msgspec

from ._codec import DEFAULT_MAX_ENTRY_BYTES
from ._entries import NIL
from ._ids import validate_id
from ._records import FINISHED, HOST, InvocationRecord, Lease, Resolution, Status
from ._store import (
    Acquire,
    Append,
    Continue,
    Create,
    Op,
    OpResult,
    Renew,
    RequestCancel,
    Resolve,
    SetStatus,
    Store,
    Transition,
)
from .errors import (
    CorruptEntry,
    InvocationBusy,
    InvocationConflict,
    InvocationNotFound,
    JournalError,
    LeaseLost,
    PromiseConflict,
)

T = TypeVar("T")

TABLES = ("meta", "invocations", "entries", "leases", "status", "timers", "promises", "state", "keyq")

_CANCELS = b"cancel-requests"  # in `meta`: a counter, bumped by every cancel request

_enc = msgspec.msgpack.Encoder()
_record_dec = msgspec.msgpack.Decoder(InvocationRecord)
_lease_dec = msgspec.msgpack.Decoder(Lease)
_resolution_dec = msgspec.msgpack.Decoder(Resolution)


class _Txn(abc.ABC):
    @abc.abstractmethod
    def get(self, table: str, key: bytes) -> bytes | None: ...

    @abc.abstractmethod
    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    @abc.abstractmethod
    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        """Put `key` only if it is absent; whether it was put (one lookup, not a get and a put)."""

    @abc.abstractmethod
    def delete(self, table: str, key: bytes) -> None: ...

    @abc.abstractmethod
    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with `prefix`, from `start` (inclusive) in key order."""


def entry_key(id_bytes: bytes, seq: int) -> bytes:
    return id_bytes + b"\x00" + seq.to_bytes(4, "big")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_is_live(lease: Lease | None, now_us: int) -> TypeGuard[Lease]:
    """Whether a lease still protects its owner (a dead owner on this host loses it at once)."""
    if lease is None or not lease.owner:
        return False
    if lease.host == HOST and lease.pid != os.getpid() and not pid_alive(lease.pid):
        return False
    return lease.expires_at > now_us


class KVStore(abc.ABC):
    """The `Store` protocol over `_Txn`; subclasses provide `_read()` and `_transact()`."""

    path: str | None = None
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    blocking: bool = False

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[_Txn]: ...

    @abc.abstractmethod
    def _transact(self, work: Callable[[_Txn], T]) -> T:
        """Run `work` in one write transaction and commit it (retrying it whole if needed)."""

    def sync(self) -> None:  # noqa: B027 - a store that is durable at commit has nothing to flush
        pass

    def start_background_sync(self, interval: float) -> None:  # noqa: B027 - nothing to flush, as sync()
        pass

    async def apply_async(self, ops: Sequence[Op], *, durable: bool = True) -> list[Any] | None:
        return None  # a local store's `apply` is quick enough to call from the loop

    def wait_for_work(self, timeout: float) -> None:
        time.sleep(timeout)  # nothing to listen to: the caller polls

    def close(self) -> None:  # noqa: B027 - optional: only backends holding resources override it
        pass

    def _lease_live(self, txn: _Txn, lease: Lease | None, now_us: int) -> bool:
        """Whether `lease` still protects its owner; a backend that can tell more overrides it."""
        return lease_is_live(lease, now_us)

    def _check_epoch(self, txn: _Txn, id_bytes: bytes, invocation_id: str, epoch: int) -> Lease:
        """The fencing rule, read in the writing transaction (a backend may cache its verdict)."""
        return check_lease(txn.get("leases", id_bytes), invocation_id, epoch)

    # -- reads ---------------------------------------------------------------------------

    def get(self, invocation_id: str) -> InvocationRecord | None:
        with self._read() as txn:
            return _get_record(txn, validate_id(invocation_id))

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
        return self._transact(lambda txn: _create(txn, id_bytes, record, started))

    def _apply_create(self, txn: _Txn, op: Create) -> tuple[InvocationRecord, bool]:
        id_bytes = validate_id(op.record.id)
        if op.record.key is not None:
            validate_id(op.record.key, "key")
        return _create(txn, id_bytes, op.record, op.started)

    def apply(self, ops: Sequence[Op], *, durable: bool = True) -> builtins.list[OpResult | BaseException]:
        return self._transact(lambda txn: self._apply_all(txn, ops))

    def _apply_all(self, txn: _Txn, ops: Sequence[Op]) -> builtins.list[OpResult | BaseException]:
        results: list[OpResult | BaseException] = []
        for op in ops:
            try:
                results.append(getattr(self, _APPLY[type(op)])(txn, op))  # a backend's override counts
            except JournalError as exc:
                results.append(exc)
        return results

    apply_one = Store.apply_one

    def delete(self, invocation_ids: Sequence[str], *, keep_record: bool = False) -> int:
        def work(txn: _Txn) -> int:
            removed = 0
            for invocation_id in invocation_ids:
                id_bytes = validate_id(invocation_id)
                record = _get_record(txn, id_bytes)
                if record is None:
                    continue
                for key, _ in list(txn.scan("entries", id_bytes + b"\x00")):
                    txn.delete("entries", key)
                for key, _ in list(txn.scan("promises", id_bytes + b"\x00")):
                    txn.delete("promises", key)
                txn.delete("leases", id_bytes)
                if record.key is not None and not record.finished:
                    txn.delete("keyq", _queue_key(record, id_bytes))
                if not keep_record:
                    _unindex(txn, id_bytes, record)
                    txn.delete("invocations", id_bytes)
                removed += 1
            return removed

        return self._transact(work)

    # -- operations (one function per op type) ----------------------------------------------

    def _apply_append(self, txn: _Txn, op: Append) -> InvocationRecord | None:
        """The append rule, the one place it is written: the lease epoch is checked in the
        writing transaction, and entries are inserted, never overwritten."""
        id_bytes = _owned_id(op.id)
        self._check_epoch(txn, id_bytes, op.id, op.epoch)
        if op.state:  # refused before anything is written
            _check_has_key(_require_record(txn, id_bytes, op.id))
        _insert_entries(txn, id_bytes, op.id, op.entries)
        if op.state:
            _write_state(txn, id_bytes, op.id, op.state)
        if op.cancel_seen:
            record = _require_record(txn, id_bytes, op.id)
            if record.cancel_requested:
                old = msgspec.structs.replace(record)
                record.cancel_requested = False
                _put_record(txn, id_bytes, record, old)
        if op.transition is not None:
            return _transition(txn, id_bytes, op.id, op.transition)
        return None

    def _apply_continue(self, txn: _Txn, op: Continue) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        self._check_epoch(txn, id_bytes, op.id, op.epoch)
        new_bytes = validate_id(op.record.id)
        if _get_record(txn, new_bytes) is not None:
            raise InvocationConflict(
                f"cannot continue invocation {op.id!r} as {op.record.id!r}: that id is taken; pass another id"
            )
        old = _require_record(txn, id_bytes, op.id)
        if op.state:
            _check_has_key(old)
        _insert_entries(txn, id_bytes, op.id, op.entries)
        if op.state:
            _write_state(txn, id_bytes, op.id, op.state)
        _insert(txn, new_bytes, op.record, op.started)
        old.continued_as = op.record.id
        return _transition(txn, id_bytes, op.id, op.transition, old)

    def _apply_acquire(self, txn: _Txn, op: Acquire) -> tuple[int, InvocationRecord]:
        id_bytes = validate_id(op.id)
        record = _require_record(txn, id_bytes, op.id)
        if record.finished:
            raise InvocationBusy(f"invocation {op.id!r} is already {record.status}; there is nothing to run")
        if record.key is not None and not op.ignore_queue:
            head = _queue_head(txn, record.key)
            if head is not None and head != op.id:
                raise InvocationBusy(
                    f"invocation {op.id!r} is queued behind {head!r} on key {record.key!r}: invocations of "
                    "one key run one at a time, in arrival order; it runs when that one finishes"
                )
        lease = _get_lease(txn, id_bytes)
        if lease is not None and self._lease_live(txn, lease, op.now_us) and lease.owner != op.owner:
            raise InvocationBusy(
                f"invocation {op.id!r} is being run by process {lease.pid} on {lease.host} "
                f"(lease epoch {lease.epoch}); wait for it, or for its lease to expire"
            )
        epoch = (lease.epoch if lease else 0) + 1
        txn.put("leases", id_bytes, _enc.encode(Lease(epoch, op.owner, op.host, op.pid, op.now_us + op.ttl_us)))
        record = _transition(txn, id_bytes, op.id, Transition(Status.RUNNING, op.now_us), record)
        return epoch, record

    def _apply_renew(self, txn: _Txn, op: Renew) -> None:
        id_bytes = validate_id(op.id)
        lease = self._check_epoch(txn, id_bytes, op.id, op.epoch)
        txn.put("leases", id_bytes, _enc.encode(msgspec.structs.replace(lease, expires_at=op.now_us + op.ttl_us)))

    def _apply_set_status(self, txn: _Txn, op: SetStatus) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        if op.epoch is not None:
            self._check_epoch(txn, id_bytes, op.id, op.epoch)
        return _transition(txn, id_bytes, op.id, op.transition)

    def _apply_resolve(self, txn: _Txn, op: Resolve) -> InvocationRecord:
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
        value = msgspec.Raw(op.value) if op.value is not None else NIL
        txn.put("promises", key, _enc.encode(Resolution(op.at, value, op.error)))
        if record.status == Status.SUSPENDED and (record.waiting == op.name or op.name in record.waiting_any):
            record = _transition(txn, id_bytes, op.id, Transition(Status.PENDING, op.at), record)
        return record

    def _apply_request_cancel(self, txn: _Txn, op: RequestCancel) -> InvocationRecord:
        id_bytes = validate_id(op.id)
        record = _require_record(txn, id_bytes, op.id)
        if record.finished:
            return record
        old = msgspec.structs.replace(record)
        record.cancel_requested = True
        count = txn.get("meta", _CANCELS)
        txn.put("meta", _CANCELS, ((0 if count is None else int.from_bytes(count, "big")) + 1).to_bytes(8, "big"))
        record.cancel_rollback = record.cancel_rollback or op.rollback
        record.updated_at = op.at
        if record.status in (Status.SUSPENDED, Status.DIVERGED):
            record.status = Status.PENDING
            record.waiting = None
            record.waiting_any = []
            record.wake_at = None
        _put_record(txn, id_bytes, record, old)
        return record


def _create(txn: _Txn, id_bytes: bytes, record: InvocationRecord, started: bytes) -> tuple[InvocationRecord, bool]:
    existing = _get_record(txn, id_bytes)
    if existing is not None:
        if existing.input_digest != record.input_digest or existing.handler != record.handler:
            raise InvocationConflict(
                f"invocation {record.id!r} already exists ({existing.status}, handler "
                f"{existing.handler}) and was started with a different "
                + ("input" if existing.handler == record.handler else f"handler than {record.handler}")
                + "; pick a new --id, or pass the same input to attach to it"
            )
        return existing, False
    _insert(txn, id_bytes, record, started)
    return record, True


_APPLY: dict[type[Op], str] = {
    Append: "_apply_append",
    Continue: "_apply_continue",
    Create: "_apply_create",
    Acquire: "_apply_acquire",
    Renew: "_apply_renew",
    SetStatus: "_apply_set_status",
    Resolve: "_apply_resolve",
    RequestCancel: "_apply_request_cancel",
}


_owned_ids: dict[str, bytes] = {}


def _owned_id(invocation_id: str) -> bytes:
    """`validate_id` for the append path, remembered: an owner appends under one id many times."""
    try:
        return _owned_ids[invocation_id]
    except (KeyError, TypeError):
        pass
    id_bytes = validate_id(invocation_id)
    if len(_owned_ids) >= 4096:
        _owned_ids.clear()
    _owned_ids[invocation_id] = id_bytes
    return id_bytes


def _queue_key(record: InvocationRecord, id_bytes: bytes) -> bytes:
    assert record.key is not None  # only keyed invocations are queued
    return record.key.encode() + b"\x00" + record.queued_at.to_bytes(8, "big") + id_bytes


def _queue_head(txn: _Txn, key: str) -> str | None:
    prefix = key.encode() + b"\x00"
    for k, _ in txn.scan("keyq", prefix):
        return k[len(prefix) + 8:].decode()
    return None


def _insert(txn: _Txn, id_bytes: bytes, record: InvocationRecord, started: bytes) -> None:
    if record.key is not None:
        record.queued_at = record.queued_at or record.created_at
        txn.put("keyq", _queue_key(record, id_bytes), b"")
    _put_record(txn, id_bytes, record, None)
    txn.put("entries", entry_key(id_bytes, 0), started)


def _check_has_key(record: InvocationRecord) -> None:
    if record.key is None:
        raise JournalError(f"invocation {record.id!r} has no key, so it has no state to change")


def _write_state(txn: _Txn, id_bytes: bytes, invocation_id: str, changes: list[tuple[str, bytes | None]]) -> None:
    record = _require_record(txn, id_bytes, invocation_id)
    _check_has_key(record)
    assert record.key is not None  # _check_has_key raised otherwise
    prefix = record.key.encode() + b"\x00"
    for name, raw in changes:
        if raw is None:
            txn.delete("state", prefix + name.encode())
        else:
            txn.put("state", prefix + name.encode(), raw)


def _settle_links(txn: _Txn, id_bytes: bytes, record: InvocationRecord) -> None:
    """A finished invocation leaves its key's queue and reports to the parent awaiting it."""
    if record.key is not None:
        txn.delete("keyq", _queue_key(record, id_bytes))
    if record.parent is None or record.continued_as is not None:
        return
    parent_bytes = record.parent.encode()
    parent = _get_record(txn, parent_bytes)
    if parent is None or parent.finished:
        return
    root = record
    while root.continued_from is not None:  # the parent awaits the first invocation of a chain
        earlier = _get_record(txn, root.continued_from.encode())
        if earlier is None:
            break
        root = earlier
    name = "child:" + root.id
    key = parent_bytes + b"\x00" + name.encode()
    if txn.get("promises", key) is not None:
        return
    if record.status == Status.COMPLETED:
        resolution = Resolution(record.updated_at, record.result)
    else:
        reason = record.error.message if record.error is not None else str(record.status)
        resolution = Resolution(record.updated_at, NIL, f"child invocation {record.id!r} {record.status}: {reason}")
    txn.put("promises", key, _enc.encode(resolution))
    if parent.status == Status.SUSPENDED and (parent.waiting == name or name in parent.waiting_any):
        _transition(txn, parent_bytes, parent.id, Transition(Status.PENDING, record.updated_at), parent)


def _decode_record(data: bytes, id_bytes: bytes) -> InvocationRecord:
    try:
        return _record_dec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptEntry(
            f"the record of invocation {id_bytes.decode(errors='replace')!r} does not decode ({exc})",
            invocation_id=id_bytes.decode(errors="replace"),
        ) from None


def _get_record(txn: _Txn, id_bytes: bytes) -> InvocationRecord | None:
    data = txn.get("invocations", id_bytes)
    return None if data is None else _decode_record(data, id_bytes)


def _require_record(txn: _Txn, id_bytes: bytes, invocation_id: str) -> InvocationRecord:
    record = _get_record(txn, id_bytes)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r}; `journal ls` lists the invocations")
    return record


def _get_lease(txn: _Txn, id_bytes: bytes) -> Lease | None:
    data = txn.get("leases", id_bytes)
    return None if data is None else _lease_dec.decode(data)


def check_lease(data: bytes | None, invocation_id: str, epoch: int) -> Lease:
    """The fencing rule: the stored lease `data` must still give `epoch` ownership."""
    lease = None if data is None else _lease_dec.decode(data)
    if lease is None or lease.epoch != epoch or not lease.owner:
        holder = f"epoch {lease.epoch} ({lease.owner or 'released'})" if lease else "nobody"
        raise LeaseLost(
            f"invocation {invocation_id!r}: this process held lease epoch {epoch} but the lease is now "
            f"{holder}; another process took the invocation over, so this one stops before its next side effect"
        )
    return lease


def _insert_entries(txn: _Txn, id_bytes: bytes, invocation_id: str, entries: list[tuple[int, bytes]]) -> None:
    """Insert entries, never overwrite one: all of them, or none and the error."""
    if len(entries) == 1:  # a step's append: nothing to take back
        seq, data = entries[0]
        if not txn.insert("entries", id_bytes + b"\x00" + seq.to_bytes(4, "big"), data):
            raise already_journaled(invocation_id, seq)
        return
    written: list[bytes] = []
    for seq, data in entries:
        key = entry_key(id_bytes, seq)
        if not txn.insert("entries", key, data):
            for key in written:  # the batch's other operations still commit: leave no part of this one
                txn.delete("entries", key)
            raise already_journaled(invocation_id, seq)
        written.append(key)


def already_journaled(invocation_id: str, seq: int) -> JournalError:
    return JournalError(
        f"invocation {invocation_id!r} seq {seq} is already journaled; entries are append-only "
        "(this means two owners wrote to one invocation: report it as a bug)"
    )


def _unindex(txn: _Txn, id_bytes: bytes, record: InvocationRecord) -> None:
    txn.delete("status", record.status.value.encode() + b"\x00" + id_bytes)
    if record.wake_at is not None:
        txn.delete("timers", record.wake_at.to_bytes(8, "big") + id_bytes)


def _put_record(txn: _Txn, id_bytes: bytes, record: InvocationRecord, old: InvocationRecord | None) -> None:
    if old is not None:
        _unindex(txn, id_bytes, old)
    txn.put("invocations", id_bytes, _enc.encode(record))
    txn.put("status", record.status.value.encode() + b"\x00" + id_bytes, b"")
    if record.wake_at is not None:
        txn.put("timers", record.wake_at.to_bytes(8, "big") + id_bytes, b"")


def _transition(
    txn: _Txn, id_bytes: bytes, invocation_id: str, change: Transition, record: InvocationRecord | None = None
) -> InvocationRecord:
    record = record or _require_record(txn, id_bytes, invocation_id)
    old = msgspec.structs.replace(record)
    status = Status(change.status)
    # What arrived while the handler was unwinding to wait must not be lost: a promise
    # already resolved, or a cancel request, leaves the invocation runnable instead.
    names = ([change.waiting] if change.waiting is not None else []) + list(change.waiting_any or ())
    if status == Status.SUSPENDED and (
        record.cancel_requested
        or any(txn.get("promises", id_bytes + b"\x00" + name.encode()) is not None for name in names)
    ):
        status = Status.PENDING
    record.status = status
    record.updated_at = change.at
    record.waiting = change.waiting
    record.waiting_any = list(change.waiting_any or ())
    record.wake_at = change.wake_at
    record.divergence = change.divergence
    if change.result is not None:
        record.result = change.result
    if change.error is not None:
        record.error = change.error
    if record.status in FINISHED:
        record.cancel_requested = False
    _put_record(txn, id_bytes, record, old)
    if record.status in FINISHED and old.status not in FINISHED:
        _settle_links(txn, id_bytes, record)
    if change.release:
        lease = _get_lease(txn, id_bytes)
        if lease is not None:
            txn.put("leases", id_bytes, _enc.encode(Lease(lease.epoch)))
    return record
