"""Time as the runtime journals it: integer microseconds since the Unix epoch, UTC."""

from __future__ import annotations

import time

from journal import from_us as from_us  # the runtime's clock reads journal times back with it


def now_us() -> int:
    return time.time_ns() // 1000


