"""The PostgreSQL backend, for workers on many hosts sharing one database.

`_backend.py` its registry entry, `_store.py` the store, `_rows.py` the tables and the
transaction that maps the rules' keys onto their columns, `_loop.py` the connection that
commits plain steps from the event loop, `_owners.py` the sessions whose advisory locks
show an owner alive, `_connect.py` how each of those connections opens again when the
server went away (backoff, patience, the old session's end, the writable host of
several), `_tables.py` the `Tables` protocol, `_migrate.py` the conversion of older formats.
"""

from ._backend import POSTGRES as POSTGRES
from ._connect import redact_url as redact_url
from ._connect import store_patience as store_patience
from ._rows import FORMAT_VERSION as FORMAT_VERSION
from ._store import PostgresStore as PostgresStore
from ._store import is_postgres_url as is_postgres_url

__all__ = ("FORMAT_VERSION", "POSTGRES", "PostgresStore", "is_postgres_url", "redact_url", "store_patience")
