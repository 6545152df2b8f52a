"""The internal exception that unwinds a handler so its invocation can wait without a process."""

from __future__ import annotations


class Suspend(BaseException):
    """Internal: unwinds the handler when it must wait (a BaseException so `except Exception` misses it)."""

    def __init__(self, waiting: str | None = None, wake_at: int | None = None) -> None:
        super().__init__(waiting or wake_at)
        self.waiting = waiting
        self.wake_at = wake_at
