"""Live output on LMDB: a buffer of the running steps' chunks beside the journal, never synced.

The buffer is an LMDB environment of its own in `live/` inside the store directory, so that
writing chunks never takes the journal's writer lock and no fsync of the journal ever
covers them (LMDB syncs one environment's file at a time, and nothing syncs this one).
Keys are the invocation id, NUL, and a counter that grows in the order chunks were sent
(a process starts it past whatever an earlier execution of the invocation left), so a
follower reads on from the last key it saw. A step's chunks are deleted once it commits;
those an execution left behind when it died go when the next one sends its first chunk.

Followers are woken, not polling: each binds a datagram socket (on Linux in the abstract
namespace, elsewhere a file in `live/`) and records its name under the invocation in the
`followers` table; the sender sends each one a byte after every batch that touched the
invocation. A name whose socket is gone is removed by the next batch.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections import deque

import lmdb

from ..._live import KEEP_AFTER_COMMIT, MAX_STEP_BYTES, Bell, Ended, LiveFollower, Sender, Sent, pack, unpack
from ._files import check_files
from ._subdbs import open_db

_MAP_SIZE = 1 << 30  # address space only: the file holds what running steps have sent
ABSTRACT = sys.platform.startswith("linux")

# LMDB allows one open of an environment per process: the stores on one path share it.
_envs: dict[str, tuple[lmdb.Environment, int]] = {}
_envs_lock = threading.Lock()


def open_env(path: str) -> lmdb.Environment:
    with _envs_lock:
        if path in _envs:
            env, count = _envs[path]
            _envs[path] = (env, count + 1)
            return env
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        if os.path.islink(path) or not os.path.isdir(path):
            raise OSError(f"{path} is not a directory")
        check_files(path, create=True)
        env = lmdb.open(path, map_size=_MAP_SIZE, max_dbs=3, sync=False, metasync=False, readahead=False,
                        mode=0o600, max_readers=510)
        _envs[path] = (env, 1)
        return env


def release_env(path: str) -> None:
    with _envs_lock:
        env, count = _envs[path]
        if count > 1:
            _envs[path] = (env, count - 1)
        else:
            del _envs[path]
            env.close()


class LmdbChannel:
    """`LiveChannel` of an LMDB store at `store_path`."""

    def __init__(self, store_path: str) -> None:
        self._path = os.path.join(store_path, "live")
        self._env: lmdb.Environment | None = None
        self._open_lock = threading.Lock()
        self._sender = Sender(self._write, "journal-live", self._due)
        self._ended: deque[tuple[float, str, int]] = deque()  # (when, invocation id, seq) of steps to forget
        # What this process keeps for its running steps, by (invocation id, seq): keys and sizes.
        self._kept: dict[tuple[str, int], deque[tuple[bytes, int]]] = {}
        self._kept_bytes: dict[tuple[str, int], int] = {}
        self._counters: dict[str, int] = {}  # invocation id -> the next key's counter
        self._stale: list[bytes] = []
        self._closing = False  # follower registrations whose socket is gone
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)

    def _opened(self) -> tuple[lmdb.Environment, lmdb._Database, lmdb._Database]:
        with self._open_lock:
            if self._env is None:
                self._env = open_env(self._path)
                self._chunks = open_db(self._env, b"chunks")
                self._followers = open_db(self._env, b"followers")
            return self._env, self._chunks, self._followers

    # -- sending -----------------------------------------------------------------------------

    def publish(self, chunk: Sent) -> None:
        self._sender.put(chunk)

    def flush(self) -> None:
        self._sender.flush()

    def end_step(self, invocation_id: str, seq: int) -> None:
        self._sender.put(Ended(invocation_id, seq))

    def _write(self, batch: list[Sent | Ended]) -> None:
        env, chunks, followers = self._opened()
        touched: set[bytes] = set()
        bells: list[bytes] = []
        with env.begin(write=True) as txn:
            for name in self._stale:
                txn.delete(name, db=followers)
            self._stale = []
            now = time.monotonic()
            if self._closing:  # and what this process's running steps sent: they run here no more
                now += KEEP_AFTER_COMMIT
                self._ended.extend((now, i, seq) for i, seq in self._kept)
            while self._ended and self._ended[0][0] <= now:  # committed a while ago: its output goes
                _, invocation_id, seq = self._ended.popleft()
                for key, _ in self._kept.pop((invocation_id, seq), ()):
                    txn.delete(key, db=chunks)
                self._kept_bytes.pop((invocation_id, seq), None)
                if not any(k[0] == invocation_id for k in self._kept):
                    self._counters.pop(invocation_id, None)
            for item in batch:
                invocation_id = item.invocation_id
                if isinstance(item, Ended):  # the step committed: its output goes once followers have had it
                    self._ended.append((now + KEEP_AFTER_COMMIT, invocation_id, item.seq))
                    continue
                id_bytes = invocation_id.encode()
                counter = self._counters.get(invocation_id)
                if counter is None:
                    counter = self._begin(txn, chunks, id_bytes)
                self._counters[invocation_id] = counter + 1
                key = id_bytes + b"\x00" + counter.to_bytes(8, "big")
                value = pack(item)
                txn.put(key, value, db=chunks)
                stream = (invocation_id, item.seq)
                kept = self._kept.setdefault(stream, deque())
                kept.append((key, len(value)))
                size = self._kept_bytes.get(stream, 0) + len(value)
                while size > MAX_STEP_BYTES and len(kept) > 1:  # a follower this far behind loses the oldest
                    old, old_size = kept.popleft()
                    txn.delete(old, db=chunks)
                    size -= old_size
                self._kept_bytes[stream] = size
                touched.add(id_bytes)
            for id_bytes in touched:
                prefix = id_bytes + b"\x00"
                with txn.cursor(db=followers) as cursor:
                    if cursor.set_range(prefix):
                        for registered in cursor.iternext(values=False):
                            if not registered.startswith(prefix):
                                break
                            bells.append(registered)
        for registered in bells:
            address = registered[registered.index(b"\x00") + 1:]
            try:
                self._out.sendto(b"\x01", address if ABSTRACT and address[:1] == b"\x00" else address.decode())
            except (BlockingIOError, InterruptedError):
                pass  # its queue is full: it has a wake-up waiting already
            except OSError:  # gone (the follower died without saying so)
                self._stale.append(registered)

    def _due(self) -> float | None:
        return max(self._ended[0][0] - time.monotonic(), 0.0) if self._ended else None

    def _begin(self, txn: lmdb.Transaction[bytes], chunks: lmdb._Database, id_bytes: bytes) -> int:
        """The first chunk this process sends for the invocation: remove what a dead execution
        left, and start the counter past its keys, so followers reading on from them see ours."""
        prefix = id_bytes + b"\x00"
        last = 0
        with txn.cursor(db=chunks) as cursor:
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):
                    last = int.from_bytes(cursor.key()[len(prefix):], "big")
                    if not cursor.delete():
                        break
        return max(last + 1, time.time_ns())

    # -- following ---------------------------------------------------------------------------

    def follow(self, invocation_id: str) -> LiveFollower:
        try:
            self._opened()
        except (OSError, lmdb.Error):
            return _Silent()  # a store this process cannot write (read-only): no live output
        return _LmdbFollower(self, invocation_id)

    def close(self) -> None:
        self._closing = True  # what committed steps left goes now, not in a few seconds
        self._sender.flush(True)
        self._sender.close()
        self._out.close()
        with self._open_lock:
            if self._env is not None:
                self._env = None
                release_env(self._path)


class _LmdbFollower:
    def __init__(self, channel: LmdbChannel, invocation_id: str) -> None:
        env, self._chunks, self._followers = channel._opened()
        self._env = env
        self._invocation_id = invocation_id
        self._prefix = invocation_id.encode() + b"\x00"
        self._cursor = self._prefix  # read on from here
        self._file: str | None = None
        self.bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.bell.setblocking(False)
        token = secrets.token_hex(8)
        address: bytes | None
        if ABSTRACT:
            address = b"\x00journal-live-" + token.encode()
            self.bell.bind(address)
        else:
            self._file = os.path.join(channel._path, f"f-{token}")
            try:
                self.bell.bind(self._file)
                address = self._file.encode()
            except OSError:  # a path too long for a socket: no wake-ups, the follower's own interval only
                self._file, address = None, None
        self._registered = None if address is None else self._prefix + address
        if self._registered is not None:
            with env.begin(write=True) as txn:
                txn.put(self._registered, b"", db=self._followers)

    def read(self) -> list[Sent]:
        out: list[Sent] = []
        with self._env.begin() as txn, txn.cursor(db=self._chunks) as cursor:
            if not cursor.set_range(self._cursor):
                return out
            for key, value in cursor:
                if not key.startswith(self._prefix):
                    break
                if key == self._cursor:
                    continue
                out.append(unpack(value, self._invocation_id))
                self._cursor = bytes(key)
        return out

    def close(self) -> None:
        if self._registered is not None:
            try:
                with self._env.begin(write=True) as txn:
                    txn.delete(self._registered, db=self._followers)
            except lmdb.Error:
                pass
            self._registered = None
        self.bell.close()
        if self._file is not None:
            try:
                os.unlink(self._file)
            except OSError:
                pass


class _Silent:
    """A follower that receives nothing: its bell never rings."""

    def __init__(self) -> None:
        self._bell = Bell()
        self.bell = self._bell.bell

    def read(self) -> list[Sent]:
        return []

    def close(self) -> None:
        self._bell.close()

