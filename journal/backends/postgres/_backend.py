"""PostgreSQL's entry in the backend registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._registry import Backend, Migration, NothingToCompact, Progress
from ._urls import is_postgres_url, redact_url
from ._version import FORMAT_VERSION

if TYPE_CHECKING:
    from ..._store import Store


class _Postgres(Backend):
    name = "postgresql"
    title = "PostgreSQL"
    format_version = FORMAT_VERSION
    # A database user need not be allowed to run code on the workers' hosts: the handler an
    # invocation names is never imported from what the database says.
    runs_recorded_handlers = False
    schemes = ("postgresql", "postgres")

    def claims(self, target: str) -> bool:
        return is_postgres_url(target)

    def describe(self, target: str) -> str:
        return redact_url(target)

    def open(self, target: str, *, readonly: bool = False, **options: Any) -> Store:
        # The database user's rights decide what may be written; LMDB's map size means nothing here.
        options.pop("map_size", None)
        from ._store import PostgresStore  # the store's modules load for a PostgreSQL store only

        return PostgresStore(target, **options)

    def migrate(self, target: str, *, progress: Progress | None, lock_timeout: float) -> Migration:
        from ._migrate import migrate

        return migrate(target, progress, lock_timeout)

    def compact(self, store: Store, *, force: bool = False) -> tuple[int, int]:
        raise NothingToCompact(
            "nothing to compact on PostgreSQL: autovacuum reuses the space `journal trim` frees; to give it "
            "back to the operating system, run VACUUM FULL on the journal schema's tables in a quiet moment "
            "(it locks them)")


POSTGRES: Backend = _Postgres()
