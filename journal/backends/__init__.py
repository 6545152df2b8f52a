"""Store backends, and the registry that picks one from the name of a store.

A store is named by `--db` or `$JOURNAL_DB`: a directory path is LMDB (the embedded
default), a `postgresql://` URL is PostgreSQL. Each backend is a folder here that owns all
of its code (its store, transactions, files or SQL, format conversion, compaction) and one
`Backend` in the registry. Everything that depends on which backend a store is goes
through that entry, so no other module asks "is this PostgreSQL?":

- `open`: the store itself, and `check_location`: refuse a name that can be no store (or,
  where one must exist, names none), saying what to do, and warn about one others could write;
- `describe`: the name as a message may show it (a URL without its password);
- `migrate` and `compact`: maintenance that only the backend knows how to do;
- `runs_recorded_handlers`: whether a process may import the handler an invocation
  recorded (only when the store is private to its owner, as an LMDB directory is; a
  database user need not be allowed to run code on the workers' hosts).

Adding a backend: a folder with its `Store` (usually a `journal.kv.KVStore` subclass,
which brings every rule), a `Backend` passed to `register`, and the shipped contract
(`journal.testing.StoreContract`) run over it.
"""

from ._registry import FORMAT_VERSIONS as FORMAT_VERSIONS
from ._registry import Backend as Backend
from ._registry import Migration as Migration
from ._registry import NothingToCompact as NothingToCompact
from ._registry import Progress as Progress
from ._registry import backend_for as backend_for
from ._registry import describe as describe
from ._registry import open_store as open_store
from ._registry import register as register

__all__ = ("FORMAT_VERSIONS", "Backend", "Migration", "NothingToCompact", "Progress", "backend_for", "describe",
           "open_store", "register")


def _register_builtins() -> None:
    from .lmdb import LMDB
    from .postgres import POSTGRES

    register(LMDB, default=True)
    register(POSTGRES)


_register_builtins()
