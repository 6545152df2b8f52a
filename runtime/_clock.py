"""Time as the runtime journals it: integer microseconds since the Unix epoch, UTC."""

from __future__ import annotations

import datetime
import time

_UTC = datetime.UTC


def now_us() -> int:
    return time.time_ns() // 1000


def from_us(us: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(us / 1e6, _UTC)
