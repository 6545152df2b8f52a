"""Zeros written ahead of LMDB's last page, so that an fsync after a commit flushes data only.

LMDB grows its data file by writing pages past its end. A commit that does so changes the
file's size, and `fdatasync` must then commit the file system's journal as well as the
pages: on ext4 here, a step journaling a 1 KB result grew the file on about every other
commit, and W1 `sync` with such steps took 249 µs a step against 188 µs into space already
written (`docs/performance.md`, "Room written ahead of the data"). Space reserved without writing
(`fallocate`, a sparse `ftruncate`) does not help: the first write into it changes the
file's block map, which is metadata again.

So the store keeps some room past LMDB's last page already written, with zeros, and
extends it in steps as the data grows: an eighth of the data, at least 64 KiB and at most
2 MiB. LMDB reads only pages its meta page counts, so the zeros are never read; compaction
copies the data without them. The room is written under LMDB's writer lock, so no commit
of any process writes pages meanwhile, and only past the page the last commit counts. On
a nearly full disk nothing is written ahead: the zeros would take space the data needs.
"""

from __future__ import annotations

import os

import lmdb

_LEAST = 64 * 1024
_MOST = 2 * 1024 * 1024
_KEEP_FREE = 64 * 1024 * 1024  # on the disk, beyond the room itself
_ZEROS = bytes(256 * 1024)


class RoomAhead:
    """The room past LMDB's last page in one store's data file."""

    def __init__(self, path: str) -> None:
        self._data = os.path.join(path, "data.mdb")
        self._written_to = 0  # the file's end as last seen: written up to there
        self._off = False  # the file system refused a write: nothing more is tried
        self._page = 0
        # The store calls `keep` once LMDB's last page number reaches this (read without a
        # call into this file: a step's path stays short, `python -m bench.step_path`).
        self.check_at = 0

    def forget(self) -> None:
        """The data file was replaced (compaction): what was written ahead went with it."""
        self._written_to = 0
        self.check_at = 0

    def keep(self, env: lmdb.Environment) -> None:
        """Write room ahead if the data has come close to the end of what is written.
        Called after commits, before their fsync; a failure here only leaves the file to
        grow as LMDB grows it."""
        if self._off:
            return
        if not self._page:
            self._page = int(env.stat()["psize"])
        used = (env.info()["last_pgno"] + 1) * self._page
        room = min(_MOST, max(_LEAST, used // 8))
        if self._written_to - used < room // 2:
            try:
                self._extend(env, room)
            except OSError:
                self._off = True
                self.check_at = 1 << 62
                return
        self.check_at = max(0, (self._written_to - room // 2) // self._page - 1)

    def _extend(self, env: lmdb.Environment, room: int) -> None:
        fd = os.open(self._data, os.O_WRONLY | os.O_CLOEXEC)
        try:
            st = os.statvfs(self._data)
            if st.f_bavail * st.f_frsize < _KEEP_FREE + room:
                self._written_to = os.fstat(fd).st_size  # looked at again once the data reaches it
                return
            txn = env.begin(write=True)  # LMDB's writer lock: no page is written meanwhile, by any process
            try:
                used = (env.info()["last_pgno"] + 1) * self._page
                start = max(os.fstat(fd).st_size, used)
                end = used + room
                while start < end:
                    start += os.pwrite(fd, _ZEROS[:end - start], start)
                self._written_to = start
            finally:
                txn.abort()
        finally:
            os.close(fd)
