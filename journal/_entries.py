"""Every kind of journal entry, as facts that happened.

Format rules (the bytes on disk must never change by accident; see tests/journal/test_entries.py):
entries are array-like msgspec Structs tagged with an explicit string; fields are never
reordered or removed; a new field goes at the end with a default; a new kind is a new
Struct with a new tag. Times are integer microseconds since the Unix epoch (UTC).
Values are kept as raw msgpack (`msgspec.Raw`) and decoded lazily with the type the
reader asks for. `prev` links each operation to the one its branch (task) made before it,
which lets replay match concurrent branches whatever order they are scheduled in.
"""

from __future__ import annotations

import msgspec

NIL = msgspec.Raw(b"\xc0")  # msgpack nil: "no value" (Raw cannot sit in a union with None)

_OPTS = dict(array_like=True, frozen=True, gc=False, tag_field="kind")


class ErrorInfo(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """An error as journaled: its type name, message, and whether it was terminal."""

    type: str
    message: str
    terminal: bool = True


class Frame(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One frame of the user's code in a failure's traceback: where it was when it raised."""

    file: str
    line: int
    function: str


class Started(msgspec.Struct, tag="started", **_OPTS):
    """Entry 0: the invocation began with this handler and input."""

    handler: str
    input: msgspec.Raw
    at: int
    key: str | None = None
    input_digest: int = 0
    parent: str | None = None
    trace: str | None = None  # W3C `traceparent` of the trace this invocation belongs to (OpenTelemetry)


class Step(msgspec.Struct, tag="step", **_OPTS):
    """`ctx.run(name, ...)` finished with a value or a terminal error."""

    name: str
    digest: int
    at: int
    value: msgspec.Raw = NIL
    error: ErrorInfo | None = None
    attempts: int = 1
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class Now(msgspec.Struct, tag="now", **_OPTS):
    """`ctx.now()` read the clock; `at` is the instant it returned."""

    at: int
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class Sleep(msgspec.Struct, tag="sleep", **_OPTS):
    """`ctx.sleep()` started a durable timer that fires at `until`."""

    at: int
    until: int
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class Promise(msgspec.Struct, tag="promise", **_OPTS):
    """`ctx.promise(name)` received a value or a rejection."""

    name: str
    at: int
    value: msgspec.Raw = NIL
    error: str | None = None
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)
    timed_out: bool = False


class Completed(msgspec.Struct, tag="completed", **_OPTS):
    """The handler returned `value`."""

    at: int
    value: msgspec.Raw


class Failed(msgspec.Struct, tag="failed", **_OPTS):
    """The handler raised; the invocation failed for good."""

    at: int
    error: ErrorInfo
    # The frames of the user's code that raised, outermost first (bounded: runtime/_replay/_frames.py).
    traceback: list[Frame] = []


class Cancelled(msgspec.Struct, tag="cancelled", **_OPTS):
    """The invocation was cancelled and its handler finished unwinding."""

    at: int
    reason: str = ""
    rolled_back: list[str] = []  # state names of its key restored with it (`cancel --rollback`)


class Emitted(msgspec.Struct, tag="emitted", **_OPTS):
    """`ctx.emit(event)` published an intermediate event."""

    at: int
    value: msgspec.Raw
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class Patched(msgspec.Struct, tag="patched", **_OPTS):
    """`ctx.patched(change_id)` took the new code path."""

    name: str
    at: int
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class CancelReceived(msgspec.Struct, tag="cancel_received", **_OPTS):
    """Cancellation reached the handler at this seq (replay raises `Cancelled` here again)."""

    at: int
    reason: str = ""
    prev: int = 0  # the position of this operation's branch before it (see runtime/_replay/_branches.py)


class StateGot(msgspec.Struct, tag="state_get", **_OPTS):
    """`ctx.state.get(name)` read `value` from the thread's state (`found` False: it was unset)."""

    name: str
    at: int
    value: msgspec.Raw = NIL
    found: bool = False
    prev: int = 0


# `StateSet.prior`: not recorded (a later change of the name, or an entry older than the
# field), the name was unset before, or it held `StateSet.was`.
PRIOR_UNKNOWN, PRIOR_UNSET, PRIOR_SET = 0, 1, 2


class StateSet(msgspec.Struct, tag="state_set", **_OPTS):
    """`ctx.state.set/update/clear(name)` changed the thread's state, in the same transaction."""

    name: str
    at: int
    value: msgspec.Raw = NIL
    cleared: bool = False
    prev: int = 0
    # On the invocation's first change of `name`: what it was before (for `cancel --rollback`).
    prior: int = PRIOR_UNKNOWN
    was: msgspec.Raw = NIL


class StateKeys(msgspec.Struct, tag="state_keys", **_OPTS):
    """`ctx.state.keys()` listed the names set in the thread's state."""

    at: int
    names: list[str] = []
    prev: int = 0


class Called(msgspec.Struct, tag="called", **_OPTS):
    """`ctx.call`/`ctx.send` started child invocation `child` of handler `name`."""

    name: str
    digest: int
    at: int
    child: str
    awaited: bool = True
    prev: int = 0


class Selected(msgspec.Struct, tag="selected", **_OPTS):
    """`ctx.select(...)` was won by branch `index`."""

    at: int
    index: int
    prev: int = 0


class ContinuedAsNew(msgspec.Struct, tag="continued_as_new", **_OPTS):
    """The invocation ended here and continues as the fresh invocation `next_id`."""

    at: int
    next_id: str


class Received(msgspec.Struct, tag="received", **_OPTS):
    """`ctx.receive(topic)` took the message `message_id` from the invocation's inbox (in the
    same transaction that journaled this entry), or its deadline passed (`timed_out`)."""

    name: str  # the topic
    at: int
    message_id: str = ""
    value: msgspec.Raw = NIL
    prev: int = 0
    timed_out: bool = False
    wants_reply: bool = False  # its sender waits for `message.reply(...)`


class Replied(msgspec.Struct, tag="replied", **_OPTS):
    """`message.reply(value)` answered message `name` (its id); the reply reaches the sender
    from the store, written in the same transaction as this entry."""

    name: str  # the message id
    at: int
    value: msgspec.Raw = NIL
    prev: int = 0


class Published(msgspec.Struct, tag="published", **_OPTS):
    """`ctx.publish(name, value)`: the invocation's latest value under `name`, readable from
    the store by anyone (`journal get`), written in the same transaction as this entry."""

    name: str
    at: int
    value: msgspec.Raw = NIL
    prev: int = 0


class Tagged(msgspec.Struct, tag="tagged", **_OPTS):
    """`ctx.tag(name, value)` set a tag on the invocation's record, in the same transaction."""

    name: str
    at: int
    value: str
    prev: int = 0


Entry = (
    Started | Step | Now | Sleep | Promise | Completed | Failed | Cancelled | Emitted | Patched
    | CancelReceived | StateGot | StateSet | StateKeys | Called | Selected | ContinuedAsNew
    | Received | Replied | Published | Tagged
)

TERMINAL_KINDS = (Completed, Failed, Cancelled, ContinuedAsNew)


def kind_of(entry: Entry) -> str:
    """The entry's kind as it appears in listings and `--json` output."""
    return type(entry).__struct_config__.tag  # type: ignore[return-value]


def name_of(entry: Entry) -> str | None:
    """The step or promise name an entry carries, if any."""
    return getattr(entry, "name", None)
