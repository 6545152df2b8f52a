"""Where a follower of an invocation is in its stream: which entries it has seen, and for each
running step the last chunk. The HTTP events stream gives it as each event's `id:`, and
`Engine.stream` as each item's `cursor`; either resumes from it (`Last-Event-ID`, `?after=`,
`Engine.stream(id, after=)`) with nothing lost and nothing repeated, chunks included."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from journal import Chunk


class StreamPosition:
    """Where a client is in the stream: every entry up to `floor` and those in `above`, and
    for each running step the last chunk it saw, `(epoch, attempt, index)`. Its text (the
    events' `id`) is `FLOOR[.S-S...][~SEQ:EPOCH:ATTEMPT:INDEX,...]`."""

    def __init__(self, floor: int = -1, above: set[int] | None = None,
                 chunks: dict[int, tuple[int, int, int]] | None = None) -> None:
        self.floor = floor
        self.above = above or set()
        self.chunks = chunks or {}

    @classmethod
    def parse(cls, text: str | None, *, strict: bool = False) -> StreamPosition:
        """A client's cursor; one that does not parse starts from the beginning (a browser's
        `Last-Event-ID` is sent back as it was), or with `strict` is refused (`ValueError`)."""
        if not text:
            return cls()
        try:
            head, _, tail = text.partition("~")
            floor, _, rest = head.partition(".")
            above = {int(s) for s in rest.split("-") if s}
            chunks = {}
            for part in filter(None, tail.split(",")):
                seq, epoch, attempt, index = (int(x) for x in part.split(":"))
                chunks[seq] = (epoch, attempt, index)
            return cls(int(floor), above, chunks)
        except ValueError:
            if strict:
                raise ValueError(f"after={text!r} is not a stream position: pass the `cursor` of the last item "
                                 "Engine.stream gave (or the item itself), an events stream's event id, "
                                 "or a seq") from None
            return cls()

    def entry(self, seq: int) -> None:
        self.above.add(seq)
        while self.floor + 1 in self.above:
            self.floor += 1
            self.above.discard(self.floor)
        self.chunks = {s: c for s, c in self.chunks.items() if s > self.floor and s not in self.above}

    def seen(self, seq: int) -> bool:
        return seq <= self.floor or seq in self.above

    def chunk_seen(self, chunk: Chunk) -> bool:
        last = self.chunks.get(chunk.seq)
        if self.seen(chunk.seq):
            return True  # its step's entry was delivered: its output is in the entry
        return last is not None and (chunk.epoch, chunk.attempt, chunk.index) <= last

    def text(self) -> str:
        out = str(self.floor)
        if self.above:
            out += "." + "-".join(map(str, sorted(self.above)))
        if self.chunks:
            out += "~" + ",".join(f"{s}:{e}:{a}:{i}" for s, (e, a, i) in sorted(self.chunks.items()))
        return out
