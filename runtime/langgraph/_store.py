"""`JournalStore`: LangGraph's long-term memory (`BaseStore`) on a journal store.

The items live in the store's memory table (`runtime.MemoryTable`), the same ones handlers
reach through `ctx.memory`: a graph and a handler on one store share what they remember.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from .. import MemoryItem, MemoryTable
from ._keys import open_tables
from ._saver import CheckpointError


class JournalStore(BaseStore):
    """Long-term memory for LangGraph on a journal store (`db`: a directory path or a store).

    Namespaces, put/get/delete, search with filters (`$eq`, `$ne`, `$gt`, `$gte`, `$lt`,
    `$lte`, nested fields), list_namespaces, and TTL (`ttl_config`, minutes; expired items
    are invisible at once and removed by `sweep_ttl()`). Every batch of puts is one atomic,
    fsynced transaction. Semantic (vector) search is not offered: a `query` is ignored and
    results come in namespace and key order.
    """

    supports_ttl = True

    def __init__(self, db: Any, *, ttl: TTLConfig | None = None, index: Any = None) -> None:
        if index is not None:
            raise CheckpointError("JournalStore has no vector index: leave `index` out (filters still work)")
        self.ttl_config = ttl
        self.db, self._owned = open_tables(db)
        self.table = MemoryTable(
            self.db, default_ttl=(ttl or {}).get("default_ttl"),
            refresh_on_read=(ttl or {}).get("refresh_on_read", True),
        )
        self._sweeper: asyncio.Task[None] | None = None

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                found = self.table.get(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
                results.append(None if found is None else Item(**_fields(found)))
            elif isinstance(op, SearchOp):
                hits = self.table.search(op.namespace_prefix, filter=op.filter, limit=op.limit,
                                         offset=op.offset, refresh_ttl=op.refresh_ttl)
                results.append([SearchItem(**_fields(i)) for i in hits])
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op  # the last put of a key in a batch wins
                results.append(None)
            else:
                raise CheckpointError(f"JournalStore cannot run the operation {op!r}")
        if puts:
            self.table.write(
                (op.namespace, op.key, None if op.value is None else dict(op.value), op.ttl)
                for op in puts.values()
            )
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if any(isinstance(op, PutOp) for op in ops) or getattr(self.db, "blocking", False):
            # Its fsync (LMDB), or every call (PostgreSQL, over the network), stays off the event loop.
            return await asyncio.to_thread(self.batch, ops)
        return self.batch(ops)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = list(op.match_conditions or ())
        for c in conditions:
            if c.match_type not in ("prefix", "suffix"):
                raise CheckpointError(f"unknown namespace match type {c.match_type!r}: use 'prefix' or 'suffix'")
        found = self.table.list_namespaces(
            prefixes=[c.path for c in conditions if c.match_type == "prefix"],
            suffixes=[c.path for c in conditions if c.match_type == "suffix"], max_depth=None, limit=1 << 62)
        if op.max_depth is not None:
            found = sorted({ns[:op.max_depth] for ns in found})
        return found[op.offset:op.offset + op.limit]

    def sweep_ttl(self) -> int:
        """Delete the items whose TTL has passed; how many were deleted."""
        return self.table.sweep()

    async def start_ttl_sweeper(self) -> asyncio.Task[None]:
        """Sweep every `ttl_config["sweep_interval_minutes"]` minutes (default 5) until stopped."""
        interval = ((self.ttl_config or {}).get("sweep_interval_minutes") or 5) * 60

        async def loop() -> None:
            while True:
                await asyncio.to_thread(self.sweep_ttl)
                await asyncio.sleep(interval)

        if self._sweeper is None:
            self._sweeper = asyncio.create_task(loop())
        return self._sweeper

    async def stop_ttl_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None

    def close(self) -> None:
        if self._owned:
            self._owned = False
            self.db.close()

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_ttl_sweeper()
        self.close()


def _fields(item: MemoryItem) -> dict[str, Any]:
    return {"namespace": item.namespace, "key": item.key, "value": item.value,
            "created_at": item.created_at, "updated_at": item.updated_at}
