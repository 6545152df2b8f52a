"""Execution for `journal`: the handler `Context`, the deterministic replayer, the `Engine`
(start, resume, resolve, cancel, recover, serve), retries, leases, and testing helpers.
Handlers import everything they need from here."""

import importlib
import typing

__all__ = (
    "Cancelled", "Context", "DeterminismViolation", "Engine", "HandlerNotFound", "InvocationBusy", "InvocationConflict",
    "InvocationNotFound", "JournalError", "KeyBusy", "LeaseLost", "NondeterminismError", "Outcome",
    "Memory", "MemoryArgumentError", "MemoryItem", "MemoryTable",
    "PromiseConflict", "PromiseNotFound", "PromiseRejected", "RateLimited", "RetryPolicy", "StepInfo", "StepTimeout", "TerminalError",
    "Chunk", "check_recorded", "current_context", "current_step", "default_path", "handler_context", "handler_path",
    "idempotency_key", "is_handler_name", "load_handler", "pause",
    "Message", "Reply", "Value", "MessageNotFound", "MessageRefused", "MessageValueRefused", "ValueNotPublished",
    "StreamPosition",
)

# Every export is imported on first use, so `import runtime` (which `import runtime.langgraph`,
# `runtime.testing` and each integration begin with) costs nothing until a name is needed:
# a process that only opens a LangGraph checkpointer never imports the engine, anyio or asyncio.
_LAZY: dict[str, str] = {
    "Chunk": "journal", "default_path": "journal", "Context": "._handler._context", "Engine": "._engine._engine",
    "check_recorded": "._handler._handlers", "handler_path": "._handler._handlers",
    "is_handler_name": "._handler._handlers", "load_handler": "._handler._handlers",
    "Memory": "._handler._memory", "MemoryArgumentError": "._handler._memory_table",
    "MemoryItem": "._handler._memory_table", "MemoryTable": "._handler._memory_table",
    "Outcome": "._engine._outcome", "RetryPolicy": "._handler._retry",
    "StepInfo": "._base._step_info", "current_context": "._base._step_info", "current_step": "._base._step_info",
    "handler_context": "._base._step_info", "idempotency_key": "._handler._steps", "pause": "._replay._suspend",
    "RateLimited": "._flow._limits",
    "Message": "._handler._talk", "Reply": "._messaging._asking", "Value": "._messaging._asking",
    "StreamPosition": "._engine._position",
}
_LAZY.update(dict.fromkeys((
    "Cancelled", "DeterminismViolation", "HandlerNotFound", "InvocationBusy", "InvocationConflict",
    "InvocationNotFound", "JournalError", "KeyBusy", "LeaseLost", "NondeterminismError", "PromiseConflict",
    "PromiseNotFound",
    "PromiseRejected", "StepTimeout", "TerminalError",
    "MessageNotFound", "MessageRefused", "MessageValueRefused", "ValueNotPublished",
), ".errors"))

if typing.TYPE_CHECKING:  # a type checker sees them as ordinary exports
    from journal import Chunk as Chunk
    from journal import default_path as default_path

    from ._base._step_info import StepInfo as StepInfo
    from ._base._step_info import current_context as current_context
    from ._base._step_info import current_step as current_step
    from ._base._step_info import handler_context as handler_context
    from ._engine._engine import Engine as Engine
    from ._engine._outcome import Outcome as Outcome
    from ._engine._position import StreamPosition as StreamPosition
    from ._flow._limits import RateLimited as RateLimited
    from ._handler._context import Context as Context
    from ._handler._handlers import check_recorded as check_recorded
    from ._handler._handlers import handler_path as handler_path
    from ._handler._handlers import is_handler_name as is_handler_name
    from ._handler._handlers import load_handler as load_handler
    from ._handler._memory import Memory as Memory
    from ._handler._memory_table import MemoryArgumentError as MemoryArgumentError
    from ._handler._memory_table import MemoryItem as MemoryItem
    from ._handler._memory_table import MemoryTable as MemoryTable
    from ._handler._retry import RetryPolicy as RetryPolicy
    from ._handler._steps import idempotency_key as idempotency_key
    from ._handler._talk import Message as Message
    from ._messaging._asking import Reply as Reply
    from ._messaging._asking import Value as Value
    from ._replay._suspend import pause as pause
    from .errors import Cancelled as Cancelled
    from .errors import DeterminismViolation as DeterminismViolation
    from .errors import HandlerNotFound as HandlerNotFound
    from .errors import InvocationBusy as InvocationBusy
    from .errors import InvocationConflict as InvocationConflict
    from .errors import InvocationNotFound as InvocationNotFound
    from .errors import JournalError as JournalError
    from .errors import KeyBusy as KeyBusy
    from .errors import LeaseLost as LeaseLost
    from .errors import NondeterminismError as NondeterminismError
    from .errors import PromiseConflict as PromiseConflict
    from .errors import PromiseNotFound as PromiseNotFound
    from .errors import PromiseRejected as PromiseRejected
    from .errors import StepTimeout as StepTimeout
    from .errors import TerminalError as TerminalError


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
