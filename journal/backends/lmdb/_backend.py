"""LMDB's entry in the backend registry."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...errors import StoreError
from .._registry import Backend, Migration, Progress
from ._files import check_store_dir
from ._store import FORMAT_VERSION, LmdbStore

if TYPE_CHECKING:
    from ..._store import Store


class _Lmdb(Backend):
    name = "lmdb"
    title = "LMDB"
    format_version = FORMAT_VERSION
    runs_recorded_handlers = True  # the directory is private to its owner (0700)

    def claims(self, target: str) -> bool:
        return True  # any path: the default

    def locate(self, target: str) -> str:
        return os.path.abspath(target)

    def open(self, target: str, *, readonly: bool = False, **options: Any) -> Store:
        options.pop("reconnect_for", None)  # a directory is never away
        return LmdbStore(target, readonly=readonly, **options)

    def check_location(self, target: str, *, must_exist: bool) -> list[str]:
        path = self.locate(target)
        warnings = check_store_dir(path)
        if must_exist and not os.path.isdir(path):
            raise StoreError(
                f"there is no journal store at {path}; pass --db PATH or set JOURNAL_DB to the directory "
                "that `journal run` wrote to"
            )
        return warnings

    def migrate(self, target: str, *, progress: Progress | None, lock_timeout: float) -> Migration:
        path = self.locate(target)
        if not os.path.isfile(os.path.join(path, "data.mdb")):
            raise StoreError(f"there is no journal store at {path}: nothing to migrate")
        # LMDB has known one format: opening checks it (a newer one raises), and read-only
        # opening writes nothing.
        LmdbStore(path, readonly=True).close()
        return Migration(self.name, FORMAT_VERSION, FORMAT_VERSION)

    def compact(self, store: Store, *, force: bool = False) -> tuple[int, int]:
        from ._compact import compact

        if not isinstance(store, LmdbStore):
            raise StoreError(f"{store!r} is not an LMDB store")
        return compact(store, force=force)


LMDB: Backend = _Lmdb()
