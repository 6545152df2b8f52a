"""Zeros written ahead of LMDB's last page, so that an fsync after a commit flushes data only.

LMDB grows its data file by writing pages past its end. A commit that does so changes the
file's size, and `fdatasync` must then commit the file system's journal as well as the
pages: on ext4 here, a step journaling a 1 KB result grew the file on about every other
commit, and W1 `sync` with such steps took 267 µs a step against 204 µs into space already
written (`docs/performance.md`, "Room written ahead of the data"). Space reserved without writing
(`fallocate`, a sparse `ftruncate`) does not help: the first write into it changes the
file's block map, which is metadata again.

So the store keeps some room past LMDB's last page already written, with zeros, and
extends it in steps as the data grows: an eighth of the data, at least 64 KiB and at most
2 MiB. LMDB reads only pages its meta page counts, so the zeros are never read; compaction
copies the data without them. The room is written under LMDB's writer lock, so no commit
of any process writes pages meanwhile, and only past the end of the file and of the page
the last commit counts. With less than 64 MiB free on the disk beyond the room, nothing is
written ahead: the zeros would take space the data needs.
"""

from __future__ import annotations

import os

import lmdb

_LEAST = 64 * 1024
_MOST = 2 * 1024 * 1024
_KEEP_FREE = 64 * 1024 * 1024  # on the disk, beyond the room itself
_ZEROS = bytes(256 * 1024)
CHECK_EVERY = 8  # commits between looks at the room left (a look reads LMDB's meta: 0.7 µs)


class RoomAhead:
    """The room past LMDB's last page in one store's data file. The store counts its
    commits in `commits` and calls `look` every `CHECK_EVERY`, on the committing thread,
    right after a commit: the thread that also resizes the map, which LMDB forbids while
    any transaction of the process is open."""

    def __init__(self, path: str) -> None:
        self._data = os.path.join(path, "data.mdb")
        self._enough_to = 0  # bytes: no need to look again before the data reaches this
        self._off = False  # the file system refused a write: nothing more is tried
        self._page = 0
        self.commits = 0

    def forget(self) -> None:
        """The data file was replaced (compaction): what was written ahead went with it."""
        self._enough_to = 0

    def look(self, env: lmdb.Environment) -> None:
        """Write room ahead if the data has come close to the end of what is written. Never
        raises: without room the file grows as LMDB grows it, as it did before."""
        self.commits = 0
        if self._off:
            return
        try:
            if not self._page:
                self._page = int(env.stat()["psize"])
            used = (env.info()["last_pgno"] + 1) * self._page
            room = min(_MOST, max(_LEAST, used // 8))
            if self._enough_to - used < room // 2:
                self._extend(env, used, room)
        except lmdb.Error:  # a resize of the map under way, say: looked at again after the next commits
            pass
        except OSError:  # the file system refused: the file grows as LMDB grows it
            self._off = True

    def _extend(self, env: lmdb.Environment, used: int, room: int) -> None:
        # Not following a link, as for every file of the store (`_files.py`).
        fd = os.open(self._data, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            st = os.statvfs(self._data)
            if st.f_bavail * st.f_frsize < _KEEP_FREE + room:
                self._enough_to = used + room  # a nearly full disk: looked at again after this much data
                return
            txn = env.begin(write=True)  # LMDB's writer lock: no page is written meanwhile, by any process
            try:
                used = (env.info()["last_pgno"] + 1) * self._page
                start = max(os.fstat(fd).st_size, used)
                end = used + room
                while start < end:
                    start += os.pwrite(fd, _ZEROS[:end - start], start)
                self._enough_to = start
            finally:
                txn.abort()
        finally:
            os.close(fd)
