"""Compacting an LMDB store: rewrite its file without free pages, swapped in atomically."""

from __future__ import annotations

import os
import shutil

from ...errors import StoreBusy
from ._files import COMPACT_TMP, test_pause
from ._store import LmdbStore, exclusive


def compact(store: LmdbStore, *, force: bool = False) -> tuple[int, int]:
    """Rewrite the store's file without free pages; returns (bytes before, bytes after).

    The compacting copy is written beside the store, fsynced, then renamed over the data
    file, so a crash at any moment leaves either the old file or the new one, both whole.
    The store must be open in no other process, nor elsewhere in this one: LMDB cannot swap
    a file under a process that has it mapped. Compaction holds the store alone from its
    first check to the swap, so a process that tries to open it meanwhile is refused
    (`StoreBusy`) instead of committing into the file being replaced. Unless `force`, it is
    refused too while another program has the file mapped (found in /proc on Linux).
    """
    mapping = [] if force else _other_processes(store.path)
    if mapping:
        raise StoreBusy(
            f"processes {', '.join(map(str, mapping))} have the store at {store.path} open; stop them "
            "(or pass --force if they are not journal processes writing to it)"
        )
    others, release = exclusive(store.path)
    try:
        if others:
            raise StoreBusy(
                f"the store at {store.path} is open {others} more time(s) in this process; close those "
                "stores (and engines) before compacting it"
            )
        sizes = _swap_compacted(store)
        store.reopen_after_swap()  # before anyone else may open the store again
        return sizes
    finally:
        release()


def _swap_compacted(store: LmdbStore) -> tuple[int, int]:
    data = os.path.join(store.path, "data.mdb")
    before = os.path.getsize(data)
    tmp = os.path.join(store.path, COMPACT_TMP)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp, mode=0o700)
    store.copy_to(tmp)
    test_pause("compact")
    copied = os.path.join(tmp, "data.mdb")
    os.chmod(copied, 0o600)
    with open(copied, "rb") as f:
        os.fsync(f.fileno())
    os.replace(copied, data)
    fd = os.open(store.path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    shutil.rmtree(tmp, ignore_errors=True)
    return before, os.path.getsize(data)


def _other_processes(path: str) -> list[int]:
    """Pids of other processes that have the store mapped (Linux; empty where /proc is missing)."""
    target = os.path.join(os.path.realpath(path), "data.mdb")
    found = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                if any(line.rstrip().endswith(target) for line in maps):
                    found.append(pid)
        except OSError:
            continue
    return found
