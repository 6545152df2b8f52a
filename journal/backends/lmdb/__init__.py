"""The embedded default backend: an LMDB environment in a private directory.

`_backend.py` its registry entry, `_store.py` the store, `_txn.py` its transactions, `_tables.py` the `Tables` protocol
(LangGraph's checkpoints and memory), `_files.py` the checks of the directory's files
before LMDB maps them, `_compact.py` compaction.
"""

from ._backend import LMDB as LMDB
from ._files import check_store_dir as check_store_dir
from ._store import FORMAT_VERSION as FORMAT_VERSION
from ._store import LmdbStore as LmdbStore
from ._store import default_path as default_path

__all__ = ("FORMAT_VERSION", "LMDB", "LmdbStore", "check_store_dir", "default_path")
