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
    priority: Annotated[int, Meta(description="higher first, then the oldest: the order runnable invocations "
                                              "are claimed in, and the place in a limit's line")] = 0
    delay: Annotated[float, Meta(ge=0, description="seconds before it may run; it stays pending meanwhile")] | None = None
    start_at: Annotated[_Time | None, Meta(description="not run before this time (ISO 8601 with a zone)")] = None
    tags: dict[str, str] | None = None
    if_busy: Annotated[Literal["enqueue", "reject", "interrupt", "rollback"],
                       Meta(description="with a key whose thread has an unfinished turn: wait behind it, refuse "
                                        "(409 KeyBusy), or cancel it (rollback: and undo its state changes)")] = "enqueue"
    debounce: Annotated[float, Meta(gt=0, description="with a key: gather a burst of starts into one run "
                                                    "(seconds after the last)")] | None = None
    debounce_max: Annotated[float, Meta(gt=0, description="never start a debounced run later than this "
                                                        "after the first start")] | None = None
    limit: Annotated[str | list[str] | None, Meta(description="limits it holds a unit of while it runs")] = None


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


class LimitWindow(msgspec.Struct, forbid_unknown_fields=True):
    """At most `limit` in every window of `period` seconds (a sliding window)."""

    limit: Annotated[int, Meta(ge=1)]
    period: Annotated[float, Meta(gt=0, description="seconds")]


class LimitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`PUT /limits/{name}`: the rule of a name (or of every PREFIX:<anything> for PREFIX:*), replacing
    the one it had. At least one of the three. A window may also be written "N/PERIOD" ("500/m")."""

    concurrency: Annotated[int, Meta(ge=1)] | None = None
    rate: LimitWindow | str | None = None
    tokens: LimitWindow | str | None = None


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
    owner: Owner | UnsetType = UNSET
    damaged: str | UnsetType = UNSET
    retries: Annotated[list[Retry], Meta(description="a failed invocation's retries, oldest first")] | UnsetType = UNSET
    priority: Annotated[int, Meta(description="claimed highest first, then oldest")] | UnsetType = UNSET
    start_at: Annotated[_Time | None, Meta(description="a delayed start: not run before then")] | UnsetType = UNSET
    tags: dict[str, str] | UnsetType = UNSET


class Page(msgspec.Struct):
    """Newest first; `next_cursor` continues after this page's last invocation."""

    invocations: list[Summary]
    next_cursor: str | None


class WaitingOn(msgspec.Struct):
    """One thing a suspended or pending invocation waits for."""

    kind: Literal["promise", "timer", "child", "turn", "handler", "limit"]
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
    priority: Annotated[int, Meta(description="claimed highest first, then oldest")]
    start_at: Annotated[_Time | None, Meta(description="a delayed start: not run before then")]
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


class Limit(msgspec.Struct):
    """One limit, as `journal limit ls --json` shows it."""

    name: str
    concurrency: int | None
    rate: LimitWindow | None
    tokens: LimitWindow | None
    in_use: int
    waiting: int
    tokens_used: Annotated[int, Meta(description="tokens counted in the current window of its tokens rule")]
    paused_until: Annotated[_Time | None, Meta(description="a provider pushed back: nothing is granted before then")]


class Limits(msgspec.Struct):
    limits: list[Limit]


class Health(msgspec.Struct):
    status: Literal["ok"]
    workers: int


class ScheduleRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`PUT /schedules/{name}`: add the schedule, or change the one of that name (its history kept)."""

    target: Annotated[str, Meta(description="a handler NAME the workers were given (or a TARGET path on LMDB)")]
    cron: Annotated[str | None, Meta(description="five fields, or @hourly, @daily, ...; read in tz")] = None
    every: Annotated[float, Meta(gt=0, description="seconds between ticks, instead of cron")] | None = None
    input: Any = None
    key: str | None = None
    tz: str = "UTC"
    overlap: Literal["skip", "buffer-one", "buffer-all", "cancel-other", "allow-all"] = "skip"
    catch_up: Annotated[float, Meta(ge=0, description="seconds: missed ticks younger than this still start")] = 60.0
    jitter: Annotated[float, Meta(ge=0)] = 0.0
    start_at: _Time | None = None
    end_at: _Time | None = None
    priority: int = 0
    limit: str | list[str] | None = None


class PauseRequest(msgspec.Struct, forbid_unknown_fields=True):
    note: str | None = None


class BackfillRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Start the ticks in [from, to) that were not started yet."""

    from_: Annotated[_Time, Meta(description="the first instant of the range")] = msgspec.field(name="from")
    to: Annotated[_Time, Meta(description="the end of the range (excluded)")] = msgspec.field(name="to")


class ScheduleRun(msgspec.Struct):
    at: _Time
    id: str
    status: Status | None


class Schedule(msgspec.Struct):
    """A schedule: its rule, the next run (null while paused or once ended), its last runs."""

    name: str
    target: str
    cron: str | None
    every: float | None
    tz: str
    overlap: str
    catch_up: float
    jitter: float
    key: str | None
    priority: int
    limits: list[str]
    start_at: _Time | None
    end_at: _Time | None
    paused: bool
    note: str | None
    next_run: _Time | None
    last_run: ScheduleRun | None
    skipped: Annotated[int, Meta(description="ticks not started: missed past the catch-up window, or skipped "
                                             "by the overlap policy")]
    buffered: list[_Time]
    recent: list[ScheduleRun]


class Schedules(msgspec.Struct):
    schedules: list[Schedule]


class Triggered(msgspec.Struct):
    id: str


class Backfilled(msgspec.Struct):
    ticks: list[Annotated[dict[str, Any], Meta(description='{"id", "started"}: started false when it was already')]]


REQUESTS = (StartRequest, PromiseRequest, CancelRequest, ForkRequest, RetryRequest, LimitRequest, ScheduleRequest,
            PauseRequest, BackfillRequest)
ANSWERS = (Error, Started, Forked, Summary, Page, Invocation, Entries, Result, KeyState, Health, Limit, Limits,
           Schedule, Schedules, Triggered, Backfilled)
