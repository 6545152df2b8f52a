"""Keeping a store healthy: trim finished journals, check integrity, export, and, through
each store's backend (`journal.backends`), compact it and convert its format."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Iterator

import msgspec

from ._codec import decode_entry
from ._entries import TERMINAL_KINDS, Entry, Started
from ._listing import Damaged, Query
from ._records import FINISHED, InvocationRecord, Status
from ._store import Store
from .backends import Migration, Progress, backend_for
from .errors import CorruptEntry, StoreError


class Problem(msgspec.Struct):
    """One thing `check` found wrong."""

    invocation_id: str | None
    seq: int | None
    message: str

    def __str__(self) -> str:
        where = "store" if self.invocation_id is None else f"invocation {self.invocation_id!r}"
        if self.seq is not None:
            where += f" seq {self.seq}"
        return f"{where}: {self.message}"


def trim(
    store: Store,
    *,
    older_than_s: float | None = None,
    statuses: Iterable[Status | str] | None = None,
    keep_record: bool = False,
    dry_run: bool = False,
    now_us: int | None = None,
) -> list[InvocationRecord]:
    """Remove the journals of finished invocations last updated more than `older_than_s` ago.

    Only finished statuses (completed, failed, cancelled) can be trimmed; `statuses` narrows
    that. With `keep_record` the invocation's record (status and result) stays. Returns what
    was (or, with `dry_run`, would be) removed.
    """
    wanted = {Status(s) for s in statuses} if statuses else set(FINISHED)
    unfinished = wanted - FINISHED
    if unfinished:
        raise ValueError(
            f"only finished invocations can be trimmed, not {', '.join(sorted(s.value for s in unfinished))}; "
            "cancel them first (`journal cancel ID`)"
        )
    now = now_us if now_us is not None else time.time_ns() // 1000
    cutoff = now - int((older_than_s or 0) * 1e6)
    chosen = [r for s in sorted(wanted) for r in store.list(s) if r.updated_at <= cutoff and not _still_needed(store, r)]
    if not dry_run:
        for start in range(0, len(chosen), 256):  # short write transactions: other writers keep going
            store.delete([r.id for r in chosen[start:start + 256]], keep_record=keep_record)
    return chosen


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_retention(text: str) -> dict[Status, float]:
    """`completed=7d,failed=30d,cancelled=7d` as seconds by status (units s, m, h, d, w);
    ValueError saying what is wrong otherwise. Only finished statuses may be given."""
    out: dict[Status, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, age = part.partition("=")
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", age.strip())
        if not sep or match is None:
            raise ValueError(f"{part!r} is not STATUS=AGE (for example completed=7d,failed=30d; units s m h d w)")
        try:
            status = Status(name.strip())
        except ValueError:
            raise ValueError(f"{name.strip()!r} is not a status; retention applies to completed, failed and "
                             "cancelled invocations") from None
        if status not in FINISHED:
            raise ValueError(f"{status.value} invocations are not finished: only completed, failed and cancelled "
                             "ones are trimmed")
        out[status] = float(match.group(1)) * _UNITS[match.group(2)]
    if not out:
        raise ValueError("no retention given: write STATUS=AGE, for example completed=7d,failed=30d,cancelled=7d")
    return out


def trim_due(store: Store, retention: dict[Status, float], *, now_us: int | None = None,
             limit: int = 64) -> list[str]:
    """Trim up to `limit` finished invocations that `retention` says are due (last updated
    longer ago than their status's age), in one short transaction, by `trim`'s rules (one
    an unfinished invocation still links to stays). Returns the ids trimmed: none once
    nothing more is due. Reads only invocations created before the cutoff, by the
    listing index: a store's recent work is not read at all."""
    now = now_us if now_us is not None else time.time_ns() // 1000
    chosen: list[str] = []
    for status, age in sorted(retention.items()):
        cutoff = now - int(age * 1e6)
        query = Query(statuses=(status,), until=cutoff + 1, limit=limit)
        while len(chosen) < limit:
            page = store.page(query)
            chosen += [r.id for r in page.items if isinstance(r, InvocationRecord) and r.updated_at <= cutoff
                       and not _still_needed(store, r)][:limit - len(chosen)]
            if page.next is None:
                break
            query = msgspec.structs.replace(query, after=page.next)
    if chosen:
        store.delete(chosen)
    return chosen


def _still_needed(store: Store, record: InvocationRecord) -> bool:
    """A finished invocation that an unfinished one still links to: its parent is running
    (and may look the child up again), or it is an early generation of a chain still going."""
    if record.parent is not None:
        parent = store.get(record.parent)
        if parent is not None and not parent.finished:
            return True
    nxt: InvocationRecord | None = record
    while nxt is not None and nxt.continued_as is not None:
        nxt = store.get(nxt.continued_as)
    return nxt is not None and nxt is not record and not nxt.finished


def compact(store: Store, *, force: bool = False) -> tuple[int, int]:
    """Give the space of trimmed journals back to the file system; returns (bytes before,
    bytes after). LMDB rewrites its file without free pages, swapped in atomically (the
    store must be open nowhere else); a backend that reclaims space by itself raises
    `journal.backends.NothingToCompact`, whose message says how."""
    if store.path is None:
        raise StoreError(f"{store!r} has no file to compact")
    return backend_for(store.path).compact(store, force=force)


def migrate(target: str | os.PathLike[str], *, progress: Progress | None = None,
            lock_timeout: float = 10.0) -> Migration:
    """Convert the store at `target` (an LMDB directory or a `postgresql://` URL) to the
    format this release writes, in one transaction; nothing is changed if it is already
    there. A store of a newer or unknown format is refused with `FormatVersionError`.
    `lock_timeout`: seconds to wait for the tables while another process (a worker of the
    older release) uses them, before giving up with `StoreBusy`, nothing changed."""
    target = os.fspath(target)
    return backend_for(target).migrate(target, progress=progress, lock_timeout=lock_timeout)


def check(store: Store) -> list[Problem]:
    """Decode every record and entry; verify start and terminal entries and the indexes.
    A record that does not decode is reported with its id, and the others are checked."""
    problems: list[Problem] = []
    records: list[InvocationRecord] = []
    for item in _every(store, Query(limit=1000)):
        if isinstance(item, Damaged):
            problems.append(Problem(item.id, None, item.error))
        else:
            records.append(item)
    indexed = {s: {item.id for item in _every(store, Query(statuses=(s,), limit=1000))} for s in Status}
    for record in records:
        problems += _check_one(store, record, indexed)
    return problems


def _every(store: Store, query: Query) -> Iterator[InvocationRecord | Damaged]:
    """Every item of `store.page(query)`, page after page."""
    while True:
        found = store.page(query)
        yield from found.items
        if found.next is None:
            return
        query = msgspec.structs.replace(query, after=found.next)


def _check_one(store: Store, record: InvocationRecord, indexed: dict[Status, set[str]]) -> list[Problem]:
    out: list[Problem] = []
    rid = record.id
    if rid not in indexed[record.status]:
        out.append(Problem(rid, None, f"status index does not list it as {record.status}"))
    for status, ids in indexed.items():
        if status != record.status and rid in ids:
            out.append(Problem(rid, None, f"status index lists it as {status} but its record says {record.status}"))
    decoded: dict[int, Entry] = {}
    corrupt: set[int] = set()
    for seq, data in store.entries(rid):
        try:
            decoded[seq] = decode_entry(data, invocation_id=rid, seq=seq)
        except CorruptEntry as exc:
            corrupt.add(seq)
            reason = re.search(r"does not decode \((.*)\); run", str(exc))
            out.append(Problem(rid, seq, f"entry does not decode: {reason.group(1) if reason else exc}"))
    if not decoded and record.finished:
        return out  # trimmed with its record kept
    if 0 not in corrupt and (0 not in decoded or not isinstance(decoded[0], Started)):
        out.append(Problem(rid, 0, "the start entry is missing"))
    terminal = [s for s, e in decoded.items() if isinstance(e, TERMINAL_KINDS)]
    if record.finished and not terminal:
        out.append(Problem(rid, None, f"status is {record.status} but no terminal entry was journaled"))
    if terminal:
        last = max(decoded)
        if len(terminal) > 1 or terminal[0] != last:
            out.append(Problem(rid, terminal[0], "a terminal entry is not the last entry"))
        if not record.finished:
            out.append(Problem(rid, terminal[0], f"a terminal entry exists but the status is {record.status}"))
    # Seq gaps are not problems: a seq is taken when an operation is called, and one that
    # ends before journaling anything (a step cancelled by a failing sibling, an event that
    # cannot be encoded) leaves its seq unused in a perfectly legal journal.
    return out


__all__ = ("Problem", "check", "compact", "migrate", "parse_retention", "trim", "trim_due")
