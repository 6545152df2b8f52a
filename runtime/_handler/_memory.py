"""`ctx.memory`: long-term memory for handlers, shared across invocations and threads.

Every read and write is a durable step, so a replayed handler sees what its first run saw
(even if another invocation changed the item since) and a write is not repeated. The items
are the ones LangGraph graphs see through `runtime.langgraph.JournalStore` on the same store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import TerminalError
from ._memory_table import MemoryItem, MemoryTable, check_namespace

if TYPE_CHECKING:
    from ._context import Context

T = TypeVar("T")


class Memory:
    """Namespaced items: `await ctx.memory.put(("users", "ada"), "prefs", {"tone": "brief"})`."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def _table(self) -> MemoryTable:
        store = self._ctx._committer.store  # type: ignore[attr-defined]
        if not hasattr(store, "table_scan"):
            raise TerminalError(f"ctx.memory needs a store with tables; {store!r} has none")
        return MemoryTable(store)

    @staticmethod
    def _where(namespace: Sequence[str], key: str | None = None) -> str:
        return "/".join(namespace) + ("" if key is None else f"/{key}")

    async def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None; journaled, so replay returns what this read returned."""
        ns = check_namespace(namespace)
        return await self._ctx.run(f"memory.get {self._where(ns, key)}", self._get, list(ns), key,
                                   type=MemoryItem | None)

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        # The table's calls wait on the network for PostgreSQL: they run where the committer
        # runs store calls (a thread for such a store, in place for a local one).
        return await self._ctx._committer.read(fn, *args)  # type: ignore[attr-defined,no-any-return]

    async def _get(self, ns: list[str], key: str) -> MemoryItem | None:
        return await self._off_loop(self._table().get, ns, key)

    async def put(self, namespace: Sequence[str], key: str, value: dict[str, Any], *,
                  ttl: float | None = None) -> None:
        """Store `value` (a dict) under `key`, replacing what was there; `ttl` in minutes."""
        ns = check_namespace(namespace)
        await self._ctx.run(f"memory.put {self._where(ns, key)}", self._put, list(ns), key, value, ttl)

    async def _put(self, ns: list[str], key: str, value: dict[str, Any], ttl: float | None) -> None:
        await self._off_loop(functools.partial(self._table().put, ns, key, value, ttl=ttl))

    async def delete(self, namespace: Sequence[str], key: str) -> None:
        ns = check_namespace(namespace)
        await self._ctx.run(f"memory.delete {self._where(ns, key)}", self._delete, list(ns), key)

    async def _delete(self, ns: list[str], key: str) -> None:
        await self._off_loop(self._table().delete, ns, key)

    async def search(self, namespace_prefix: Sequence[str], *, filter: dict[str, Any] | None = None,
                     limit: int = 10, offset: int = 0) -> list[MemoryItem]:
        """Items under `namespace_prefix` whose values match `filter` (see `MemoryTable.search`)."""
        ns = check_namespace(namespace_prefix, "namespace prefix")
        return await self._ctx.run(f"memory.search {self._where(ns)}", self._search, list(ns), filter, limit, offset,
                                   type=list[MemoryItem])

    async def _search(self, ns: list[str], filter: dict[str, Any] | None, limit: int,
                      offset: int) -> list[MemoryItem]:
        return await self._off_loop(functools.partial(self._table().search, ns, filter=filter, limit=limit,
                                                      offset=offset))

    async def list_namespaces(self, *, prefix: Sequence[str] | None = None, suffix: Sequence[str] | None = None,
                              max_depth: int | None = None, limit: int = 100) -> list[tuple[str, ...]]:
        return await self._ctx.run("memory.list_namespaces", self._list, prefix and list(prefix),
                                   suffix and list(suffix), max_depth, limit, type=list[tuple[str, ...]])

    async def _list(self, prefix: list[str] | None, suffix: list[str] | None, max_depth: int | None,
                    limit: int) -> list[tuple[str, ...]]:
        return await self._off_loop(functools.partial(self._table().list_namespaces, prefix=prefix, suffix=suffix,
                                                      max_depth=max_depth, limit=limit))
