"""Execution for `journal`: the handler `Context`, the deterministic replayer, the `Engine`
(start, resume, resolve, cancel, recover, serve), retries, leases, and testing helpers.
Handlers import everything they need from here."""

import importlib
import typing

from journal import default_path as default_path

from ._context import Context as Context
from ._engine import Engine as Engine
from ._handlers import check_recorded as check_recorded
from ._handlers import handler_path as handler_path
from ._handlers import is_handler_name as is_handler_name
from ._handlers import load_handler as load_handler
from ._memory import Memory as Memory
from ._memory_table import MemoryArgumentError as MemoryArgumentError
from ._memory_table import MemoryItem as MemoryItem
from ._memory_table import MemoryTable as MemoryTable
from ._outcome import Outcome as Outcome
from ._retry import RetryPolicy as RetryPolicy
from ._step_info import StepInfo as StepInfo
from ._step_info import current_context as current_context
from ._step_info import current_step as current_step
from ._step_info import handler_context as handler_context
from ._steps import idempotency_key as idempotency_key
from ._suspend import pause as pause
from .errors import Cancelled as Cancelled
from .errors import DeterminismViolation as DeterminismViolation
from .errors import HandlerNotFound as HandlerNotFound
from .errors import InvocationBusy as InvocationBusy
from .errors import InvocationConflict as InvocationConflict
from .errors import InvocationNotFound as InvocationNotFound
from .errors import JournalError as JournalError
from .errors import LeaseLost as LeaseLost
from .errors import NondeterminismError as NondeterminismError
from .errors import PromiseConflict as PromiseConflict
from .errors import PromiseNotFound as PromiseNotFound
from .errors import PromiseRejected as PromiseRejected
from .errors import StepTimeout as StepTimeout
from .errors import TerminalError as TerminalError

__all__ = (
    "Cancelled", "Context", "DeterminismViolation", "Engine", "HandlerNotFound", "InvocationBusy", "InvocationConflict",
    "InvocationNotFound", "JournalError", "LeaseLost", "NondeterminismError", "Outcome",
    "Memory", "MemoryArgumentError", "MemoryItem", "MemoryTable",
    "PromiseConflict", "PromiseNotFound", "PromiseRejected", "RetryPolicy", "StepInfo", "StepTimeout", "TerminalError",
    "Chunk", "check_recorded", "current_context", "current_step", "default_path", "handler_context", "handler_path",
    "idempotency_key", "is_handler_name", "load_handler", "pause",
)

# Imported on first use: a process that neither streams nor follows live output needs none of it.
_LAZY = {"Chunk": "journal"}

if typing.TYPE_CHECKING:  # a type checker sees it as an ordinary export
    from journal import Chunk as Chunk


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
