"""What the store keeps about a schedule: its definition and where its firing stands.

A schedule is one record in the store (`Store.schedules`, `Store.schedule`), read by every
worker; the runtime (`runtime/_flow/_schedules/`) decides from it which ticks are due and fires
them with `Store.advance_schedule`, one transaction that starts the ticks' invocations
(idempotent by their ids, `NAME@<tick>`) and moves the schedule on, only if nobody moved it
since it was read (`version`). So a tick is started once however many workers look.
"""

from __future__ import annotations

import hashlib

import msgspec

OVERLAPS = ("skip", "buffer-one", "buffer-all", "cancel-other", "allow-all")
RECENT_KEPT = 10


class Fired(msgspec.Struct, frozen=True, gc=False):
    """One tick that started an invocation: its time (µs) and the invocation's id."""

    at: int
    id: str


class ScheduleRecord(msgspec.Struct, gc=False, kw_only=True):
    name: str
    target: str  # the handler: a NAME a worker was given, or a TARGET path
    cron: str | None = None  # five fields (or an @alias), read in `tz`
    every: float | None = None  # seconds, from `start_at` (or the schedule's creation)
    tz: str = "UTC"
    input: bytes = b"\xc0"  # the input each tick's invocation starts with (msgpack; nil)
    key: str | None = None
    overlap: str = "skip"
    catch_up: float = 60.0  # seconds: missed ticks younger than this still start
    jitter: float = 0.0  # seconds: each tick fires up to this late, the same for every worker
    start_at: int | None = None
    end_at: int | None = None
    priority: int = 0
    limits: list[str] = []
    created_at: int = 0
    paused: bool = False
    note: str | None = None
    # Where firing stands (changed only through `advance_schedule`).
    version: int = 0
    next_tick: int | None = None  # the first tick not yet handled; None: none left (past end_at)
    skipped: int = 0  # ticks not started (missed past the catch-up window, or an overlap skip)
    buffered: list[int] = []  # ticks waiting for the previous tick's run to finish
    last_id: str | None = None  # the most recent tick's invocation
    recent: list[Fired] = []  # the last ticks started, newest first

    def jitter_us(self, tick: int) -> int:
        """How late after `tick` it fires: the same for every worker (a hash of name and tick)."""
        if self.jitter <= 0:
            return 0
        digest = hashlib.blake2b(f"{self.name}@{tick}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % (int(self.jitter * 1_000_000) + 1)

    def due_at(self) -> int | None:
        """When its next tick is due to fire (µs): the tick plus its jitter; None if paused or ended."""
        if self.paused or self.next_tick is None:
            return None
        return self.next_tick + self.jitter_us(self.next_tick)


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(ScheduleRecord)


def encode_schedule(record: ScheduleRecord) -> bytes:
    return _enc.encode(record)


def decode_schedule(data: bytes) -> ScheduleRecord:
    return _dec.decode(data)
