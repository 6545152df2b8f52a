"""The registry of backends, and the `Backend` each one gives it (see `journal.backends`)."""


from __future__ import annotations

import abc
import os
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import StoreError

if TYPE_CHECKING:
    from .._store import Store


@dataclass(frozen=True)
class Migration:
    """What `journal.migrate` found and did."""

    backend: str  # the backend's name: "lmdb" or "postgresql"
    found: int  # the format version the store had
    current: int  # the format version this release writes
    rows: int = 0  # rows copied

    @property
    def changed(self) -> bool:
        return self.found != self.current


Progress = Callable[[str, int], None]
"""Called with a table's name and the rows of it copied so far, after each batch."""


class Backend(abc.ABC):
    """One kind of store, as the registry knows it."""

    name: str  # as `Migration.backend` and `FORMAT_VERSIONS` name it
    title: str  # as messages name it ("LMDB")
    format_version: int  # the format this release reads and writes
    runs_recorded_handlers: bool
    schemes: tuple[str, ...] = ()  # the URL schemes it claims ("postgresql"); none for a path

    @abc.abstractmethod
    def claims(self, target: str) -> bool:
        """Whether `target` names a store of this backend."""

    def locate(self, target: str) -> str:
        """`target` as the store will know it (an absolute path for a directory)."""
        return target

    def describe(self, target: str) -> str:
        """`target` as a message may show it: without secrets."""
        return target

    @abc.abstractmethod
    def open(self, target: str, *, readonly: bool = False, **options: Any) -> Store:
        """The store at `target`, created if missing unless `readonly`."""

    def check_location(self, target: str, *, must_exist: bool) -> list[str]:
        """Raise `StoreError`, saying what to do, when `target` can be no store, or when
        `must_exist` and none is there yet; return warnings a user should see once per command.
        (A database says for itself whether it exists, when connected to.)"""
        return []

    @abc.abstractmethod
    def migrate(self, target: str, *, progress: Progress | None, lock_timeout: float) -> Migration:
        """Convert the store at `target` to `format_version`, in one transaction."""

    def compact(self, store: Store, *, force: bool = False) -> tuple[int, int]:
        """Give the space of trimmed journals back; returns (bytes before, bytes after).
        `force` skips what only guards against programs other than journal (LMDB: the scan
        for other processes mapping its file).
        Raises `NothingToCompact` where the backend reclaims space by itself."""
        raise NothingToCompact(f"nothing to compact on {self.title}")


class NothingToCompact(StoreError):
    """`journal compact` on a backend that reclaims its space by itself; the message says how."""


_registry: list[Backend] = []  # tried in order; the last one (LMDB) takes any path
_versions: dict[str, int] = {}
FORMAT_VERSIONS: Mapping[str, int] = types.MappingProxyType(_versions)
"""The format version this release reads and writes, per backend."""


def register(backend: Backend, *, default: bool = False) -> None:
    """Add `backend` to the registry: tried before the default (a path is LMDB)."""
    if default:
        _registry.append(backend)
    else:
        _registry.insert(max(len(_registry) - 1, 0) if _registry else 0, backend)
    _versions[backend.name] = backend.format_version


# `scheme://`, as RFC 3986 spells a scheme: a name that starts so is a URL, never a directory
# (`postgress://app@host/db`, `sqlite:///x.db` would otherwise become nested directories).
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def backend_for(target: str | os.PathLike[str]) -> Backend:
    """The backend of the store `target` names; a URL whose scheme no backend claims is
    refused (naming the schemes there are), rather than taken for a directory path."""
    name = os.fspath(target)
    url = _URL.match(name)
    if url is not None:
        known = [s for backend in _registry for s in backend.schemes]
        if url.group(1) not in known:
            # Only the scheme is shown: the rest of a URL may hold a password.
            raise StoreError(
                f"the store {url.group(1)}://... is a URL of a kind journal does not know; the URL schemes it "
                f"knows are {', '.join(s + '://' for s in known)} (anything else must be a directory path, "
                "for LMDB): check the spelling of --db or $JOURNAL_DB")
    for backend in _registry:
        if backend.claims(name):
            return backend
    raise StoreError(f"{name!r} names no kind of journal store: pass a directory or a postgresql:// URL")


def open_store(target: str | os.PathLike[str], **options: Any) -> Store:
    """The store `target` names (`--db`, `$JOURNAL_DB`): a directory path (LMDB) or a
    libpq URL `postgresql://[user[:password]@][host][:port]/dbname[?host=/socket/dir]`."""
    return backend_for(target).open(os.fspath(target), **options)


def describe(target: str | os.PathLike[str]) -> str:
    """The store's name as a message may show it (a URL without its password)."""
    return backend_for(target).describe(os.fspath(target))
