"""The rules of one transaction over the key-value tables, written once for every backend.

`KVStore` (`_store.py`) runs each operation in one transaction of its backend; what it
does inside that transaction is here: the key layout, reading and writing records with
their status and timer indexes (`_put_record`), status transitions (`_transition`), the
lease fence's rule (`check_lease`; the append path is `_append.py`), a key's queue and
state, and the links a finished invocation settles (its parent's promise, its successor).

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
    keyq         key 0x00 queued_at(u64 BE) id -> b"" (invocations of a key, in creation order)
    listing      dimension 0x00 newest(u64 BE) id -> b"" (newest first, overall and by status,
                 handler and key: `_listing.py`)
                 b"q" 0x00 priority id -> b"" (the run queue: `_runnable.py`)
    inbox        id 0x00 topic 0x00 number(u64 BE) -> InboxMessage (sent, not yet received)
    messages     id 0x00 message id     -> SentMessage (every message id sent, and its reply)
    published    id 0x00 name           -> PublishedValue (the latest value under a name)
    topics       id 0x00 topic          -> PromiseType (the type the handler receives a topic with)
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterator, Sequence
from typing import TypeGuard

import msgspec

from .._entries import NIL
from .._records import FINISHED, HOST, MESSAGE_WAIT, InvocationRecord, Lease, Resolution, Status
from .._store import Acquire, Transition
from ..errors import (
    CorruptEntry,
    InvocationConflict,
    InvocationNotFound,
    JournalError,
    KeyBusy,
    LeaseLost,
)
from . import _listing, _runnable

TABLES = ("meta", "invocations", "entries", "leases", "status", "timers", "promises", "state", "keyq", "listing",
          "inbox", "messages", "published", "topics")
# The tables whose keys begin with an invocation's id and a NUL: what deleting it removes.
PER_INVOCATION = ("entries", "promises", "inbox", "messages", "published", "topics")

_CANCELS = b"cancel-requests"  # in `meta`: a counter, bumped by every cancel request

_enc = msgspec.msgpack.Encoder()
_record_dec = msgspec.msgpack.Decoder(InvocationRecord)
_lease_dec = msgspec.msgpack.Decoder(Lease)
_resolution_dec = msgspec.msgpack.Decoder(Resolution)


class Txn(abc.ABC):
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

    def scan_some(self, table: str, prefix: bytes, start: bytes, limit: int) -> Iterator[tuple[bytes, bytes]]:
        """`scan`, stopping after `limit` items: a backend that fetches a scan whole (a
        database) fetches only these."""
        for n, item in enumerate(self.scan(table, prefix, start)):
            if n == limit:
                return
            yield item

    def add(self, table: str, key: bytes, delta: int) -> None:
        """Add `delta` to the count at `key` (a u64 BE; a count at 0 has no row here). Only
        scans read a count. A backend whose writers run at once (PostgreSQL) adds it as the
        transaction ends, in the database: two transactions counting on one row then lose
        neither addition, and hold the row only from then to their commit."""
        raw = self.get(table, key)
        n = (0 if raw is None else int.from_bytes(raw, "big")) + delta
        if n > 0:
            self.put(table, key, n.to_bytes(8, "big"))
        else:
            self.delete(table, key)

    def get_many(self, table: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """`get` of each key, in order: a backend that answers over the network reads them
        in one statement."""
        return [self.get(table, key) for key in keys]

    def put_many(self, table: str, items: Sequence[tuple[bytes, bytes]]) -> None:
        """`put` of each item, in order (a later one of the same key wins): a backend that
        answers over the network writes them in one statement."""
        for key, value in items:
            self.put(table, key, value)

    def lease_row(self, id_bytes: bytes) -> bytes | None:
        """The invocation's lease row as stored: what the append path's fence reads and
        compares (a backend may read it more directly than `get`)."""
        return self.get("leases", id_bytes)

    @abc.abstractmethod
    def last(self, table: str, prefix: bytes) -> bytes | None:
        """The greatest key that starts with `prefix`. In a write transaction, nobody else
        adds a key under `prefix` until this one ends (LMDB has one writer; PostgreSQL
        locks the prefix)."""

    def lock(self, table: str, prefix: bytes, *, wait: bool = True) -> bool:
        """Keep every other writer off `prefix` until this write transaction ends, as `last`
        does, without reading anything. `wait=False`: if another transaction holds it, False
        at once (PostgreSQL); a store with one writer at a time always has it."""
        return True

    def try_locks(self, table: str, prefixes: Sequence[bytes]) -> None:
        """A hint: `lock(table, prefix, wait=False)` of each follows; a backend over the
        network tries them all now, in one statement."""
        return None

    def peek_many(self, table: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The rows of `keys` that exist, read without locking any (in one statement on a database)."""
        return {key: bytes(raw) for key in keys if (raw := self.get(table, key)) is not None}

    def read_ahead(self, table: str, keys: Sequence[bytes], *, for_update: bool = False) -> None:
        """A hint: these rows are read (`get`) later in this transaction; a backend over the
        network reads them now, in one statement, locked as `get` locks each (and with
        `for_update`, locked even where `get` does not lock: rows read to be written back)."""
        return None


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key greater than every key that starts with `prefix` (None: no such key)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def entry_key(id_bytes: bytes, seq: int) -> bytes:
    return id_bytes + b"\x00" + seq.to_bytes(4, "big")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host still runs. A zombie (dead, not yet waited for by its
    parent) does not: `kill(pid, 0)` still finds it, so where /proc tells, its state does."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not _PROC or not _dead(pid)


_PROC = os.path.isdir("/proc/self")


def _dead(pid: int) -> bool:
    """Whether /proc says `pid` is a zombie, or gone since."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except FileNotFoundError:
        return True
    except OSError:  # (not ours to read: alive as far as anyone can tell)
        return False
    try:
        stat = os.read(fd, 512)
    finally:
        os.close(fd)
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")".
    after = stat.rfind(b")") + 2
    return stat[after:after + 1] in (b"Z", b"X", b"")


def lease_is_live(lease: Lease | None, now_us: int) -> TypeGuard[Lease]:
    """Whether a lease still protects its owner (a dead owner on this host loses it at once)."""
    if lease is None or not lease.owner:
        return False
    if lease.host == HOST and lease.pid != os.getpid() and not pid_alive(lease.pid):
        return False
    return lease.expires_at > now_us


def _create(txn: Txn, id_bytes: bytes, record: InvocationRecord, started: bytes,
            lease: Acquire | None = None, if_busy: str = "enqueue") -> tuple[InvocationRecord, bool]:
    existing = _get_record(txn, id_bytes)
    if existing is not None:
        if existing.input_digest != record.input_digest or existing.handler != record.handler:
            raise InvocationConflict(
                f"invocation {record.id!r} already exists ({existing.status}, handler "
                f"{existing.handler}) and was started with a different "
                + ("input" if existing.handler == record.handler else f"handler than {record.handler}")
                + "; start it under another id, or with the same input to attach to it"
            )
        return existing, False
    if if_busy != "enqueue" and record.key is not None:
        _when_busy(txn, record, if_busy)
    if lease is None:
        return _insert(txn, id_bytes, record, started), True
    # Its first lease, taken with its creation: what `Acquire` would find and do here. One
    # of a key runs now only if it is first in its key's queue; behind another, it stays
    # `pending` with its creator as its waiter (`Acquire.wait_turn`), so that from the
    # moment it exists every other process sees that someone will run it.
    txn.put("leases", id_bytes, _enc.encode(Lease(1, lease.owner, lease.host, lease.pid, lease.now_us + lease.ttl_us)))
    if record.key is None:
        record.status, record.updated_at = Status.RUNNING, lease.now_us
        return _insert(txn, id_bytes, record, started), True
    inserted = _insert(txn, id_bytes, record, started)
    if _queue_head(txn, record.key) != record.id:
        return inserted, True
    return _transition(txn, id_bytes, record.id, Transition(Status.RUNNING, lease.now_us), inserted), True


def _debounce(txn: Txn, id_bytes: bytes, record: InvocationRecord, started: bytes, wait_us: int,
              max_us: int | None) -> tuple[InvocationRecord, bool]:
    """A debounced start of `record.handler` on `record.key`: while an earlier one has not
    begun (pending, its start still ahead), it takes this input and starts `wait_us` from
    now, never later than `max_us` after the first of the burst; otherwise `record` is
    created, starting `wait_us` from now. The slot that names the waiting one is in `meta`.

    Its entry 0 is written again with the new input: the one place an entry is replaced,
    allowed because the invocation has never run (no lease was ever taken on it), so
    nothing anyone replays was built on the old one."""
    assert record.key is not None  # `KVStore.debounce` refused it otherwise
    slot = b"debounce\x00" + record.key.encode() + b"\x00" + record.handler.encode("utf-8", "surrogatepass") + b"\x00"
    now = record.created_at
    # `last` keeps every other writer off this slot until this transaction ends (PostgreSQL
    # locks the prefix; LMDB has one writer): two starts at once never both create one.
    held = txn.get("meta", slot) if txn.last("meta", slot) is not None else None
    if held is not None:
        first_at = int.from_bytes(held[:8], "big")
        waiting_bytes = bytes(held[8:])
        waiting = _get_record(txn, waiting_bytes)
        if (waiting is not None and waiting.status == Status.PENDING and waiting.wake_at is not None
                and txn.get("leases", waiting_bytes) is None):
            old = msgspec.structs.replace(waiting)
            wake = now + wait_us if max_us is None else min(now + wait_us, first_at + max_us)
            waiting.wake_at = waiting.start_at = max(wake, now)
            waiting.input_digest = record.input_digest
            waiting.updated_at = now
            txn.put("entries", entry_key(waiting_bytes, 0), started)
            _put_record(txn, waiting_bytes, waiting, old)
            return waiting, False
    existing = _get_record(txn, id_bytes)
    if existing is not None:
        return _create(txn, id_bytes, record, started)  # the same id again: attach, or a conflict
    record = msgspec.structs.replace(record, start_at=now + wait_us, wake_at=now + wait_us)
    inserted = _insert(txn, id_bytes, record, started)
    txn.put("meta", slot, now.to_bytes(8, "big") + id_bytes)
    return inserted, True


BUSY_STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")


def _when_busy(txn: Txn, record: InvocationRecord, if_busy: str) -> None:
    """A start into a key whose thread may be busy, decided in the creating transaction:
    `last` on the key's queue keeps every other creator of the key out until it commits
    (LMDB has one writer; PostgreSQL locks the prefix), so two starts at once never both win."""
    if if_busy not in BUSY_STRATEGIES:
        raise JournalError(f"if_busy {if_busy!r} is not one of {', '.join(BUSY_STRATEGIES)}")
    assert record.key is not None
    prefix = record.key.encode() + b"\x00"
    if txn.last("keyq", prefix) is None:
        return  # nothing unfinished on the key
    busy = [k[len(prefix) + 8:] for k, _ in txn.scan("keyq", prefix)]
    if if_busy == "reject":
        names = [b.decode(errors="replace") for b in busy]
        raise KeyBusy(
            f"key {record.key!r} is busy: {', '.join(repr(n) for n in names[:5])}"
            + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            + " not finished yet; try again once it is, or start with if_busy enqueue (wait behind it), "
            "interrupt or rollback (cancel it)", key=record.key, busy=tuple(names))
    for busy_bytes in busy:  # interrupt, rollback: every unfinished turn is asked to cancel
        request_cancel(txn, busy_bytes, busy_bytes.decode(errors="replace"), record.created_at,
                       if_busy == "rollback")


def request_cancel(txn: Txn, id_bytes: bytes, invocation_id: str, at: int, rollback: bool) -> InvocationRecord:
    """The cancel request rule (`RequestCancel`): recorded on the invocation, counted, and a
    suspended, diverged or delayed one made runnable so that it receives it."""
    record = _require_record(txn, id_bytes, invocation_id)
    if record.finished:
        return record
    old = msgspec.structs.replace(record)
    record.cancel_requested = True
    count = txn.get("meta", _CANCELS)
    txn.put("meta", _CANCELS, ((0 if count is None else int.from_bytes(count, "big")) + 1).to_bytes(8, "big"))
    record.cancel_rollback = record.cancel_rollback or rollback
    record.updated_at = at
    if record.status in (Status.SUSPENDED, Status.DIVERGED) or record.wake_at is not None:
        # (a delayed start that is asked to cancel runs now, to receive it)
        record.status = Status.PENDING
        record.waiting = None
        record.waiting_any = []
        record.promise_types = []
        record.wake_at = None
    _put_record(txn, id_bytes, record, old)
    return record


def _queue_key(record: InvocationRecord, id_bytes: bytes) -> bytes:
    assert record.key is not None  # only keyed invocations are queued
    return record.key.encode() + b"\x00" + record.queued_at.to_bytes(8, "big") + id_bytes


def _queue_head(txn: Txn, key: str) -> str | None:
    prefix = key.encode() + b"\x00"
    for k, _ in txn.scan("keyq", prefix):
        return k[len(prefix) + 8:].decode()
    return None


def _insert(txn: Txn, id_bytes: bytes, record: InvocationRecord, started: bytes) -> InvocationRecord:
    """Write a new invocation; the record as written. A new invocation of a key is placed in
    its queue on a copy of `record`: a transaction retried whole (a PostgreSQL deadlock, a
    grown LMDB map) must read the queue's end again, not reuse what its first try read."""
    if record.key is not None:
        if not record.queued_at:  # (a continuation keeps its predecessor's place)
            record = msgspec.structs.replace(record, queued_at=_queue_place(txn, record.key, record.created_at))
        txn.put("keyq", _queue_key(record, id_bytes), b"")
    _put_record(txn, id_bytes, record, None)
    txn.put("entries", entry_key(id_bytes, 0), started)
    return record


def _queue_place(txn: Txn, key: str, created_at: int) -> int:
    """Where a new invocation of `key` queues: behind every invocation already there, even
    one stamped later by its clock. Two creators' clocks may read the same microsecond, or
    disagree (another host, or a clock set back), and the queue sorts by this number first."""
    prefix = key.encode() + b"\x00"
    tail = txn.last("keyq", prefix)
    if tail is None:
        return created_at
    return max(created_at, int.from_bytes(tail[len(prefix):len(prefix) + 8], "big") + 1)


def _check_has_key(record: InvocationRecord) -> None:
    if record.key is None:
        raise JournalError(f"invocation {record.id!r} has no key, so it has no state to change")


def _write_state(txn: Txn, id_bytes: bytes, invocation_id: str, changes: list[tuple[str, bytes | None]]) -> None:
    record = _require_record(txn, id_bytes, invocation_id)
    _check_has_key(record)
    assert record.key is not None  # _check_has_key raised otherwise
    prefix = record.key.encode() + b"\x00"
    for name, raw in changes:
        if raw is None:
            txn.delete("state", prefix + name.encode())
        else:
            txn.put("state", prefix + name.encode(), raw)


def _settle_links(txn: Txn, id_bytes: bytes, record: InvocationRecord) -> None:
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


def _get_record(txn: Txn, id_bytes: bytes) -> InvocationRecord | None:
    data = txn.get("invocations", id_bytes)
    return None if data is None else _decode_record(data, id_bytes)


def _require_record(txn: Txn, id_bytes: bytes, invocation_id: str) -> InvocationRecord:
    record = _get_record(txn, id_bytes)
    if record is None:
        raise InvocationNotFound(f"no invocation {invocation_id!r}; `journal ls` lists the invocations")
    return record


def _get_lease(txn: Txn, id_bytes: bytes) -> Lease | None:
    data = txn.get("leases", id_bytes)
    return None if data is None else _lease_dec.decode(data)


def decode_lease(data: bytes) -> Lease:
    return _lease_dec.decode(data)


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


def _unindex(txn: Txn, id_bytes: bytes, record: InvocationRecord) -> None:
    txn.delete("status", record.status.value.encode() + b"\x00" + id_bytes)
    txn.delete("listing", _listing.status_key(record, id_bytes))
    if record.wake_at is not None:
        txn.delete("timers", record.wake_at.to_bytes(8, "big") + id_bytes)
    if _runnable.queued(record):
        txn.delete("listing", _runnable.key(record, id_bytes))


def _put_record(txn: Txn, id_bytes: bytes, record: InvocationRecord, old: InvocationRecord | None) -> None:
    if old is not None:
        _unindex(txn, id_bytes, old)
    txn.put("invocations", id_bytes, _enc.encode(record))
    txn.put("status", record.status.value.encode() + b"\x00" + id_bytes, b"")
    txn.put("listing", _listing.status_key(record, id_bytes), b"")
    _listing.moved(txn, id_bytes, record, old)
    if record.wake_at is not None:
        txn.put("timers", record.wake_at.to_bytes(8, "big") + id_bytes, b"")
    if _runnable.queued(record):
        txn.put("listing", _runnable.key(record, id_bytes), b"")


def inbox_prefix(id_bytes: bytes, topic: str) -> bytes:
    return id_bytes + b"\x00" + topic.encode() + b"\x00"


def _arrived(txn: Txn, id_bytes: bytes, name: str) -> bool:
    """Whether what wait `name` waits for is there: a promise's resolution, or a message on
    the topic of a `receive` wait."""
    if name.startswith(MESSAGE_WAIT):
        prefix = inbox_prefix(id_bytes, name[len(MESSAGE_WAIT):])
        return any(True for _ in txn.scan_some("inbox", prefix, prefix, 1))
    return txn.get("promises", id_bytes + b"\x00" + name.encode()) is not None


def _transition(
    txn: Txn, id_bytes: bytes, invocation_id: str, change: Transition, record: InvocationRecord | None = None
) -> InvocationRecord:
    record = record or _require_record(txn, id_bytes, invocation_id)
    old = msgspec.structs.replace(record)
    status = Status(change.status)
    # What arrived while the handler was unwinding to wait must not be lost: a promise
    # already resolved, or a cancel request, leaves the invocation runnable instead.
    names = ([change.waiting] if change.waiting is not None else []) + list(change.waiting_any or ())
    if status == Status.SUSPENDED and (
        record.cancel_requested
        or any(_arrived(txn, id_bytes, name) for name in names)
    ):
        status = Status.PENDING
    if status == Status.SUSPENDED:
        for typed in change.promise_types or ():  # a topic's type stays declared: sends are checked
            if typed.name.startswith(MESSAGE_WAIT):
                txn.put("topics", id_bytes + b"\x00" + typed.name[len(MESSAGE_WAIT):].encode(), _enc.encode(typed))
    record.status = status
    record.updated_at = change.at
    record.waiting = change.waiting
    record.waiting_any = list(change.waiting_any or ())
    record.promise_types = list(change.promise_types or ()) if status == Status.SUSPENDED else []
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
