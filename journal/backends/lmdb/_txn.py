"""LMDB's transactions as the rules' `Txn`: a write transaction, and a read one that is its
own context manager."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import lmdb

from ...kv import Txn, WriteAgain, prefix_end
from ._ahead import CHECK_EVERY, RoomAhead

if TYPE_CHECKING:
    from lmdb import _Database as _Db  # what open_db returns: the stubs' name for a database handle


class LmdbTxn(Txn):
    __slots__ = ("_txn", "_dbs", "runnable")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, _Db]) -> None:
        self._txn = txn
        self._dbs = dbs
        self.runnable = False  # it made an invocation pending: workers are rung once it commits

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn.get(key, db=self._dbs[table])

    def lease_row(self, id_bytes: bytes) -> bytes | None:
        return self._txn.get(id_bytes, db=self._dbs["leases"])

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[table])
        if table == "status" and key.startswith(b"pending\x00"):
            self.runnable = True

    def insert(self, table: str, key: bytes, value: bytes) -> bool:
        return self._txn.put(key, value, db=self._dbs[table], overwrite=False)

    def delete(self, table: str, key: bytes) -> None:
        self._txn.delete(key, db=self._dbs[table])

    def scan(self, table: str, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(db=self._dbs[table]) as cursor:
            if not cursor.set_range(start if start is not None else prefix):
                return
            for key, value in cursor:
                if not key.startswith(prefix):
                    return
                yield key, value

    def last(self, table: str, prefix: bytes) -> bytes | None:
        with self._txn.cursor(db=self._dbs[table]) as cursor:
            end = prefix_end(prefix)
            if not (cursor.prev() if end is not None and cursor.set_range(end) else cursor.last()):
                return None
            key = cursor.key()
            return key if key.startswith(prefix) else None


class Reading(LmdbTxn):
    """A read transaction that is its own context manager: aborted when the block ends.

    A class, not a `@contextmanager` generator: `get` of one record took 3.4-5.9 µs with
    the generator and 2.4-2.5 µs with this, against 0.75-0.88 µs for LMDB's own begin,
    get and abort (`pytest bench/test_read.py --benchmark-only`, three paired runs)."""

    __slots__ = ()

    def __init__(self, env: lmdb.Environment, dbs: dict[str, _Db]) -> None:
        try:
            txn = env.begin()
        except lmdb.MapResizedError:
            # Another process grew the map: adopt its size and retry.
            env.set_mapsize(0)
            txn = env.begin()
        super().__init__(txn, dbs)

    def __enter__(self) -> Reading:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._txn.abort()


class Writing(LmdbTxn):
    """The write transaction of one append (`KVStore._write_once`): committed when the block
    ends without an error, aborted otherwise. What LMDB wants retried or reports as failed is
    `WriteAgain`: the generic path (`LmdbStore._transact`) does it again and says why."""

    __slots__ = ("_dirty", "_ring", "_env", "_ahead")

    def __init__(self, env: lmdb.Environment, dbs: dict[str, _Db], dirty: threading.Event,
                 ring: Callable[[], None], ahead: RoomAhead) -> None:
        try:
            self._txn = env.begin(write=True)
        except lmdb.Error:
            raise WriteAgain() from None
        self._dbs = dbs
        self._dirty = dirty
        self._ring = ring
        self._env = env
        self._ahead = ahead
        self.runnable = False

    def __enter__(self) -> Writing:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            self._txn.abort()
            if issubclass(kind, lmdb.Error):
                raise WriteAgain() from None
            return
        try:
            self._txn.commit()
        except lmdb.Error:
            raise WriteAgain() from None
        committed(self.runnable, self._dirty, self._ring, self._ahead, self._env)


def committed(runnable: bool, dirty: threading.Event, ring: Callable[[], None], ahead: RoomAhead,
              env: lmdb.Environment) -> None:
    """What follows each write transaction's commit, on the committing thread (`Writing`,
    `LmdbStore._transact`): the flusher told, the workers woken for what became runnable,
    and now and then a look at the room ahead of the data (`_ahead.py`)."""
    # Setting an Event takes its lock; the flusher clears it before it syncs, so a flag seen
    # set here is followed by a sync that covers this commit.
    if not dirty.is_set():
        dirty.set()
    if runnable:
        ring()
    ahead.commits += 1
    if ahead.commits >= CHECK_EVERY:
        ahead.look(env)
