"""Store logic written once over a small sorted key-value transaction interface.

A backend that can give transactions over ordered tables (`Txn`: get, put, insert, delete,
scan, last) subclasses `KVStore` and gets every rule of the `Store` protocol from it: the
key layout, records and their status and timer indexes, transitions, the lease fence, a
key's queue and state, and the links between invocations. The in-memory, LMDB and
PostgreSQL stores all do, so they cannot drift apart.
"""

from ._append import OWNED_IDS_KEPT as OWNED_IDS_KEPT
from ._append import Fence as Fence
from ._rules import TABLES as TABLES
from ._rules import Txn as Txn
from ._rules import check_lease as check_lease
from ._rules import decode_lease as decode_lease
from ._rules import entry_key as entry_key
from ._rules import lease_is_live as lease_is_live
from ._rules import prefix_end as prefix_end
from ._store import KVStore as KVStore
from ._store import WriteAgain as WriteAgain

__all__ = ("OWNED_IDS_KEPT", "TABLES", "Fence", "KVStore", "Txn", "WriteAgain", "check_lease", "decode_lease", "entry_key",
           "lease_is_live", "prefix_end")
