"""Execution for `journal`: the handler `Context`, the deterministic replayer, the `Engine`
(start, resume, resolve, cancel, recover, serve), retries, leases, and testing helpers.
Handlers import everything they need from here."""

from journal import default_path as default_path

from ._context import Context as Context
from ._engine import Engine as Engine
from ._handlers import check_recorded as check_recorded
from ._handlers import handler_path as handler_path
from ._handlers import load_handler as load_handler
from ._memory import Memory as Memory
from ._memory_table import MemoryArgumentError as MemoryArgumentError
from ._memory_table import MemoryItem as MemoryItem
from ._memory_table import MemoryTable as MemoryTable
from ._outcome import Outcome as Outcome
from ._retry import RetryPolicy as RetryPolicy
from ._step_info import StepInfo as StepInfo
from ._step_info import current_step as current_step
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
from .errors import PromiseRejected as PromiseRejected
from .errors import StepTimeout as StepTimeout
from .errors import TerminalError as TerminalError

__all__ = (
    "Cancelled", "Context", "DeterminismViolation", "Engine", "HandlerNotFound", "InvocationBusy", "InvocationConflict",
    "InvocationNotFound", "JournalError", "LeaseLost", "NondeterminismError", "Outcome",
    "Memory", "MemoryArgumentError", "MemoryItem", "MemoryTable",
    "PromiseConflict", "PromiseRejected", "RetryPolicy", "StepInfo", "StepTimeout", "TerminalError",
    "check_recorded", "current_step", "default_path", "handler_path", "idempotency_key", "load_handler", "pause",
)
