"""Every body the HTTP API takes or gives, as msgspec types: the routes decode requests with
them, encode their own small answers with them, and `/openapi.json` is generated from them.

The documents `journal.views` builds (an invocation, a listing, entries, a key's state) are
shared byte for byte with the CLI's `--json`, so they stay plain data there; the types here
describe them, and the HTTP tests check every answer against the generated schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from journal import Status

_Time = Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
_Listed = Annotated[str, Meta(extra_json_schema={"enum": [s.value for s in Status] + ["damaged"]})]

# -- requests -------------------------------------------------------------------------------------


class StartRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /invocations`: start an invocation of a registered handler."""

    handler: Annotated[str, Meta(description="a NAME registered with --handler NAME=TARGET")]
    input: Any = None
    id: Annotated[str | None, Meta(description="default: a new one; the same id and input again is not a new run")] = None
    key: str | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    tags: Annotated[dict[str, str] | None, Meta(description="KEY: VALUE pairs to find it by (GET /invocations?tag=KEY:VALUE)")] = None


class BatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /batches`: one action over every invocation `filter` matches now."""

    action: Literal["cancel", "resume", "retry"]
    filter: Annotated[dict[str, Any], Meta(description="the filters of GET /invocations: status, handler, key, "
                                                      "tag (KEY:VALUE), q, since, until")] = {}
    check: Annotated[bool, Meta(description="retry only: replay each failed journal against the code first, "
                                            "and retry only those that replay cleanly")] = False
    dry_run: Annotated[bool, Meta(description="act on nothing: count (and check) only")] = False


class PromiseRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Resolve a promise (`value`) or reject it (`reject`): one of the two."""

    value: Any = UNSET
    reject: str | UnsetType = UNSET
    early: Annotated[bool, Meta(description="deliver it before the handler asks (journal resolve --early)")] = False


class CancelRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /invocations/{id}/cancel`; an empty body is `{}`."""

    rollback: Annotated[bool, Meta(description="also undo the ctx.state changes it made to its key")] = False


class RetryRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /invocations/{id}/retry`; an empty body is `{}`."""

    force: Annotated[bool, Meta(description="retry it even though a retry of it is running or completed")] = False


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /invocations/{id}/fork`: a new invocation from the first `at` entries."""

    at: Annotated[int, Meta(ge=1, description="the fork point: entries 0 to at-1 are copied, the fork runs live "
                                                "from at")]
    values: Annotated[dict[str, Any], Meta(description="new values for recorded steps or promises below at, by seq "
                                                       "(as a decimal string)")] = msgspec.field(
        default_factory=dict, name="set")
    new_id: Annotated[str | None, Meta(description="default: ID-fork-<6 hex digits>")] = None


# -- answers --------------------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct):
    type: Annotated[str, Meta(description="a name a script can test, such as InvocationNotFound")]
    message: Annotated[str, Meta(description="what was wrong and what to do")]


class Error(msgspec.Struct):
    """Every answer other than success; an InvocationConflict also names the invocation
    that exists (`id`, `status`), and an AlreadyRetried the retry that is running or done."""

    error: ErrorDetail
    id: str | UnsetType = UNSET
    status: Status | UnsetType = UNSET


class Started(msgspec.Struct):
    """Where an invocation stands after a start, a resolution, a cancel or a resume."""

    id: str
    status: Status


class Forked(msgspec.Struct):
    """A new invocation made from another's journal (fork, retry)."""

    id: str
    status: Status
    parent: str
    at: int | UnsetType = UNSET  # a fork's point; a retry chooses its own


class Owner(msgspec.Struct):
    """Only while running: who holds the lease, and whether it is known to be alive."""

    host: str | None
    pid: int | None
    alive: bool


class Frame(msgspec.Struct):
    file: str
    line: int
    function: str


class ErrorInfo(msgspec.Struct):
    """How an invocation failed; `traceback`: the frames of the handler's code, outermost first."""

    type: str
    message: str
    terminal: bool
    traceback: list[Frame] | UnsetType = UNSET


class Retry(msgspec.Struct):
    """A retry of a failed invocation, and where it stands."""

    id: str
    status: Status


class Summary(msgspec.Struct):
    """One invocation in a listing. A record that does not decode is listed too: status
    `damaged`, what is wrong in `damaged`, and null for what could not be read."""

    id: str
    handler: str | None
    status: _Listed
    key: str | None
    created_at: _Time | None
    updated_at: _Time | None
    entries: int
    tags: dict[str, str]
    owner: Owner | UnsetType = UNSET
    damaged: str | UnsetType = UNSET
    retries: Annotated[list[Retry], Meta(description="a failed invocation's retries, oldest first")] | UnsetType = UNSET


class Page(msgspec.Struct):
    """Newest first; `next_cursor` continues after this page's last invocation."""

    invocations: list[Summary]
    next_cursor: str | None


class WaitingOn(msgspec.Struct):
    """One thing a suspended or pending invocation waits for."""

    kind: Literal["promise", "timer", "child", "turn", "handler"]
    name: str | UnsetType = UNSET
    until: _Time | UnsetType = UNSET
    id: str | UnsetType = UNSET
    type_: Annotated[str, Meta(description="a typed promise: its type, as the code spells it")] | UnsetType = (
        msgspec.field(default=UNSET, name="type"))
    schema_: Annotated[dict[str, Any] | None, Meta(description="a typed promise: its JSON Schema")] | UnsetType = (
        msgspec.field(default=UNSET, name="schema"))
    example: Annotated[Any, Meta(description="a typed promise: a value that fits its schema")] = UNSET


class Invocation(msgspec.Struct):
    """`GET /invocations/{id}`: `journal show --json` without its entries, and what it waits on."""

    id: str
    handler: str
    status: Status
    key: str | None
    parent: str | None
    created_at: _Time | None
    updated_at: _Time | None
    input: Any
    result: Any
    error: ErrorInfo | None
    waiting: str | None
    wake_at: _Time | None
    children: list[str]
    continued_from: str | None
    continued_as: str | None
    forked_from: str | None
    waiting_on: list[WaitingOn]
    divergence: str | None
    fork_command: Annotated[str | None, Meta(description="once diverged: the journal fork command that mends it")]
    steps_here: Annotated[dict[str, int] | None, Meta(description="steps this server ran, by how they ended")]
    tags: dict[str, str]
    owner: Owner | UnsetType = UNSET
    retries: Annotated[list[Retry], Meta(description="a failed invocation's retries, oldest first")] | UnsetType = UNSET


class Entry(msgspec.Struct):
    """One journal entry: these fields, and its kind's own (docs/format.md)."""

    seq: int
    kind: str
    name: str | None
    at: _Time | None
    value: Any = UNSET
    error: Any = UNSET


class Entries(msgspec.Struct):
    entries: list[Entry]


class Result(msgspec.Struct):
    """An invocation's outcome, or where it stands when the wait ended."""

    id: str
    status: Status
    result: Any
    error: ErrorInfo | None


class KeyState(msgspec.Struct):
    """A key's durable state and the queue of its unfinished invocations, oldest first."""

    key: str
    state: dict[str, Any]
    queue: list[str]


class BatchStarted(msgspec.Struct):
    """A batch made: follow it at GET /batches/{id}."""

    id: str
    matched: int


class BatchProgress(msgspec.Struct):
    """`GET /batches/{id}`: how far a batch got."""

    id: str
    action: str
    filter: dict[str, Any]
    check: bool
    dry_run: bool
    matched: int
    done: Annotated[int, Meta(description="acted on (with dry_run: would be)")]
    skipped: Annotated[int, Meta(description="no longer in a state the action applies to")]
    diverging: Annotated[list[str], Meta(description="retry check: journals that would diverge, not retried")]
    first_differences: Annotated[dict[str, str], Meta(description="each diverging one's first difference")]
    errors: list[str]
    finished: bool


class HandlerCounts(msgspec.Struct):
    """One handler's invocations: how many have each status, and how long (seconds) the
    oldest runnable (pending) one has waited (null: none is)."""

    handler: str
    counts: dict[str, int]
    oldest_runnable_seconds: float | None


class QueueSummary(msgspec.Struct):
    """`GET /invocations/summary`: the queue at a glance, from the store's counts."""

    handlers: list[HandlerCounts]


class Health(msgspec.Struct):
    status: Literal["ok"]
    workers: int


REQUESTS = (StartRequest, PromiseRequest, CancelRequest, ForkRequest, RetryRequest, BatchRequest)
ANSWERS = (Error, Started, Forked, Summary, Page, Invocation, Entries, Result, KeyState, QueueSummary, BatchStarted,
           BatchProgress, Health)
