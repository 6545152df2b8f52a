"""Test helpers for checkpointers: run LangGraph's conformance suite through the sync API.

LangGraph's published conformance suite (`langgraph-checkpoint-conformance`) calls only
the `a*` methods, but `graph.invoke` and `graph.stream` use `put`, `put_writes`,
`get_tuple`, `list`, ... . `SyncApi(saver)` is a checkpointer whose async methods call
the wrapped saver's sync methods, so the same suite checks the sync API. It needs the
suite itself: `pip install langgraph-checkpoint-conformance==0.0.2`.

```python
import asyncio
from langgraph.checkpoint.conformance import checkpointer_test, validate
from journal import MemoryStore
from runtime.langgraph import JournalSaver
from runtime.langgraph.testing import SyncApi

@checkpointer_test(name="JournalSaver (sync API)")
async def saver():
    with JournalSaver(MemoryStore()) as inner:
        yield SyncApi(inner)

report = asyncio.run(validate(saver))
assert report.passed_all_base()
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ("SyncApi",)

V = TypeVar("V", int, float, str)  # a checkpointer's channel version type, as LangGraph's


class SyncApi(BaseCheckpointSaver[V]):
    """A checkpointer whose `a*` methods call `inner`'s sync methods (and nothing else)."""

    def __init__(self, inner: BaseCheckpointSaver[V]) -> None:
        super().__init__(serde=inner.serde)
        self.inner: BaseCheckpointSaver[V] = inner

    async def aget_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    async def alist(self, config: Any, *, filter: Any = None, before: Any = None,
                    limit: int | None = None) -> AsyncIterator[Any]:
        for item in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: V | None, channel: None = None) -> V:
        return self.inner.get_next_version(current, channel)
