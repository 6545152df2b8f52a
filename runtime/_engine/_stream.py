"""Following an invocation from any process: its `ctx.emit` events as they are journaled, and
the live output (chunks) of its running steps as it is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from journal import Emitted, Store, decode_entry, decode_value

from ._outcome import Event
from ._position import StreamPosition

if TYPE_CHECKING:
    from journal import Chunk, LiveFeed


async def events(read: Callable[..., Awaitable[Any]], store: Store, invocation_id: str, *,
                 after: int | str | Event | Chunk, poll: float, chunks: bool = True) -> AsyncIterator[Event | Chunk]:
    """`Engine.stream`: each event once and in seq order; follows continuations; ends when the
    logical run finishes. `read` runs a store call (off the loop for a blocking store). With
    `chunks`, the running steps' chunks come as they arrive: a step's before its entry is read,
    and they wake the follower, whose reads of the journal stay one per `poll`. Each item
    carries its `cursor`; `after` (a seq, a cursor, or the last item seen) resumes after it:
    neither an event nor a chunk the follower saw comes again."""
    invocation_id, position = _start(invocation_id, after)
    feed = await _feed(read, store, invocation_id) if chunks else None
    next_read = 0.0
    try:
        while True:
            if feed is not None:
                for chunk in _unseen(feed.take(), position):
                    yield chunk
            if anyio.current_time() >= next_read:
                record = await read(store.require, invocation_id)
                for seq, data in await read(store.entries, invocation_id, position.floor + 1):
                    if position.seen(seq):
                        continue
                    entry = decode_entry(data, invocation_id=invocation_id, seq=seq)
                    position.entry(seq)
                    if isinstance(entry, Emitted):
                        yield Event(invocation_id=invocation_id, seq=seq, value=decode_value(entry.value), at=entry.at,
                                    cursor=position.text())
                if record.finished:
                    if record.continued_as is None:
                        return
                    invocation_id, position = record.continued_as, StreamPosition(floor=0)
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


def _start(invocation_id: str, after: int | str | Event | Chunk) -> tuple[str, StreamPosition]:
    """Where a follower begins: after the item it saw last (in the continuation that item
    came from, if the run went on in one), after a cursor, or after a seq."""
    if isinstance(after, bool):
        raise TypeError("after= takes a seq, a cursor or the last item Engine.stream gave, not a bool")
    if isinstance(after, int):
        return invocation_id, StreamPosition(floor=after)
    if isinstance(after, str):
        return invocation_id, StreamPosition.parse(after, strict=True)
    if not isinstance(after, (Event, _chunk_type())) or not after.cursor:
        raise TypeError(f"after= takes a seq, a cursor or the last item Engine.stream gave, not {after!r}")
    return after.invocation_id, StreamPosition.parse(after.cursor, strict=True)


def _chunk_type() -> type:
    from journal import Chunk

    return Chunk


def _unseen(chunks: list[Chunk], position: StreamPosition) -> Iterator[Chunk]:
    """The chunks the follower has not seen, each with its cursor; its position moves past them."""
    for chunk in chunks:
        if position.chunk_seen(chunk):
            continue
        position.chunks[chunk.seq] = (chunk.epoch, chunk.attempt, chunk.index)
        yield msgspec.structs.replace(chunk, cursor=position.text())


async def _feed(read: Callable[..., Awaitable[Any]], store: Store, invocation_id: str) -> LiveFeed:
    from journal import LiveFeed  # (only a follower of live output imports it)

    feed: LiveFeed = await read(LiveFeed.open, store, invocation_id)
    return feed
