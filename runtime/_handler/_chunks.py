"""Live output of one execution's steps: what `current_step().emit(chunk)` sends.

A chunk goes to the store's live channel (`journal/_live.py`), never to the journal. Before
a step that emitted commits, what it sent is flushed, so a follower sees a step's chunks
before its entry; once it committed, the channel may let them go. A replayed step runs
nothing and so emits nothing."""

from __future__ import annotations

from journal import MAX_CHUNK_BYTES, LiveChannel, Sent, Store

_SAFE = MAX_CHUNK_BYTES // 4  # a chunk this long fits whatever its characters


def _text_or_bytes(data: object) -> str | bytes:
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(
        f"current_step().emit() sends text or bytes, got {type(data).__name__}; "
        "send str(...) or encode it (ctx.emit journals other values)"
    )


class Emitter:
    """The live output of the steps of one execution (one lease `epoch`) of an invocation."""

    __slots__ = ("_channel", "_epoch", "_id", "_numbers", "_publish", "streaming")

    def __init__(self, store: Store, invocation_id: str, epoch: int) -> None:
        self._channel: LiveChannel = store.live()
        self._publish = self._channel.publish
        self._id = invocation_id
        self._epoch = epoch
        self._numbers: dict[int, int] = {}  # (seq << 24 | attempt) -> next chunk number
        self.streaming: set[int] = set()  # seqs of running steps that emitted

    def emit(self, seq: int, attempt: int, given: object) -> None:
        data = given if given.__class__ is str or given.__class__ is bytes else _text_or_bytes(given)
        stream = seq << 24 | attempt  # (an int: a step streaming tokens makes no tuple a token)
        number = self._numbers.get(stream, 0)
        if len(data) <= _SAFE or len(data) * (4 if isinstance(data, str) else 1) <= MAX_CHUNK_BYTES:
            self._publish(Sent(self._id, seq, self._epoch, attempt, number, data))
            self._numbers[stream] = number + 1
        else:  # in pieces that fit (4 bytes at most per character of text)
            step = MAX_CHUNK_BYTES // 4 if isinstance(data, str) else MAX_CHUNK_BYTES
            for start in range(0, len(data), step):
                self._publish(Sent(self._id, seq, self._epoch, attempt, number, data[start:start + step]))
                number += 1
            self._numbers[stream] = number
        self.streaming.add(seq)

    def flush(self) -> None:
        """Send what the steps emitted so far (blocks: call it off the loop for a blocking store)."""
        self._channel.flush()

    def ended(self, seq: int) -> None:
        """Step `seq` committed: its output may go."""
        self.streaming.discard(seq)
        for stream in [s for s in list(self._numbers) if s >> 24 == seq]:  # (list: one C call, while a thread may add)
            del self._numbers[stream]
        self._channel.end_step(self._id, seq)
