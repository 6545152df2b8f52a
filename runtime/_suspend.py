"""The internal exception that unwinds a handler so its invocation can wait without a process."""

from __future__ import annotations


class Suspend(BaseException):
    """Internal: unwinds the handler when it must wait (a BaseException so `except Exception` misses it)."""

    def __init__(self, waiting: str | None = None, wake_at: int | None = None, also: tuple[str, ...] = ()) -> None:
        super().__init__(waiting or wake_at)
        self.waiting = waiting  # the promise it waits for
        self.wake_at = wake_at  # the timer that wakes it
        self.also = also  # more promises any of which wakes it (ctx.select over several)

    def names(self) -> list[str]:
        return ([self.waiting] if self.waiting is not None else []) + list(self.also)
