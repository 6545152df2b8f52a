"""Live output: chunks a running step streams to whoever follows its invocation.

A chunk (`runtime.current_step().emit(...)`: an LLM's tokens, a progress line) is not part
of the journal. It is never fsynced, never an entry, and never replayed: the step's result
is what the journal keeps. It travels from the process running the step to followers in
any process through the store's `LiveChannel`:

- LMDB (`backends/lmdb/_live.py`): a second LMDB environment beside the journal (`live/` in the
  store directory), written without ever being synced, holding the chunks of running steps
  only (a step's are removed once it commits), so a follower that arrives late still sees
  the step's output so far; followers are woken by a datagram, not by polling;
- PostgreSQL (`backends/postgres/_live.py`): `NOTIFY` with the chunks as payload, on a
  channel per invocation that followers `LISTEN` to, and the running steps' chunks kept in an
  unlogged table, which a follower reads once it listens, so that it too sees the output so
  far;
- memory: handed over inside the process.

Each chunk carries where it comes from: the step's seq, the lease epoch of the execution
that ran it (a new one after a crash), the step's attempt, and its index in that attempt.
`LiveFeed` turns what a follower receives into `Chunk`s, each once and in order, and drops
what an earlier attempt or execution of a step sends after a later one has begun.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

if TYPE_CHECKING:
    from ._store import Store

# A chunk longer than this travels as several (PostgreSQL's NOTIFY payload is under 8000 bytes).
MAX_CHUNK_BYTES = 4096
# What the LMDB buffer keeps of one running step: a follower that falls further behind loses the oldest.
MAX_STEP_BYTES = 1 << 20
# How long the sender waits, once woken, for more chunks to send in the same batch.
_LINGER = 0.0005
# How long a committed step's chunks stay for followers still reading them (they read a step's
# chunks before its entry, so one that has seen the entry needs them no more).
KEEP_AFTER_COMMIT = 5.0


class Chunk(msgspec.Struct, kw_only=True, frozen=True):
    """Live output of a running step, as `Engine.stream` delivers it.

    `seq` is the step's seq, `attempt` its attempt (1, 2, ... as `current_step().attempt`),
    `data` the text or bytes emitted, and `index` its place in the attempt's stream: a chunk
    with `index` 0 starts the step's output over (another attempt, or the step run again
    after a crash), so a follower drops what it showed of that step before."""

    invocation_id: str
    seq: int
    attempt: int
    data: str | bytes
    index: int
    epoch: int = 0  # the lease epoch of the execution that ran it (a later one replaces it)
    cursor: str = ""  # `Engine.stream`'s position after it: `after=` resumes from there


class Sent(msgspec.Struct, frozen=True, gc=False):
    """One chunk on its way: what `LiveChannel.publish` takes and `LiveFollower.read` returns.
    (Not tracked by the garbage collector: a step streaming tokens makes one per token.)"""

    invocation_id: str
    seq: int
    epoch: int
    attempt: int
    number: int  # its place in the attempt's stream, from 0
    data: str | bytes


class Ended(msgspec.Struct, frozen=True, gc=False):
    """Step `seq` of the invocation committed: what a channel kept of its output may go."""

    invocation_id: str
    seq: int


class LiveFollower(Protocol):
    """What one follower of one invocation receives."""

    bell: socket.socket
    """Readable when chunks may have arrived: wait on it (`select`, `anyio.wait_readable`)."""

    def read(self) -> list[Sent]:
        """The chunks that arrived since the last read, in the order they were sent. Never blocks."""
        ...

    def close(self) -> None: ...


class LiveChannel(Protocol):
    """A store's live output, for the process that runs steps and for the ones that follow them."""

    def publish(self, chunk: Sent) -> None:
        """Send `chunk` soon, from any thread; never blocks (it is written by a thread of the channel's)."""
        ...

    def flush(self) -> None:
        """Block until every chunk published so far has been sent."""
        ...

    def end_step(self, invocation_id: str, seq: int) -> None:
        """The step committed: what the channel kept of its output may go."""
        ...

    def follow(self, invocation_id: str) -> LiveFollower:
        """Start receiving the invocation's chunks (with what is kept of its running steps, where kept)."""
        ...

    def close(self) -> None: ...


class Bell:
    """A socket pair: `ring` from any thread makes `bell` readable until `drain`."""

    def __init__(self) -> None:
        self.bell, self._ringer = socket.socketpair()
        self.bell.setblocking(False)
        self._ringer.setblocking(False)

    def ring(self) -> None:
        try:
            self._ringer.send(b"\x01")
        except (BlockingIOError, OSError):  # full: it is readable already; closed: nobody listens
            pass

    def close(self) -> None:
        self.bell.close()
        self._ringer.close()


def drain(sock: socket.socket) -> None:
    """Read what woke `sock`'s reader, so the next wait waits."""
    try:
        while sock.recv(4096):
            pass
    except (BlockingIOError, InterruptedError, OSError):
        pass


class Sender:
    """The sending half every channel shares: chunks queue up in memory and a thread of the
    channel's writes them out in batches, so `publish` costs a step about a microsecond and
    no write ever blocks the event loop. `flush` writes what is queued from the caller's thread."""

    def __init__(self, write: Callable[[list[Sent | Ended]], None], name: str,
                 due: Callable[[], float | None] | None = None) -> None:
        self._write = write  # a batch of chunks and of the ends of steps, in the order they came
        self._due = due  # seconds until the channel has work of its own (an empty batch), if it has
        self._queue: deque[Sent | Ended] = deque()
        self._wake = threading.Event()
        self._writing = threading.Lock()  # batches go out one at a time and in order
        self._closed = False
        self._name = name
        self._thread: threading.Thread | None = None

    def put(self, item: Sent | Ended) -> None:
        self._queue.append(item)
        if not self._wake.is_set():
            if self._thread is None:
                self._start()
            self._wake.set()

    def _start(self) -> None:
        with self._writing:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            due = self._due() if self._due is not None else None
            woken = self._wake.wait(due)
            if woken and not self._closed:
                # Let the chunks of the next moment join this batch: a step streaming tokens then
                # wakes this thread (and sets the event) once a batch rather than once a chunk.
                time.sleep(_LINGER)
            self._wake.clear()
            if self._closed:
                return
            self.flush(due is not None)

    def flush(self, empty: bool = False) -> None:
        """Write what is queued (with `empty`, even nothing: the channel's own work is due)."""
        with self._writing:
            if not self._queue and not empty:
                return
            batch = []
            while self._queue:
                batch.append(self._queue.popleft())
            try:
                self._write(batch)
            except Exception:  # noqa: BLE001 - live output is best effort: a failed batch is dropped
                pass

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class LiveFeed:
    """What the followers of an invocation (`Engine.stream`, the HTTP events stream,
    `journal tail -f`) share: the chunks a `LiveFollower` receives as `Chunk`s, each once and
    in order, without those of an attempt or execution that a later one has replaced."""

    def __init__(self, follower: LiveFollower, invocation_id: str) -> None:
        self._follower = follower
        self.invocation_id = invocation_id
        self.bell = follower.bell
        # seq -> (epoch, attempt) of the stream being followed, and the next index expected
        self._streams: dict[int, tuple[int, int, int]] = {}

    @classmethod
    def open(cls, store: Store, invocation_id: str) -> LiveFeed:
        return cls(store.live().follow(invocation_id), invocation_id)

    def take(self) -> list[Chunk]:
        """The chunks that arrived since the last call, in order. Never blocks."""
        drain(self.bell)
        out: list[Chunk] = []
        streams = self._streams
        for sent in self._follower.read():
            current = streams.get(sent.seq)
            if current is not None:
                epoch, attempt, expected = current
                if (sent.epoch, sent.attempt) < (epoch, attempt):
                    continue  # an earlier attempt or execution, already replaced
                if (sent.epoch, sent.attempt) == (epoch, attempt) and sent.number < expected:
                    continue  # seen already
            streams[sent.seq] = (sent.epoch, sent.attempt, sent.number + 1)
            out.append(Chunk(invocation_id=sent.invocation_id, seq=sent.seq, attempt=sent.attempt, data=sent.data,
                             index=sent.number, epoch=sent.epoch))
        return out

    def wait(self, timeout: float) -> None:
        """Block until chunks may have arrived or `timeout` seconds pass."""
        try:
            select.select([self.bell], [], [], max(timeout, 0.0))
        except (OSError, ValueError):  # closed meanwhile
            pass

    async def wait_async(self, timeout: float) -> None:
        """`wait` for async code: the event loop waits on the bell."""
        import anyio  # (followers that never wait asynchronously, `journal tail`, import no event loop)

        with anyio.move_on_after(timeout):
            await anyio.wait_readable(self.bell)

    def close(self) -> None:
        self._follower.close()


def pack(chunk: Sent) -> bytes:
    """A chunk's bytes in a store: a header then its data (text as UTF-8)."""
    text = isinstance(chunk.data, str)
    data = chunk.data.encode() if isinstance(chunk.data, str) else chunk.data
    return (b"s" if text else b"b") + _HEADER.pack(chunk.seq, chunk.epoch, chunk.attempt, chunk.number) + data


def unpack(raw: bytes, invocation_id: str) -> Sent:
    seq, epoch, attempt, number = _HEADER.unpack_from(raw, 1)
    data = raw[1 + _HEADER.size:]
    return Sent(invocation_id, seq, epoch, attempt, number,
                data.decode(errors="replace") if raw[:1] == b"s" else bytes(data))


_HEADER = struct.Struct(">IIII")  # seq, epoch, attempt, number


class MemoryChannel:
    """Live output inside one process (`MemoryStore`): handed from the sender to each follower."""

    def __init__(self) -> None:
        self._followers: dict[str, set[_MemoryFollower]] = {}
        self._lock = threading.Lock()

    def publish(self, chunk: Sent) -> None:
        followers = self._followers.get(chunk.invocation_id)
        if followers:
            with self._lock:
                for follower in followers:
                    follower.queue.append(chunk)
                    follower.bells.ring()

    def flush(self) -> None:
        pass

    def end_step(self, invocation_id: str, seq: int) -> None:
        pass

    def follow(self, invocation_id: str) -> LiveFollower:
        follower = _MemoryFollower(self, invocation_id)
        with self._lock:
            self._followers.setdefault(invocation_id, set()).add(follower)
        return follower

    def _forget(self, follower: _MemoryFollower) -> None:
        with self._lock:
            followers = self._followers.get(follower.invocation_id)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._followers[follower.invocation_id]

    def close(self) -> None:
        pass


class _MemoryFollower:
    def __init__(self, channel: MemoryChannel, invocation_id: str) -> None:
        self._channel = channel
        self.invocation_id = invocation_id
        self.queue: deque[Sent] = deque()
        self.bells = Bell()
        self.bell = self.bells.bell

    def read(self) -> list[Sent]:
        out = []
        while self.queue:
            out.append(self.queue.popleft())
        return out

    def close(self) -> None:
        self._channel._forget(self)
        self.bells.close()
