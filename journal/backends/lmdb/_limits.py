"""Limits on LMDB: an environment of its own in `limits/` inside the store directory.

Acquiring and releasing a unit are write transactions there, never synced and never behind the
journal's writer lock, so a step under a limit pays no fsync and does not wait for a group
commit. A crash may lose the last of them, which is harmless: the units the crashed processes
held go back anyway (their pids are gone). Rule changes are synced before `set` returns.

A step on an uncontended limit goes on this process's share of it (`journal/limits/_shares.py`):
one write transaction takes a unit and a block of rate units for the next steps, each of which
then only reads the state rows of its names (a read transaction, no write) to see that nobody
waits and the concurrency is still at most half taken. The table's thread (`_shares.py`) gives
back a share idle at the end of its life, whether or not the event loop that took it still runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import lmdb
import msgspec

from ...errors import StoreError
from ...kv._rules import Txn
from ...limits import LIMIT_TABLES, Blocked, Granted, Request, _logic, _shares
from ...limits._shares import Share, SharingTable, give_back
from ...limits._table import now_us
from ._files import check_files
from ._subdbs import open_db
from ._txn import LmdbTxn, Reading

T = TypeVar("T")
_GRANTED = Granted()
_log = logging.getLogger("journal.limits")
# Seconds a share serves new steps here: about 45 steps of W1 `sync`, and an idle share goes
# back sooner for a waiter in another process (who asks again every 20 ms) than PostgreSQL's 50 ms.
_SHARE_LIFE = 0.01
# Rate units a share takes at most here (PostgreSQL's 16, where the call is a round trip, would
# make a write transaction of the share every 16 steps; the units it did not use go back).
_SHARE_UNITS = 64

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


class LmdbLimits(SharingTable):
    """`LimitTable` of an LMDB store at `store_path`."""

    def __init__(self, store_path: str) -> None:
        super().__init__()
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

    # -- shares (`journal/limits/_shares.py`) ---------------------------------------------------

    def acquire(self, request: Request) -> Granted | Blocked:
        if self._shares and self._use_share(request):
            return _GRANTED
        known = self._rules()
        key = (request.names, request.owner)
        rules = self._known  # (the rules a share would be taken under)
        units = _logic.share_units(known, request.names, _SHARE_UNITS) \
            if key not in self._shares and self._may_share(request) and rules is not None and rules[1] is known \
            and not self._closed else 0
        if units == 0 or rules is None:
            return super().acquire(request)
        share_request = msgspec.structs.replace(request, hid=request.hid + _shares.SUFFIX)
        life = _SHARE_LIFE
        until = time.monotonic() + life  # (before `now`: the share ends before its window's count does)
        now = now_us()
        alive = self._alive()
        seen: dict[tuple[str, bytes], bytes | None] = {}

        def work(txn: Txn) -> Granted | Blocked | tuple[tuple[str, bytes], ...]:
            counted = _logic.acquire_share(txn, share_request, now, now + int(life * 1e6), units, known)
            if counted is None:
                return _logic.acquire(txn, request, now, alive, known)
            for name in request.names:
                seen["limit_state", name.encode()] = txn.get("limit_state", name.encode())
            return tuple(counted)

        answer = self._transact(work)
        if isinstance(answer, tuple):
            self._new_share(share_request, request.hid, units, until, answer, rules, seen)
            return _GRANTED
        return answer

    def release(self, hid: str, names: tuple[str, ...], used_tokens: int | None = None, *,
                claim: int | None = None) -> None:
        if self._users:
            share = self._share_of(hid, used_tokens)
            if share is not None:  # a step's hold on a share: the share is free for the next step
                if share.ended or share.left == 0 or time.monotonic() >= share.until:
                    self._end_share(share)
                return
        super().release(hid, names, used_tokens, claim=claim)

    def _share_usable(self, share: Share) -> bool:
        # One read transaction: the state rows of its names as they are now (under a microsecond).
        try:
            txn = self._env.begin()
        except lmdb.MapResizedError:
            return False
        try:
            db = self._dbs["limit_state"]
            rows = {row: txn.get(row[1], db=db) for row in share.seen}  # type: ignore[call-overload]
        finally:
            txn.abort()
        return share.usable(self._known, rows)

    def _return_share(self, share: Share, awaited: bool) -> None:
        now = now_us()
        self._transact(lambda txn: give_back(txn, share, now))

    async def settle(self) -> None:
        self._end_shares()

    def close(self) -> None:
        if not self._closed:
            self._close_shares()
            self._closed = True
            self._stop_reaper()  # (it may be giving a share back: the environment stays open until it has)
            _release(self._path)
