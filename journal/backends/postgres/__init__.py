"""The PostgreSQL backend, for workers on many hosts sharing one database.

`_backend.py` its registry entry, `_store.py` the store, `_rows.py` the tables and the
transaction that maps the rules' keys onto their columns, `_loop.py` the connection that
commits plain steps from the event loop, `_owners.py` the sessions whose advisory locks
show an owner alive, `_connect.py` how each of those connections opens again when the
server went away (backoff, patience, the old session's end, the writable host of
several), `_tables.py` the `Tables` protocol, `_migrate.py` the conversion of older formats,
`_urls.py` what telling and showing a store's URL takes.
"""

from ._backend import POSTGRES as POSTGRES
from ._urls import is_postgres_url as is_postgres_url
from ._urls import redact_url as redact_url
from ._version import FORMAT_VERSION as FORMAT_VERSION

# What the registry needs, and none of the store itself: a process whose stores are
# all LMDB never imports `_store.py` (`journal.PostgresStore` and `journal.store_patience`
# import it on first use).
__all__ = ("FORMAT_VERSION", "POSTGRES", "is_postgres_url", "redact_url")
