"""Retry policies for steps."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """How a step that raises an ordinary exception is retried.

    Attempt n (from 1) waits `initial_interval * backoff**(n-1)` seconds, capped at
    `max_interval`, spread by +/- `jitter` (a fraction), before attempt n+1. After
    `max_attempts` attempts, or at once for a `TerminalError` or an exception type in
    `non_retryable`, the step fails for good and the failure is journaled.
    """

    max_attempts: int = 3
    initial_interval: float = 0.1
    backoff: float = 2.0
    max_interval: float = 10.0
    jitter: float = 0.2
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_interval < 0 or self.max_interval < 0:
            raise ValueError("RetryPolicy intervals must not be negative")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based)."""
        base = min(self.initial_interval * self.backoff ** (attempt - 1), self.max_interval)
        if self.jitter:
            base *= 1 + (rng or random).uniform(-self.jitter, self.jitter)
        return max(base, 0.0)

    def retries(self, exc: BaseException, attempt: int) -> bool:
        return attempt < self.max_attempts and not isinstance(exc, self.non_retryable)


DEFAULT_RETRY = RetryPolicy()
