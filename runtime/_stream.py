"""Following an invocation's `ctx.emit` events as they are journaled, from any process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from journal import Emitted, Store, decode_entry, decode_value

from ._outcome import Event


async def events(read: Callable[..., Awaitable[Any]], store: Store, invocation_id: str, *, after: int,
                 poll: float) -> AsyncIterator[Event]:
    """`Engine.stream`: each event once and in seq order; follows continuations; ends when the
    logical run finishes. `read` runs a store call (off the loop for a blocking store)."""
    delivered: set[int] = set()
    floor = after  # every seq up to here was seen
    while True:
        record = await read(store.require, invocation_id)
        for seq, data in await read(store.entries, invocation_id, floor + 1):
            if seq in delivered:
                continue
            entry = decode_entry(data, invocation_id=invocation_id, seq=seq)
            if isinstance(entry, Emitted):
                yield Event(invocation_id=invocation_id, seq=seq, value=decode_value(entry.value), at=entry.at)
            delivered.add(seq)
            while floor + 1 in delivered:
                floor += 1
        if record.finished:
            if record.continued_as is None:
                return
            invocation_id, delivered, floor = record.continued_as, set(), 0
            continue
        await anyio.sleep(poll)
