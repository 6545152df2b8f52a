"""The PostgreSQL backend, for workers on many hosts sharing one database.

`_backend.py` its registry entry, `_store.py` the store, `_rows.py` the tables and the
transaction that maps the rules' keys onto their columns, `_loop.py` the connection that
commits plain steps from the event loop, `_owners.py` the sessions whose advisory locks
show an owner alive, `_connect.py` how each of those connections opens again when the
server went away (backoff, patience, the old session's end, the writable host of
several), `_tables.py` the `Tables` protocol, `_migrate.py` the conversion of older formats,
`_urls.py` what telling and showing a store's URL takes.
"""

import importlib
import typing

from ._backend import FORMAT_VERSION as FORMAT_VERSION
from ._backend import POSTGRES as POSTGRES
from ._urls import is_postgres_url as is_postgres_url
from ._urls import redact_url as redact_url

__all__ = ("FORMAT_VERSION", "POSTGRES", "PostgresStore", "is_postgres_url", "redact_url", "store_patience")

# Imported on first use: the registry knows this backend (`POSTGRES`) without loading the
# driver and the store, which a process whose stores are all LMDB never needs.
_LAZY = {"PostgresStore": "._store", "store_patience": "._connect"}

if typing.TYPE_CHECKING:  # a type checker sees them as ordinary exports
    from ._connect import store_patience as store_patience
    from ._store import PostgresStore as PostgresStore


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
