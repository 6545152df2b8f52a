"""The append rule: the lease fence, and entries inserted, never overwritten.

A step's append passes through this module alone among the rules (`KVStore._apply_append`),
so the path of a live step does not wander between modules.

Every append checks, in its writing transaction, that the lease row still gives the
appender's epoch ownership (`check_lease`). An owner appends under one lease many times,
so the fence remembers, per invocation, the id's bytes and the lease row's bytes that last
passed for an epoch: an unchanged row gives the same verdict without decoding it again. A
backend that can append without a lease read (PostgreSQL's one-statement path) asks
`fenced` for those bytes and lets the database compare them with the row.

One `Fence` per store, written once here for every backend; what it remembers goes when
the lease is given back or lost (`release`).
"""

from __future__ import annotations

from .._ids import validate_id
from .._records import Lease
from ..errors import JournalError, LeaseLost
from ._rules import Txn, _lease_dec, check_lease, entry_key

# Above the invocations one process has in flight (10,000 agents in W5 of `python -m bench`):
# a smaller table, cleared when full, would miss on nearly every append of such a fleet.
# Entries go when their lease is given back or lost; the bound is for what is left behind
# otherwise (a process that stops mid-run), about 0.5 KiB an entry.
OWNED_IDS_KEPT = 1 << 15


class Fence:
    __slots__ = ("_ids", "_verdicts")

    def __init__(self) -> None:
        self._ids: dict[str, bytes] = {}
        self._verdicts: dict[bytes, tuple[int, bytes, Lease]] = {}  # id -> (epoch, lease row, lease)

    def owned_id(self, invocation_id: str) -> bytes:
        """`validate_id` for the append path, remembered: an owner appends under one id many times."""
        try:
            return self._ids[invocation_id]
        except (KeyError, TypeError):
            pass
        id_bytes = validate_id(invocation_id)
        if len(self._ids) >= OWNED_IDS_KEPT:
            self._ids.clear()
        self._ids[invocation_id] = id_bytes
        return id_bytes

    def check(self, txn: Txn, id_bytes: bytes, invocation_id: str, epoch: int) -> Lease:
        """The fencing rule, read in the writing transaction: the lease row must still give
        `epoch` ownership, or `LeaseLost` (and this owner's memory of the id goes)."""
        row = txn.lease_row(id_bytes)
        seen = self._verdicts.get(id_bytes)
        if seen is not None and seen[0] == epoch and seen[1] == row:
            return seen[2]  # unchanged lease bytes give the same verdict: decode only what is new
        try:
            lease = check_lease(row, invocation_id, epoch)
        except LeaseLost:  # taken over: this owner appends no more
            self.release(id_bytes, invocation_id)
            raise
        assert row is not None  # check_lease refused a missing row
        self._keep(id_bytes, epoch, bytes(row), lease)
        return lease

    def remember(self, id_bytes: bytes, row: bytes) -> None:
        """A lease row this store just committed (a claim, a renewal), as `check` would keep
        it on the next append: the first step after a claim finds its verdict at once. A
        released lease (no owner) is forgotten instead."""
        lease = _lease_dec.decode(row)
        if lease.owner:
            self._keep(id_bytes, lease.epoch, row, lease)
        else:
            self._verdicts.pop(id_bytes, None)

    def fenced(self, id_bytes: bytes, epoch: int) -> bytes | None:
        """The lease row that last gave `epoch` ownership of `id_bytes`, if remembered."""
        seen = self._verdicts.get(id_bytes)
        return seen[1] if seen is not None and seen[0] == epoch else None

    def release(self, id_bytes: bytes, invocation_id: str) -> None:
        """The invocation's lease was given back or lost: forget its owner's id and verdict."""
        self._ids.pop(invocation_id, None)
        self._verdicts.pop(id_bytes, None)

    def clear(self) -> None:
        self._ids.clear()
        self._verdicts.clear()

    def remembered(self) -> set[str]:
        """The invocations it remembers anything of (its own tests read it)."""
        return set(self._ids) | {id_bytes.decode() for id_bytes in self._verdicts}

    def _keep(self, id_bytes: bytes, epoch: int, row: bytes, lease: Lease) -> None:
        if len(self._verdicts) >= OWNED_IDS_KEPT:  # (entries go at `release`)
            self._verdicts.clear()
        self._verdicts[id_bytes] = (epoch, row, lease)


def insert_entries(txn: Txn, id_bytes: bytes, invocation_id: str, entries: list[tuple[int, bytes]]) -> None:
    """Insert entries, never overwrite one: all of them, or none and the error.

    An entry already there with the same bytes counts as inserted. The caller checked the
    lease epoch in this transaction, so it is this owner's own, written by an attempt
    whose answer was lost with its connection (a networked store does the attempt again:
    see "Faults of a networked store" in the design): nobody else appends under the epoch,
    and an entry written before it was in the journal the owner replayed."""
    if len(entries) == 1:  # a step's append: nothing to take back
        seq, data = entries[0]
        key = id_bytes + b"\x00" + seq.to_bytes(4, "big")
        if not txn.insert("entries", key, data) and not _same(txn.get("entries", key), data):
            raise already_journaled(invocation_id, seq)
        return
    written: list[bytes] = []
    for seq, data in entries:
        key = entry_key(id_bytes, seq)
        if not txn.insert("entries", key, data):
            if _same(txn.get("entries", key), data):
                continue
            for key in written:  # the batch's other operations still commit: leave no part of this one
                txn.delete("entries", key)
            raise already_journaled(invocation_id, seq)
        written.append(key)


def _same(stored: bytes | None, data: bytes) -> bool:
    return stored is not None and bytes(stored) == bytes(data)


def landed(txn: Txn, id_bytes: bytes, epoch: int, entries: list[tuple[int, bytes]]) -> bool:
    """Whether an append of `entries` under `epoch`, refused now because the lease was given
    back, is the very write that gave it back: the lease was released at that epoch (only
    its owner does that, with its last write) and every entry is there, byte for byte. So
    an owner doing its final write again, after the first try's answer was lost, finds it
    done instead of `LeaseLost`."""
    data = txn.get("leases", id_bytes)
    lease = None if data is None else _lease_dec.decode(data)
    if lease is None or lease.owner or lease.epoch != epoch:
        return False
    return all(_same(txn.get("entries", entry_key(id_bytes, seq)), raw) for seq, raw in entries)


def already_journaled(invocation_id: str, seq: int) -> JournalError:
    return JournalError(
        f"invocation {invocation_id!r} seq {seq} is already journaled; entries are append-only "
        "(this means two owners wrote to one invocation: report it as a bug)"
    )
