"""Limits on LMDB: an environment of its own in `limits/` inside the store directory.

Acquiring and releasing a unit are write transactions there, never synced and never behind the
journal's writer lock, so a step under a limit pays no fsync and does not wait for a group
commit. A crash may lose the last of them, which is harmless: the units the crashed processes
held go back anyway (their pids are gone). Rule changes are synced before `set` returns.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

import lmdb

from ...errors import StoreError
from ...kv._rules import Txn
from ...limits import LIMIT_TABLES, LimitTable
from ._files import check_files
from ._subdbs import open_db
from ._txn import LmdbTxn, Reading

T = TypeVar("T")

# The file is as large as the map (sparse: only what is written takes room on disk), since
# the map is written in place: a commit is a few stores to memory instead of a write(2) per
# page, a tenth of its cost (an uncontended acquire and release went from about 150 us to 90).
# Unsynced either way: a crash of the host may forget the last units, which the crash frees.
_MAP_SIZE = 64 << 20

# LMDB allows one open of an environment per process: the stores on one path share it.
_envs: dict[str, tuple[lmdb.Environment, dict[str, object], int]] = {}
_envs_lock = threading.Lock()


def _open(path: str) -> tuple[lmdb.Environment, dict[str, object]]:
    with _envs_lock:
        if path in _envs:
            env, dbs, count = _envs[path]
            _envs[path] = (env, dbs, count + 1)
            return env, dbs
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        if os.path.islink(path) or not os.path.isdir(path):
            raise OSError(f"{path} is not a directory")
        check_files(path, create=True)
        env = lmdb.open(path, map_size=_MAP_SIZE, max_dbs=len(LIMIT_TABLES), sync=False, metasync=False,
                        writemap=True, map_async=True, readahead=False, mode=0o600, max_readers=510)
        opened: dict[str, object] = {name: open_db(env, name.encode()) for name in LIMIT_TABLES}
        _envs[path] = (env, opened, 1)
        return env, opened


def _release(path: str) -> None:
    with _envs_lock:
        env, dbs, count = _envs[path]
        if count > 1:
            _envs[path] = (env, dbs, count - 1)
        else:
            del _envs[path]
            env.close()


class LmdbLimits(LimitTable):
    """`LimitTable` of an LMDB store at `store_path`."""

    def __init__(self, store_path: str) -> None:
        self._path = os.path.join(store_path, "limits")
        try:
            self._env, self._dbs = _open(self._path)
        except (OSError, lmdb.Error) as exc:
            raise StoreError(f"cannot open the limits of the store at {store_path}: {exc}") from None
        self._closed = False

    def _transact(self, work: Callable[[Txn], T], *, durable: bool = False) -> T:
        try:
            txn = self._env.begin(write=True)
        except lmdb.MapResizedError:
            self._env.set_mapsize(0)
            txn = self._env.begin(write=True)
        try:
            result = work(LmdbTxn(txn, self._dbs))  # type: ignore[arg-type]
        except BaseException:
            txn.abort()
            raise
        txn.commit()
        if durable:
            self._env.sync(True)
        return result

    def _read(self, work: Callable[[Txn], T]) -> T:
        with Reading(self._env, self._dbs) as txn:  # type: ignore[arg-type]
            return work(txn)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._path)
