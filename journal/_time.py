"""Times as the journal stores them: integer microseconds since the epoch, in UTC."""

from __future__ import annotations

import datetime
import time


def from_us(us: int) -> datetime.datetime:
    """The aware UTC datetime of a journal time (microseconds since the epoch)."""
    return datetime.datetime.fromtimestamp(us / 1e6, datetime.UTC)


def iso_from_us(us: int | None) -> str | None:
    """A journal time as ISO 8601 UTC with a `Z` (the shape of every `--json` time), or None."""
    return None if us is None else from_us(us).isoformat().replace("+00:00", "Z")


def now_us() -> int:
    """The current time as the journal stores it."""
    return time.time_ns() // 1000
