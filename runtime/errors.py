"""Errors a handler or its caller meets while running, under `journal.errors.JournalError`.

::

    JournalError (journal.errors)
    ├── TerminalError          fail a step or the invocation for good: journaled, never retried
    │   ├── PromiseRejected    `ctx.promise` was rejected from outside
    │   └── StepTimeout        a step ran past its `timeout=`
    ├── NondeterminismError    replay met a call the journal did not record; the invocation is parked
    │   └── DeterminismViolation   the determinism guard caught handler code reading the clock or an
    │                              unseeded random source outside `ctx.run`
    ├── Cancelled              `cancel` reached the handler at its next context call
    ├── RateLimited            a provider pushed back: the step's limits pause (runtime/_flow/_limits/)
    ├── LeaseLost, InvocationBusy, InvocationNotFound, InvocationConflict, KeyBusy, PromiseConflict,
    │   PromiseNotFound, PromiseValueRefused, MessageRefused, MessageValueRefused,
    │   MessageNotFound, ValueNotPublished   (defined in journal.errors, re-exported here)
    ├── PromiseNotSettable     a `child:` promise is settled by the child's result, never by hand
    ├── RollbackImpossible     `cancel --rollback` lacks the values before some state changes
    ├── NotResumable           a finished invocation has nothing left to resume
    └── HandlerNotFound        a handler path names no importable async function
"""

from __future__ import annotations

from journal.errors import (
    InvocationBusy as InvocationBusy,
)
from journal.errors import (
    InvocationConflict as InvocationConflict,
)
from journal.errors import (
    InvocationNotFound as InvocationNotFound,
)
from journal.errors import (
    JournalError as JournalError,
)
from journal.errors import (
    KeyBusy as KeyBusy,
)
from journal.errors import (
    LeaseLost as LeaseLost,
)
from journal.errors import MessageNotFound as MessageNotFound
from journal.errors import MessageRefused as MessageRefused
from journal.errors import MessageValueRefused as MessageValueRefused
from journal.errors import (
    PromiseConflict as PromiseConflict,
)
from journal.errors import (
    PromiseNotFound as PromiseNotFound,
)
from journal.errors import (
    PromiseValueRefused as PromiseValueRefused,
)
from journal.errors import ValueNotPublished as ValueNotPublished


class TerminalError(JournalError):
    """Raise from a step or a handler to fail it without retries.

    A step that raises it is journaled as failed, so replay raises it again without running
    the step. `type_name` keeps the name of the original exception when the runtime
    converts an exhausted retry into a terminal failure.
    """

    def __init__(self, message: str = "", *, type_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.type_name = type_name or type(self).__name__


class PromiseRejected(TerminalError):
    """A promise the handler awaited was rejected (`journal resolve ID NAME --reject MSG`)."""

    reason: str | None = None  # the MSG the rejection gave, where known


class StepTimeout(TerminalError):
    """A step or promise did not finish within its timeout."""


class NondeterminismError(JournalError):
    """The handler asked for something other than what its journal recorded at this seq."""

    def __init__(self, message: str, *, invocation_id: str, seq: int) -> None:
        super().__init__(message)
        self.invocation_id = invocation_id
        self.seq: int | None = seq  # None in a DeterminismViolation


class DeterminismViolation(NondeterminismError):
    """Handler code called `time.time`, `datetime.now`, `random.*`, `uuid.uuid4` or `os.urandom`
    outside `ctx.run` while the determinism guard was on (`runtime.testing.determinism_guard`).

    The message names the call, where it was made and the `ctx` equivalent. `call` is the
    function called; `seq` is None (the violation is not tied to a journal entry).
    """

    def __init__(self, message: str, *, invocation_id: str, call: str) -> None:
        JournalError.__init__(self, message)
        self.invocation_id = invocation_id
        self.seq = None
        self.call = call


class PromiseNotSettable(JournalError, ValueError):
    """The promise is settled by the runtime, not by hand (a `child:` promise of `ctx.call`)."""


class RollbackImpossible(JournalError, ValueError):
    """`cancel --rollback` cannot restore the state: the journal lacks the values before some changes."""


class NotResumable(JournalError, ValueError):
    """The invocation has finished: resuming it would run nothing (`journal retry` or `journal
    fork` start a new invocation from its journal instead)."""


class Cancelled(JournalError):
    """The invocation was cancelled. Catch it to run compensating steps; it still ends `cancelled`."""


class HandlerNotFound(JournalError, ValueError):
    """A handler path (`file.py:function` or `package.module:function`) does not name an async function."""
