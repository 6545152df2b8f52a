"""Every error `journal` raises, under one root.

::

    JournalError
    ├── StoreError                 the store itself cannot do what was asked
    │   ├── FormatVersionError     the store was written by an unknown format version
    │   ├── InvalidId              an invocation id is empty, too long or has control characters
    │   ├── EntryTooLarge          an entry or value exceeds the configured bound
    │   ├── CorruptEntry           stored bytes do not decode (names invocation and seq)
    │   ├── StoreBusy              `journal compact` holds the store (or others block it)
    │   ├── StoreUnavailable       the store's server could not be reached for as long as the caller waits
    │   └── DiskFull               the disk has no room; nothing committed was lost
    ├── LeaseLost                  another process took the invocation over (fencing)
    ├── InvocationBusy             a live process owns the invocation right now
    ├── InvocationNotFound         no invocation has that id
    │   └── AmbiguousId            several invocations' ids start with the prefix given for one
    ├── InvocationConflict         the id exists with a different input
    ├── KeyBusy                    a start with if_busy="reject" found its key's thread busy
    ├── PromiseConflict            the promise was already resolved with another value
    ├── PromiseNotFound            the invocation neither waits on nor has recorded that promise
    ├── PromiseValueRefused        the value does not fit the type the promise is awaited with
    │   └── MessageValueRefused    ... or the type the handler receives the message's topic with
    ├── MessageRefused             the invocation is finished: it takes no more messages
    ├── MessageNotFound            no message with that id was sent to the invocation
    ├── ValueNotPublished          the invocation published no value under that name
    └── (runtime.errors adds TerminalError, NondeterminismError, PromiseRejected, Cancelled)

Each message says what happened, where, and what to do next.
"""

from __future__ import annotations


class JournalError(Exception):
    """Root of every error raised by `journal` and `runtime`."""


class StoreError(JournalError):
    """The store cannot carry out an operation."""


class FormatVersionError(StoreError):
    """The store on disk was written in a format this version does not know."""


class InvalidId(StoreError, ValueError):
    """An invocation id (or key, or promise name) is not acceptable."""


class EntryTooLarge(StoreError, ValueError):
    """An entry or value is larger than the store accepts."""


class CorruptEntry(StoreError):
    """Bytes in the store do not decode as what they should be."""

    def __init__(self, message: str, *, invocation_id: str | None = None, seq: int | None = None):
        super().__init__(message)
        self.invocation_id = invocation_id
        self.seq = seq


class StoreBusy(StoreError):
    """The store is being compacted, or is open elsewhere when compacting needs it alone."""


class StoreUnavailable(StoreError):
    """The store's server could not be reached, however often it was tried, for as long as the
    caller waits (`PostgresStore(reconnect_for=...)`). An operation whose answer was lost
    with its connection may have been done: doing it again is safe (appends, resolves and
    claims are idempotent or re-read), and `journal show` tells."""


class DiskFull(StoreError, OSError):
    """The disk holding the store is full."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()  # the message, without OSError's "[Errno 28]"


class LeaseLost(JournalError):
    """This process no longer owns the invocation: another one took it over."""


class InvocationBusy(JournalError):
    """Another live process owns the invocation's lease."""


class InvocationNotFound(JournalError, LookupError):
    """No invocation has the given id."""


class AmbiguousId(InvocationNotFound, ValueError):
    """A prefix given for an invocation id (`journal.expand_id`) starts several ids; the
    message lists them, and `matches` holds them (the first ones, if there are many)."""

    def __init__(self, message: str, matches: list[str]) -> None:
        super().__init__(message)
        self.matches = matches


class InvocationConflict(JournalError):
    """An invocation with this id exists and was started with a different input."""


class KeyBusy(JournalError):
    """A start asked to be refused while its key has an unfinished turn (`if_busy="reject"`):
    `busy` names those turns, oldest first."""

    def __init__(self, message: str, *, key: str = "", busy: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.key = key
        self.busy = busy


class PromiseConflict(JournalError):
    """A promise was already resolved (or rejected) with a different outcome."""


class PromiseNotFound(JournalError, LookupError):
    """The invocation neither waits on nor has recorded the promise: most often a typo in its
    name. `Engine.resolve(..., early=True)` (`journal resolve --early`) delivers it ahead."""


class PromiseValueRefused(JournalError, ValueError):
    """The value does not fit the type the invocation awaits the promise with
    (`ctx.promise(name, type=T)`): nothing was delivered, and the promise stays pending."""


class MessageValueRefused(PromiseValueRefused):
    """The message's value does not fit the type the handler receives its topic with
    (`ctx.receive(topic, type=T)`): nothing was delivered, and the run goes on."""


class MessageRefused(JournalError):
    """The invocation is finished (completed, failed or cancelled): a message sent to it
    could never be received, so it is refused rather than kept."""


class MessageNotFound(JournalError, LookupError):
    """No message with that id was sent to the invocation (a reply is asked for by the id
    `journal request` or `POST /invocations/{id}/requests/{topic}` gave back)."""


class ValueNotPublished(JournalError, LookupError):
    """The invocation has published no value under that name (yet)."""
