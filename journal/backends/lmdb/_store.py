"""The embedded default store: one LMDB environment in a private directory.

Write transactions commit without fsync (the environment is opened with sync off) and
durability comes from an explicit `sync()` afterwards. That keeps LMDB's single writer
lock held for microseconds, never for the length of a disk flush, so one fsync can
cover the commits of many invocations and many processes (group commit).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import lmdb

from ..._codec import DEFAULT_MAX_ENTRY_BYTES
from ..._store import Capability
from ...errors import DiskFull, FormatVersionError, StoreError
from ...kv import TABLES, KVStore, Txn
from ...kv._listing import BUILT as LISTING_BUILT
from ...kv._runnable import BUILT as RUNNABLE_BUILT
from ._ahead import RoomAhead
from ._files import check_files, hold_open_lock, make_store_dir, release_exclusive, take_exclusive
from ._subdbs import open_db
from ._tables import LmdbTables
from ._txn import LmdbTxn, Reading, Writing, committed

if TYPE_CHECKING:
    from lmdb import _Database as _Db  # what open_db returns: the stubs' name for a database handle

    from ._limits import LmdbLimits
    from ._live import LmdbChannel
    from ._wake import LmdbWorkBell, WorkBells

T = TypeVar("T")

FORMAT_VERSION = 1
_INITIAL_MAP_SIZE = 64 * 1024 * 1024
_MAX_MAP_SIZE = 1 << 40
# W5 (10,000 agents of 5 steps, `python -m bench --only W5`), peak RSS per invocation in
# flight and the file's size, by the most operations one transaction takes: unbounded
# 25.8 KiB, 116 MB; 1,024: 20.3 KiB, 57 MB; 128: 18.9 KiB, 47 MB; 64: 18.7 KiB, 46 MB.
OPS_PER_TRANSACTION = 128
_SYNC_AGAIN_AFTER = 0.001  # seconds before a refused sync is tried once more (`_fsync`)

def default_path() -> str:
    """The store directory when none is named: $JOURNAL_DB, else ./.journal."""
    return os.environ.get("JOURNAL_DB") or os.path.join(os.getcwd(), ".journal")


# LMDB forbids opening one environment twice in a process; stores on one path share it.
_shared: dict[str, tuple[lmdb.Environment, dict[str, _Db], int, int | None]] = {}
_shared_lock = threading.Lock()


class LmdbStore(LmdbTables, KVStore):
    """A journal store in the directory `path` (created private to its owner)."""

    path: str
    capabilities = frozenset({Capability.CANCEL_COUNTER, Capability.LEASE_AT_CREATE, Capability.TABLES,
                              Capability.WORK_BELL})
    # A write transaction holds every page it changes in memory until it commits, and LMDB
    # reuses the pages a commit frees only two commits later: one transaction for a group
    # commit of thousands of appends (10,000 agents in flight) made the process hold a copy
    # of most of the tree and the file grow to 2.6 times its data.
    ops_per_transaction = OPS_PER_TRANSACTION

    def __init__(self, path: str | os.PathLike[str], *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
                 readonly: bool = False, map_size: int = _INITIAL_MAP_SIZE) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.max_entry_bytes = max_entry_bytes
        self.readonly = readonly
        self._closed = False
        self._sync_thread: threading.Thread | None = None
        self._sync_stop = threading.Event()
        self._dirty = threading.Event()
        self._flush_error: StoreError | None = None  # a background flush failed: the next write says so
        self._ahead = RoomAhead(self.path)
        self._env, self._dbs = _open_shared(self.path, readonly, map_size)
        self._leases, self._entries = self._dbs["leases"], self._dbs["entries"]
        self._live: LmdbChannel | None = None
        self._bells: WorkBells | None = None
        self._live_lock = threading.Lock()
        self._limits: LmdbLimits | None = None
        try:
            self._check_format()
        except BaseException:
            _release_shared(self.path)
            raise

    def __repr__(self) -> str:
        return f"LmdbStore({self.path!r})"

    @property
    def env(self) -> lmdb.Environment:
        return self._env

    def _check_format(self) -> None:
        with self._read() as txn:
            found = txn.get("meta", b"format")
        if found is None:
            if self.readonly:
                return
            def mark_new(txn: Txn) -> None:
                txn.put("meta", b"format", str(FORMAT_VERSION).encode())
                txn.put("meta", LISTING_BUILT, b"1")  # nothing to index yet: complete from the start
                txn.put("meta", RUNNABLE_BUILT, b"1")  # (the run queue too)

            self._transact(mark_new)
            self.sync()
        elif found != str(FORMAT_VERSION).encode():
            raise FormatVersionError(
                f"the LMDB store at {self.path} has format version {found.decode(errors='replace')}, but this "
                f"version of journal reads LMDB format {FORMAT_VERSION}; open it with the journal release that "
                "wrote it (nothing was changed)"
            )
        elif not self.readonly:
            self._ensure_listing()  # a store written before the listing index: indexed once, here
            self._ensure_ready()  # ... and before the run queue, not in a worker's first look

    def _read(self) -> Reading:
        return Reading(self._env, self._dbs)

    def _write_once(self) -> Writing | None:
        """`KVStore._write_once`: a step's append on LMDB, in a transaction of its own."""
        if self.readonly or self._flush_error is not None:
            return None  # the generic path says why it cannot write
        return Writing(self._env, self._dbs, self._dirty, self._ring, self._ahead)

    def _transact(self, work: Callable[[Txn], T]) -> T:
        if self.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only")
        if self._flush_error is not None:
            # `async` durability promised a flush within 100 ms and could not keep it.
            raise self._flush_error
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    writing = LmdbTxn(txn, self._dbs)
                    result = work(writing)
                committed(writing.runnable, self._dirty, self._ring, self._ahead, self._env)
                return result
            except lmdb.MapResizedError:
                self._env.set_mapsize(0)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.Error as exc:
                raise _translate(exc, self.path) from None

    def _grow(self) -> None:
        size = self._env.info()["map_size"]
        if size >= _MAX_MAP_SIZE:
            raise StoreError(f"the store at {self.path} reached the largest map size ({size:,} bytes)")
        self._env.set_mapsize(min(size * 2, _MAX_MAP_SIZE))

    def sync(self) -> None:
        # Cleared first, as the flusher does: this sync covers every commit made before it,
        # so the background flush skips its own fsync unless something commits meanwhile.
        if self._dirty.is_set():
            self._dirty.clear()
        try:
            self._fsync()
        except lmdb.Error as exc:
            self._dirty.set()
            raise _translate(exc, self.path) from None

    def _fsync(self) -> None:
        try:
            self._env.sync(True)
        except lmdb.Error:
            # LMDB refuses a sync (EINVAL) while another thread of this process resizes the
            # map, after another process grew it: a moment later it goes through. A real
            # failure (a disk error) fails again and is raised.
            time.sleep(_SYNC_AGAIN_AFTER)
            self._env.sync(True)

    def start_background_sync(self, interval: float = 0.1) -> None:
        """Flush committed transactions to disk every `interval` seconds (`async` durability)."""
        if self._sync_thread is not None:
            return

        def loop() -> None:
            while not self._sync_stop.wait(interval):
                if self._dirty.is_set():
                    self._dirty.clear()
                    try:
                        self._fsync()
                        self._flush_error = None
                    except lmdb.Error as exc:
                        self._dirty.set()
                        self._flush_error = _translate(exc, self.path)

        self._sync_thread = threading.Thread(target=loop, name="journal-fsync", daemon=True)
        self._sync_thread.start()

    def copy_to(self, path: str | os.PathLike[str]) -> None:
        """A consistent, compacting copy of the store in directory `path` (created; must be empty).

        Safe while other processes write: the copy is one read transaction's snapshot. This
        is how to back a store up.
        """
        path = os.fspath(path)
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.listdir(path):
            raise StoreError(f"cannot copy the store into {path}: the directory is not empty")
        try:
            self._env.copy(path, compact=True)
        except lmdb.Error as exc:
            raise _translate(exc, path) from None

    def reopen_after_swap(self) -> None:
        """Map the data file that compaction just put in place (the caller holds the store alone).

        Closing first matters beyond this process: LMDB resets its lock file (which records
        the last transaction id, and so which meta page readers use) only when an opener
        finds nobody else has the environment open. A process that opened the new file while
        this one still had the old one open would read the wrong meta page and could write
        over the compacted data."""
        with _shared_lock:
            env, dbs, count, lock_fd = _shared[self.path]
            map_size = env.info()["map_size"]
            env.close()
            env, dbs = _open_env(self.path, self.readonly, map_size)
            _shared[self.path] = (env, dbs, count, lock_fd)
        self._env, self._dbs = env, dbs
        self._leases, self._entries = dbs["leases"], dbs["entries"]
        self._fence.clear()
        self._ahead.forget()

    def _ring(self) -> None:
        """Wake the workers waiting on this store, in any process (`_wake.py`): an invocation
        became pending in the transaction just committed."""
        self._work_bells().ring()

    def _work_bells(self) -> WorkBells:
        with self._live_lock:
            if self._bells is None:
                from ._wake import WorkBells

                self._bells = WorkBells(self.path)
            return self._bells

    def work_bell(self) -> LmdbWorkBell | None:
        """`Store.work_bell` (`Capability.WORK_BELL`)."""
        if self.readonly:
            return None
        return self._work_bells().bell()

    def live(self) -> LmdbChannel:
        with self._live_lock:
            if self._live is None:
                from ._live import LmdbChannel  # (a store that never streams imports nothing of it)

                self._live = LmdbChannel(self.path)
            return self._live

    def limits(self) -> LmdbLimits:
        with self._live_lock:
            if self._limits is None:
                from ._limits import LmdbLimits  # (a store that limits nothing imports nothing of it)

                self._limits = LmdbLimits(self.path)
            return self._limits

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.close()
        if self._limits is not None:
            self._limits.close()
        if self._bells is not None:
            self._bells.close()
        if self._sync_thread is not None:
            self._sync_stop.set()
            self._sync_thread.join()
        if not self.readonly:
            try:
                self._env.sync(True)
            except lmdb.Error:
                pass
        _release_shared(self.path)

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _translate(exc: lmdb.Error, path: str) -> StoreError:
    text = str(exc)
    # LMDB reports a failed page write as EIO on some filesystems; a nearly full disk says why.
    if isinstance(exc, lmdb.DiskError) or "No space left" in text or ("Input/output" in text and _nearly_full(path)):
        return DiskFull(
            errno.ENOSPC,
            f"the disk holding {path} is full; everything committed before this is intact. Free some space "
            "(`journal trim` then `journal compact` drop the journals of finished invocations) and try again",
        )
    return StoreError(f"LMDB error in {path}: {text}")


def _nearly_full(path: str) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 8 * 1024 * 1024


def _open_shared(path: str, readonly: bool, map_size: int) -> tuple[lmdb.Environment, dict[str, _Db]]:
    with _shared_lock:
        if path in _shared:
            env, dbs, count, lock_fd = _shared[path]
            _shared[path] = (env, dbs, count + 1, lock_fd)
            return env, dbs
        if not readonly:
            make_store_dir(path)
        elif not os.path.isdir(path):
            raise StoreError(f"there is no journal store at {path}")
        lock_fd = hold_open_lock(path, create=not readonly)
        try:
            env, dbs = _open_env(path, readonly, map_size)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        _shared[path] = (env, dbs, 1, lock_fd)
        return env, dbs


def _open_env(path: str, readonly: bool, map_size: int) -> tuple[lmdb.Environment, dict[str, _Db]]:
    # Checked under the open lock: no compaction swaps the files between the check and the map.
    check_files(path, create=not readonly)
    # A reader opens the environment as a writer would, so that a writer in this process can
    # share it (`_shared`), except on a read-only mount: there LMDB cannot write its lock
    # file's reader table, and opened read-only it takes no lock at all (nobody can write
    # the store through this mount).
    env_readonly = readonly and _read_only_mount(path)
    for _attempt in range(100):
        try:
            env = lmdb.open(
                path, map_size=map_size, max_dbs=len(TABLES) + 4, max_readers=510,
                sync=False, metasync=False, readahead=False, mode=0o600, readonly=env_readonly,
            )
            break
        except lmdb.MapResizedError:
            # Opening reads the map size, then begins a transaction; another process grew
            # the map in between. Opening again reads the new size.
            continue
        except lmdb.Error as exc:
            if _read_only_mount(path):
                raise StoreError(
                    f"the journal store at {path} is on a read-only file system, where only reading commands "
                    "work (ls, show, tail, check, export, replay); a command that writes needs the store on a "
                    f"writable mount ({exc})") from None
            raise StoreError(f"cannot open the journal store at {path}: {exc}") from None
    else:
        raise StoreError(f"cannot open the journal store at {path}: other processes keep growing its map")
    while True:
        try:
            dbs = {name: open_db(env, name.encode()) for name in TABLES}
            break
        except lmdb.MapResizedError:  # another process grew the map since we opened it
            env.set_mapsize(0)
        except lmdb.Error as exc:
            env.close()
            raise StoreError(f"cannot open the journal store at {path}: {exc}") from None
    return env, dbs


def _read_only_mount(path: str) -> bool:
    """Whether `path` is on a file system mounted read-only (`mount -o ro`, a read-only bind or volume)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def exclusive(path: str) -> tuple[int, Callable[[], None]]:
    """Hold the store alone (for compaction): returns (other openers in this process, release)."""
    with _shared_lock:
        env, dbs, count, lock_fd = _shared[path]
    take_exclusive(lock_fd, path)
    return count - 1, lambda: release_exclusive(lock_fd)


def _release_shared(path: str) -> None:
    with _shared_lock:
        env, dbs, count, lock_fd = _shared[path]
        if count > 1:
            _shared[path] = (env, dbs, count - 1, lock_fd)
        else:
            del _shared[path]
            env.close()
            if lock_fd is not None:
                os.close(lock_fd)
