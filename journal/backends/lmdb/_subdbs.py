"""Opening an LMDB sub-database safely while other threads of the process write.

py-lmdb's `Environment.open_db`, given no transaction, begins a write transaction of its
own while it holds the GIL. If another thread of the process has just been given the
writer lock and waits for the GIL to go on, neither can move: the process hangs, and so
does every other process that wants to write the store. `open_db` here begins the
transaction itself, through `Environment.begin`, which lets go of the GIL while it waits.
"""

from __future__ import annotations

from typing import Any

import lmdb


def open_db(env: lmdb.Environment, name: bytes, *, create: bool = True) -> Any:
    """`env.open_db(name)` in a transaction begun here. `lmdb.NotFoundError` if it does not
    exist and is not created; looking for one that does not exist takes no writer lock."""
    writable = not env.flags()["readonly"]
    if not writable:
        # A read-only store has no writer lock to wait for. And a handle opened in a read
        # transaction begun here does not outlive it: its first read failed with
        # `mdb_get: Invalid argument` (tests/cli/test_read_only_store.py).
        return env.open_db(name, create=False)
    if not create:
        with env.begin() as txn:  # a sub-database is a key of the main database
            if txn.get(name) is None:
                raise lmdb.NotFoundError(f"no sub-database {name!r}")
    # A handle LMDB opened in a read transaction cannot be used to write: open it in a write one.
    with env.begin(write=True) as txn:
        return env.open_db(name, txn=txn, create=create)
