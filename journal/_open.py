"""Opening a store by name: a directory is LMDB, a `postgresql://` URL is PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

from ._lmdb import LmdbStore
from ._postgres import PostgresStore, is_postgres_url
from ._store import Store


def open_store(target: str | os.PathLike[str], **options: Any) -> Store:
    """The store `target` names (`--db`, `$JOURNAL_DB`): a directory path (LMDB) or a
    libpq URL `postgresql://[user[:password]@][host][:port]/dbname[?host=/socket/dir]`."""
    if is_postgres_url(os.fspath(target)):
        options.pop("readonly", None)  # a database user's rights decide that on PostgreSQL
        options.pop("map_size", None)
        return PostgresStore(os.fspath(target), **options)
    options.pop("reconnect_for", None)  # a directory is never away
    return LmdbStore(target, **options)
