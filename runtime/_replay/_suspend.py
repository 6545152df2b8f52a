"""The internal exceptions that unwind a handler: to wait without a process (`Suspend`), to
start afresh (`ContinueAsNew`), to replay from the top (`Restart`). BaseExceptions, so that a
handler's `except Exception` does not catch them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from journal import PromiseType


class Suspend(BaseException):
    """Internal: unwinds the handler when it must wait (a BaseException so `except Exception` misses it)."""

    def __init__(self, waiting: str | None = None, wake_at: int | None = None, also: tuple[str, ...] = (),
                 types: tuple[PromiseType, ...] = ()) -> None:
        super().__init__(waiting or wake_at)
        self.waiting = waiting  # the promise it waits for
        self.wake_at = wake_at  # the timer that wakes it
        self.also = also  # more promises any of which wakes it (ctx.select over several)
        self.types = types  # what its typed promises accept (`ctx.promise(name, type=T)`)

    def names(self) -> list[str]:
        return ([self.waiting] if self.waiting is not None else []) + list(self.also)


class ContinueAsNew(BaseException):
    """Internal: `ctx.continue_as_new(input)` unwinds the handler to start afresh."""

    def __init__(self, input: Any) -> None:
        super().__init__("continue as new")
        self.input = input


class Restart(BaseException):
    """Internal (always-replay mode): unwind after a live step so the handler replays from the top."""


def pause() -> NoReturn:
    """Suspend the calling invocation waiting on nothing: it keeps its journal, gives its
    lease back, and no worker runs it; it goes on only when something resumes it
    (`journal resume`, `Engine.resume`), replaying to here. For integrations whose own
    framework decides when to go on (a LangGraph `interrupt()` in a durable node)."""
    raise Suspend()
