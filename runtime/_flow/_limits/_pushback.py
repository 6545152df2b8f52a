"""Push-back from a provider: how long an exception says to wait before asking again.

`RateLimited(retry_after=S)` says it outright. Otherwise an exception carrying an HTTP 429
answer (httpx's `HTTPStatusError`, the `openai` and `anthropic` SDKs' `RateLimitError`, anything
with a `.response` whose `status_code` is 429, or a cause that is one) says it in its headers:
`retry-after-ms`, `Retry-After` (seconds or an HTTP date), OpenAI's `x-ratelimit-reset-requests`
and `-tokens` (`1s`, `6m0s`, `20ms`) or Anthropic's `anthropic-ratelimit-*-reset` (a time).
"""

from __future__ import annotations

import datetime
import email.utils
import re
import time
from typing import Any

from ...errors import JournalError

# A 429 that says nothing about when: wait this long before asking again.
DEFAULT_PUSHBACK = 1.0
# Never pause a limit longer than this on a provider's word (a bad header must not stop a fleet for a day).
LONGEST_PUSHBACK = 600.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class RateLimited(JournalError):
    """Raise from a step under a limit when a provider pushed back: the step's limits pause
    for every process until `retry_after` seconds from now, and the step runs again then,
    without using up an attempt of its `RetryPolicy`."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message or "the provider asked to slow down")
        self.retry_after = retry_after


def _seconds(value: str, now: float) -> float | None:
    value = value.strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
        return sum(float(n) * _UNIT[u] for n, u in parts)
    try:  # an HTTP date, or an RFC 3339 time (Anthropic)
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        try:
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp() - now


def _header(headers: Any, name: str) -> str | None:
    try:
        found = headers.get(name)
    except Exception:  # headers of an unknown shape say nothing
        return None
    return found if isinstance(found, str) else None


def _from_response(response: Any) -> float | None:
    if getattr(response, "status_code", None) != 429:
        return None
    headers = getattr(response, "headers", None)
    now = time.time()
    waits: list[float] = []
    millis = _header(headers, "retry-after-ms")  # the most precise word, when a server gives it
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    for name in ("retry-after", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
                 "anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset",
                 "anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-output-tokens-reset"):
        text = _header(headers, name)
        if text is not None:
            seconds = _seconds(text, now)
            if seconds is not None:
                waits.append(seconds)
                if name == "retry-after":
                    break  # the server's own word wins over its counters
    return max(waits) if waits else DEFAULT_PUSHBACK


def pushback(exc: BaseException) -> float | None:
    """Seconds a provider asked to wait, if `exc` (or what caused it) is its push-back; else None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, RateLimited):
            wait = exc.retry_after if exc.retry_after is not None else DEFAULT_PUSHBACK
            return min(max(wait, 0.0), LONGEST_PUSHBACK)
        found = _from_response(getattr(exc, "response", None))
        if found is not None:
            return min(max(found, 0.0), LONGEST_PUSHBACK)
        nxt = exc.__cause__ or exc.__context__
        exc, seen = nxt, seen + 1  # type: ignore[assignment]
    return None
