"""Wait for whichever of several waits ends first (a worker's idle wait against its last run ending)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio


async def first_of(*waits: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Wait until the first of `waits` returns; cancel the others."""
    async with anyio.create_task_group() as tg:

        async def one(wait: Callable[[], Coroutine[Any, Any, Any]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(one, wait)
