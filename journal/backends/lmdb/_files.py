"""The files of an LMDB store, checked before LMDB maps them.

LMDB trusts its files completely: it follows a symlink named `lock.mdb` and writes its
lock table into whatever it points at, and it maps `data.mdb` whole, so a file shorter
than its own meta pages say turns the first read past the end into SIGBUS. These checks
run before `lmdb.open` and turn each case into a `StoreError` that names the file.

`open.lock` is held (shared, `flock`) by every process that has the store open, and
exclusively by `compact` while it swaps the data file: a process that opened the store
after compact began would otherwise commit into the file that compact is replacing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import struct
import time

from ...errors import StoreBusy, StoreError

OPEN_LOCK = "open.lock"
COMPACT_TMP = "compact.tmp"
_MAGIC = 0xBEEFC0DE
_META_PAGES = 2
# An MDB_meta after the 16-byte page header: magic, version, address, mapsize, two
# MDB_db (the first one's md_pad holds the page size), last page number, txn id.
_META = struct.Struct("<IIQQ")
_DB_SIZE = 48
_TAIL = struct.Struct("<QQ")


def check_store_dir(path: str) -> list[str]:
    """Refuse a store path that is not a directory; return warnings about its permissions."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise StoreError(
                f"the store path {path} is a symlink to something that does not exist; point --db "
                "(or JOURNAL_DB) at a directory"
            ) from None
        return []
    except OSError as exc:
        raise StoreError(f"cannot use {path} as a journal store: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(
            f"{path} is not a directory; a journal store is a directory: point --db (or JOURNAL_DB) at a "
            "directory (it is created if missing)"
        )
    warnings = []
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        warnings.append(
            f"warning: the store directory {path} can be written by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}); anyone who can write it can change what your handlers replay: "
            f"`chmod 700 {path}`"
        )
    return warnings


def make_store_dir(path: str) -> None:
    """Create the store directory private to its owner, or say clearly why it cannot be."""
    check_store_dir(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the journal store directory {path}: {exc.strerror}; choose a writable "
            "place with --db PATH (or JOURNAL_DB)"
        ) from None


def check_files(path: str, *, create: bool) -> None:
    """Refuse symlinked or hard-linked store files, and a data file shorter than LMDB says.

    With `create` (a writer, holding the open lock, so no compaction runs) the copy a
    killed `journal compact` left behind is removed.
    """
    if create:
        leftover = os.path.join(path, COMPACT_TMP)
        if os.path.isdir(leftover) and not os.path.islink(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
    for name in ("data.mdb", "lock.mdb", OPEN_LOCK):
        full = os.path.join(path, name)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot inspect {full}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise StoreError(
                f"{full} is a symlink; journal never follows links for its own files (it would write "
                f"into the link's target); remove it (`rm {full}`) and run the command again"
            )
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{full} is not a regular file; remove it and run the command again")
        if st.st_nlink > 1:
            raise StoreError(
                f"{full} has {st.st_nlink} hard links; journal writes into it, which would change the other "
                f"names too; copy the store (`journal compact` on a copy) or remove the extra links"
            )
    _check_data_size(os.path.join(path, "data.mdb"))


def _check_data_size(full: str) -> None:
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read {full}: {exc.strerror}") from None
    try:
        head = os.pread(fd, 4096 * _META_PAGES, 0)
        best = _read_meta(head, 0)
        if best is None and not head:
            return  # empty: LMDB initialises it
        if best is None:
            raise StoreError(
                f"{full} is not an LMDB data file (its first page has no LMDB header); it is damaged or "
                "not a journal store: restore the store from a backup, or move it away to start afresh"
            )
        page_size = best[0]
        other = _read_meta(os.pread(fd, page_size, page_size), 0)
        if other is not None and other[2] > best[2]:
            best = other
        size = os.fstat(fd).st_size  # after the meta: the file only grows under a writer
    finally:
        os.close(fd)
    needed = (best[1] + 1) * page_size
    if size < needed:
        raise StoreError(
            f"{full} is truncated: it holds {size:,} bytes but its last committed transaction uses "
            f"{needed:,}; reading it would crash. Restore the store from a backup (for example one made "
            "with `LmdbStore.copy_to`); nothing was changed"
        )


def _read_meta(page: bytes, offset: int) -> tuple[int, int, int] | None:
    """(page size, last page number, txn id) from a meta page, or None if it is not one."""
    if len(page) < offset + 16 + _META.size + 2 * _DB_SIZE + _TAIL.size:
        return None
    magic, version, _, _ = _META.unpack_from(page, offset + 16)
    if magic != _MAGIC:
        return None
    page_size = struct.unpack_from("<I", page, offset + 16 + _META.size)[0]
    last, txnid = _TAIL.unpack_from(page, offset + 16 + _META.size + 2 * _DB_SIZE)
    if page_size < 512 or page_size & (page_size - 1):
        return None
    return page_size, last, txnid


def hold_open_lock(path: str, *, create: bool) -> int | None:
    """Take the shared `open.lock` of the store; a store being compacted is refused."""
    full = os.path.join(path, OPEN_LOCK)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(full, flags, 0o600)
    except FileNotFoundError:
        return None  # a read-only look at a store nobody has written since this lock existed
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{full} is a symlink; remove it (`rm {full}`) and run the command again") from None
        if not create:
            return None
        raise StoreError(f"cannot open {full}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreBusy(
            f"the store at {path} is being compacted by `journal compact`; nothing was read or written. "
            "Run this command again once the compaction has finished"
        ) from None
    return fd


def take_exclusive(fd: int | None, path: str) -> None:
    """Turn this process's shared hold into an exclusive one, or say who else has the store open."""
    if fd is None:
        raise StoreError(f"cannot lock the store at {path} for compaction: {OPEN_LOCK} is missing")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise StoreBusy(
            f"other processes have the store at {path} open (workers, runs, or other journal commands); "
            "stop them and run `journal compact` again: a process that keeps the old file open would "
            "write where nobody reads"
        ) from None


def release_exclusive(fd: int | None) -> None:
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_SH)


def test_pause(point: str) -> None:
    """A test hook: with JOURNAL_TEST_PAUSE=`point`:DIR, announce `point` by creating DIR/`point`.reached
    and wait until DIR/`point`.go exists (or 60 s pass), so a test can act inside a window."""
    spec = os.environ.get("JOURNAL_TEST_PAUSE")
    if not spec:
        return
    name, _, directory = spec.partition(":")
    if name != point or not directory:
        return
    with open(os.path.join(directory, f"{point}.reached"), "w"):
        pass
    go = os.path.join(directory, f"{point}.go")
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
