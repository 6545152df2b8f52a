"""Waking LMDB workers in other processes when an invocation becomes runnable.

LMDB has no server to notify anyone, so a worker polls (`Worker.poll_interval`). To find a
message sent from another process (`journal send`, `journal serve`'s route) at once rather
than at its next look, a worker rings a bell it owns, the way live output wakes its
followers (`_live.py`): it binds a datagram socket (on Linux in the abstract namespace,
elsewhere a file in `live/`) and records its name in the `workers` table of the store's
live environment. A write transaction that made an invocation pending (what PostgreSQL
answers with `NOTIFY journal_runnable`) sends each registered worker a byte once it has
committed. The bell only shortens the wait: a worker still looks at every poll, so a bell
lost (a full socket queue, a store opened read-only) costs no more than polling did. A name
whose socket is gone is removed by the next ring.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading

import lmdb

from ._live import ABSTRACT, open_env, release_env
from ._subdbs import open_db


class WorkBells:
    """The bells of the workers that wait on the LMDB store at `store_path`."""

    def __init__(self, store_path: str) -> None:
        self._path = os.path.join(store_path, "live")
        self._env: lmdb.Environment | None = None
        self._db: lmdb._Database | None = None
        self._lock = threading.Lock()
        self._out: socket.socket | None = None
        self._broken = False  # the live environment cannot be opened here (a read-only mount): no bells

    def _opened(self, create: bool = True) -> tuple[lmdb.Environment, lmdb._Database] | None:
        with self._lock:
            # No `live/` yet: no worker registered, nobody to ring (and nothing made for them).
            if self._env is None and not self._broken and (create or os.path.isdir(self._path)):
                try:
                    env = open_env(self._path)
                except (OSError, lmdb.Error):
                    self._broken = True
                    return None
                self._env, self._db = env, open_db(env, b"workers")
                self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._out.setblocking(False)
            if self._env is None or self._db is None:
                return None
            return self._env, self._db

    def ring(self) -> None:
        """Wake every registered worker (called after a commit that made an invocation pending)."""
        try:
            self._ring()
        except (OSError, lmdb.Error):
            pass  # the commit stands; a worker not rung finds the invocation at its next poll

    def _ring(self) -> None:
        opened = self._opened(create=False)
        if opened is None or self._out is None:
            return
        env, db = opened
        with env.begin(db=db) as txn:
            names = [bytes(key) for key in txn.cursor(db=db).iternext(values=False)]
        stale = []
        for name in names:
            try:
                self._out.sendto(b"\x01", name if ABSTRACT and name[:1] == b"\x00" else name.decode())
            except (BlockingIOError, InterruptedError):
                pass  # its queue is full: it has a wake-up waiting already
            except OSError:  # gone (the worker died without saying so)
                stale.append(name)
        if stale:
            with env.begin(write=True, db=db) as txn:
                for name in stale:
                    txn.delete(name, db=db)

    def bell(self) -> LmdbWorkBell | None:
        """A bell for one worker, registered until it is closed (None: this process cannot
        write the live environment, and its worker polls)."""
        opened = self._opened()
        if opened is None:
            return None
        return LmdbWorkBell(*opened, self._path)

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None
            if self._env is not None:
                self._env = self._db = None
                release_env(self._path)


class LmdbWorkBell:
    """A worker's bell: `socket` is readable once a ring arrived; `drain` empties it."""

    def __init__(self, env: lmdb.Environment, db: lmdb._Database, live_path: str) -> None:
        self._env, self._db = env, db
        self._file: str | None = None
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.setblocking(False)
        token = secrets.token_hex(8)
        name: bytes | None
        if ABSTRACT:
            abstract = b"\x00journal-work-" + token.encode()
            self.socket.bind(abstract)
            name = abstract
        else:
            self._file = os.path.join(live_path, f"w-{token}")
            try:
                self.socket.bind(self._file)
                name = self._file.encode()
            except OSError:  # a path too long for a socket: never rung, the worker polls
                self._file, name = None, None
        self._name = name
        if name is not None:
            with env.begin(write=True, db=db) as txn:
                txn.put(name, b"", db=db)

    def drain(self) -> None:
        try:
            while self.socket.recv(64):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        if self._name is not None:
            try:
                with self._env.begin(write=True, db=self._db) as txn:
                    txn.delete(self._name, db=self._db)
            except lmdb.Error:
                pass
            self._name = None
        self.socket.close()
        if self._file is not None:
            try:
                os.unlink(self._file)
            except OSError:
                pass
