"""The run queue of the key-value stores: the pending invocations that may start now, in
the order workers claim them (highest priority first, then oldest), so that a worker
reads them from an index instead of sorting every pending record.

Its keys live in the `listing` table (no new table, so no new LMDB database or
PostgreSQL DDL), under a first byte no listing dimension uses:
    b"q" NUL (2**63 - priority)(u64 BE) created_at(u64 BE) id -> b""
A pending invocation is in it unless its start is delayed (`wake_at` set: the timer
index holds it until then). `_rules._put_record` keeps it in step with the record; a
store written before the queue existed is indexed once (`build`), marked in `meta`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._records import InvocationRecord, Status

if TYPE_CHECKING:  # `_rules` writes through this module: it is imported there, not here
    from ._rules import Txn

PREFIX = b"q\x00"
BUILT = b"runnable-index"  # in `meta`: the run queue covers every pending record
_MIDDLE = 1 << 63  # priorities are within +-2**31 (`_records.PRIORITY_MIN`, `PRIORITY_MAX`)


def queued(record: InvocationRecord) -> bool:
    return record.status == Status.PENDING and record.wake_at is None


def key(record: InvocationRecord, id_bytes: bytes) -> bytes:
    return place(record.priority, record.created_at, id_bytes)


def place(priority: int, created_at: int, id_bytes: bytes) -> bytes:
    return PREFIX + (_MIDDLE - priority).to_bytes(8, "big") + max(0, created_at).to_bytes(8, "big") + id_bytes


def ids(txn: Txn, limit: int | None = None, after: tuple[int, int, str] | None = None) -> list[str]:
    # After a place: from the first key above it (an id holds no NUL, so none lies between).
    start = PREFIX if after is None else place(after[0], after[1], after[2].encode()) + b"\x00"
    # `scan_some`: a database fetches only the head, not the whole queue to stop early in it.
    found = txn.scan("listing", PREFIX, start) if limit is None else txn.scan_some("listing", PREFIX, start, limit)
    return [k[len(PREFIX) + 16:].decode(errors="replace") for k, _ in found]


def build(txn: Txn) -> None:
    """Queue every pending record (a store written before the run queue existed)."""
    from ._rules import _get_record  # `_rules` imports this module

    for status_key, _ in list(txn.scan("status", Status.PENDING.value.encode() + b"\x00")):
        id_bytes = bytes(status_key[len(Status.PENDING.value) + 1:])
        try:
            record = _get_record(txn, id_bytes)
        except Exception:  # noqa: BLE001 - a damaged record is left out of the queue, reported elsewhere
            continue
        if record is not None and queued(record):
            txn.put("listing", key(record, id_bytes), b"")
    txn.put("meta", BUILT, b"1")
