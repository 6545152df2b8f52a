"""Following an invocation from any process: its `ctx.emit` events as they are journaled, and
the live output (chunks) of its running steps as it is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from journal import Emitted, Store, decode_entry, decode_value

from ._outcome import Event

if TYPE_CHECKING:
    from journal import Chunk, LiveFeed


async def events(read: Callable[..., Awaitable[Any]], store: Store, invocation_id: str, *, after: int,
                 poll: float, chunks: bool = True) -> AsyncIterator[Event | Chunk]:
    """`Engine.stream`: each event once and in seq order; follows continuations; ends when the
    logical run finishes. `read` runs a store call (off the loop for a blocking store). With
    `chunks`, the running steps' chunks come as they arrive: a step's before its entry is read,
    and they wake the follower, whose reads of the journal stay one per `poll`."""
    feed = await _feed(read, store, invocation_id) if chunks else None
    delivered: set[int] = set()
    floor = after  # every seq up to here was seen
    next_read = 0.0
    try:
        while True:
            if feed is not None:
                for chunk in feed.take():
                    yield chunk
            if anyio.current_time() >= next_read:
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
                    if feed is not None:
                        feed.close()
                        feed = await _feed(read, store, invocation_id)
                    continue
                next_read = anyio.current_time() + poll
            if feed is None:
                await anyio.sleep(poll)
            else:
                await feed.wait_async(next_read - anyio.current_time())
    finally:
        if feed is not None:
            feed.close()


async def _feed(read: Callable[..., Awaitable[Any]], store: Store, invocation_id: str) -> LiveFeed:
    from journal import LiveFeed  # (only a follower of live output imports it)

    feed: LiveFeed = await read(LiveFeed.open, store, invocation_id)
    return feed
