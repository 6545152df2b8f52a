"""`Outcome`: where an invocation stands after the engine ran it (or found it)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from journal import ErrorInfo, InvocationRecord, Status, decode_value, from_us

from .._handler._handlers import _by_path
from .._handler._steps import return_type as _return_type
from ..errors import TerminalError


class Event(msgspec.Struct, kw_only=True):
    """An event a handler published with `ctx.emit`, as `Engine.stream` delivers it."""

    invocation_id: str
    seq: int
    value: Any
    at: int
    cursor: str = ""  # the stream's position after it: `Engine.stream(id, after=)` resumes from there


if TYPE_CHECKING:  # PEP 696: a bare `Outcome` is `Outcome[Any]` (typing.TypeVar has no default before 3.13)
    from typing_extensions import TypeVar as _TypeVar

    T = _TypeVar("T", default=Any)
else:
    T = TypeVar("T")


class Outcome(msgspec.Struct, Generic[T], kw_only=True):
    """`Outcome[T]`: `T` is what the handler returns (`Engine.run` of a handler `-> T`)."""

    id: str
    status: Status
    result: T | None = None
    error: ErrorInfo | None = None
    waiting: str | None = None
    wake_at: datetime.datetime | None = None
    divergence: str | None = None
    continued_as: str | None = None

    @classmethod
    def of(cls, record: InvocationRecord, result_type: Any = Any) -> Outcome[Any]:
        result = None
        if record.status == Status.COMPLETED and record.continued_as is None:
            if result_type is Any:
                result_type = _registered_return_type(record.handler)
            result = decode_value(record.result, result_type)
        wake = None
        if record.wake_at is not None:
            wake = from_us(record.wake_at)
        return cls(
            id=record.id, status=record.status, result=result, error=record.error,
            waiting=record.waiting, wake_at=wake, divergence=record.divergence,
            continued_as=record.continued_as,
        )

    def value(self) -> T:
        """The result of a completed invocation; otherwise raise saying where it stands."""
        if self.status == Status.COMPLETED:
            return self.result  # type: ignore[return-value]  # completed: it holds the handler's T
        if self.error is not None:
            raise TerminalError(f"invocation {self.id!r} {self.status}: {self.error.message}", type_name=self.error.type)
        raise TerminalError(f"invocation {self.id!r} is {self.status}, not completed")


def _registered_return_type(handler: str) -> Any:
    """The handler's return annotation, when the handler is loaded in this process: results are
    then typed the same way whether the invocation ran here just now or finished long ago."""
    fn = _by_path.get(handler)
    return _return_type(fn) if fn is not None else Any
