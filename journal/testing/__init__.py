"""The contract every store backend keeps, shipped so that a backend of your own passes
exactly the rules journal's own backends pass (the in-memory, LMDB and PostgreSQL stores
run these very tests).

    from journal.testing import StoreContract, TablesContract

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path, request):
            return MyStore(tmp_path / "db")

They are pytest tests (`pip install pytest`): a subclass named `Test...` in your test suite
runs them all. What a store offers beyond the calls every store has it declares in
`Store.capabilities` (`journal.Capability`), and the contract tests what is declared:
`Capability.LEASE_AT_CREATE` changes what a creation with a lease must do, the cancel
counter is tested only where declared, and `TablesContract` is for a store that declares
`Capability.TABLES`. The builders (`create`, `acquire`, `append`, `step`) write what the
runtime writes, for tests of your own.
"""

from ._builders import T0 as T0
from ._builders import acquire as acquire
from ._builders import append as append
from ._builders import create as create
from ._builders import creation_op as creation_op
from ._builders import step as step
from ._store_contract import StoreContract as StoreContract
from ._tables_contract import TablesContract as TablesContract

__all__ = ("T0", "StoreContract", "TablesContract", "acquire", "append", "create", "creation_op", "step")
