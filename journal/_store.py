"""The `Store` protocol: everything the runtime asks of storage.

A store is synchronous and each call is one atomic transaction. `apply` takes a batch of
operations and runs them in a single transaction; each operation succeeds or fails on
its own (a failed check writes nothing), and its result or exception comes back in the
same position. Every method the runtime calls is here, and every backend (memory, LMDB,
PostgreSQL) passes tests/journal's conformance suite.

A store whose calls wait on the network says so with `blocking = True`: the runtime then
makes its calls from a worker thread, never from the event loop (`Committer.read`).

What a store offers beyond the calls every store has, it declares in `capabilities`
(`Capability`); callers ask that set, never the store's attributes or signatures, and the
shipped contract (`journal.testing.StoreContract`) tests what is declared.
"""

from __future__ import annotations

import builtins
import enum
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, overload, runtime_checkable

import msgspec

from ._entries import ErrorInfo
from ._listing import HandlerSummary, Page, Query
from ._records import (
    InboxMessage,
    InvocationRecord,
    Lease,
    PromiseType,
    PublishedValue,
    Resolution,
    SentMessage,
    Status,
)
from ._schedules import ScheduleRecord

if TYPE_CHECKING:
    from ._live import LiveChannel
    from .errors import StoreUnavailable
    from .limits import LimitTable


class Capability(str, enum.Enum):
    """Something a store offers beyond the calls every store has."""

    # `cancel_requests_made()`: a counter every cancel request bumps, so that the lease
    # watcher reads one number per tick instead of the records of every invocation it runs.
    CANCEL_COUNTER = "cancel-counter"
    # `apply_async` commits some batches without leaving the event loop (a network store's
    # own asynchronous driver); without it the runtime runs `apply` on a thread.
    LOOP_COMMITS = "loop-commits"
    # `Create.lease` is taken in the transaction that creates the invocation.
    LEASE_AT_CREATE = "lease-at-create"
    # `wait_for_work` returns when an invocation may have become runnable (a notification);
    # without it the runtime polls at its own interval.
    WAKE_ON_WORK = "wake-on-work"
    # The `journal.Tables` protocol: ordered key-value tables (LangGraph's checkpoints, memory).
    TABLES = "tables"
    # The store's server may be away for a while (a database on the network restarting or
    # failing over): its calls reconnect and wait for it (`wait_for_server` says how long),
    # and `outage()` says whether it is away right now.
    RECONNECTS = "reconnects"
    # `work_bell()`: a socket a worker that polls also waits on, rung by any process's commit
    # that made an invocation runnable, so that it looks at once (LMDB; see WAKE_ON_WORK).
    WORK_BELL = "work-bell"

    def __str__(self) -> str:
        return self.value


class Transition(msgspec.Struct, gc=False):
    """A change of an invocation's status, applied together with an append or alone."""

    status: Status
    at: int
    result: msgspec.Raw | None = None
    error: ErrorInfo | None = None
    waiting: str | None = None
    wake_at: int | None = None
    divergence: str | None = None
    release: bool = False  # give the lease up (the invocation leaves this process)
    waiting_any: list[str] | None = None
    promise_types: list[PromiseType] | None = None  # what its typed waits accept (with `waiting`)


class Talk(msgspec.Struct, gc=False):
    """What entries about messages and published values change beside the journal, in the
    same transaction: messages taken from the inbox `(topic, number)`, replies
    `(message id, at, raw value)`, published values `(name, seq, at, raw value)`."""

    received: list[tuple[str, int]] = []
    replies: list[tuple[str, int, bytes]] = []
    published: list[tuple[str, int, int, bytes]] = []
    types: list[PromiseType] = []  # topics the handler receives with a type (`MESSAGE_WAIT + topic`)


class Append(msgspec.Struct, gc=False):
    """Append entries `(seq, bytes)` if `epoch` still owns the invocation.

    `state` mutations `(name, raw value or None to clear)` apply to the invocation's key in
    the same transaction as the entries that record them; so does `talk`.
    """

    id: str
    epoch: int
    entries: list[tuple[int, bytes]]
    transition: Transition | None = None
    state: list[tuple[str, bytes | None]] | None = None
    cancel_seen: bool = False  # the entries deliver a cancel request: it is consumed
    talk: Talk | None = None
    tags: list[tuple[str, str]] | None = None  # `ctx.tag`s the entries record, set on the record with them


class Acquire(msgspec.Struct, gc=False):
    """Take the lease; result is `(epoch, record)`. Raises InvocationBusy if a live owner has it.

    With `wait_turn`, for an invocation queued behind another of its key: take the lease as
    its waiter instead of refusing, leaving it `pending`, so that no other process claims it
    while the process that started it waits for its turn (which it then acquires again, as
    the same owner). Where the invocation's turn has come, nothing is taken and the epoch
    returned is 0."""

    id: str
    owner: str
    host: str
    pid: int
    ttl_us: int
    now_us: int
    ignore_queue: bool = False  # copying entries in (a fork) is not running: the key's queue does not apply
    wait_turn: bool = False


class Renew(msgspec.Struct, gc=False):
    id: str
    epoch: int
    ttl_us: int
    now_us: int


class SetStatus(msgspec.Struct, gc=False):
    """Change status; with `epoch` set, only while that epoch owns the invocation; with
    `owner`, only while that owner holds its lease (a lease given back by an owner that
    cannot tell whether it took it)."""

    id: str
    transition: Transition
    epoch: int | None = None
    owner: str | None = None


class Resolve(msgspec.Struct, gc=False):
    """Deliver a promise's value (or rejection); wakes the invocation if it waits on it."""

    id: str
    name: str
    at: int
    value: bytes | None = None
    error: str | None = None


class Send(msgspec.Struct, gc=False):
    """Put a message in the invocation's inbox on `topic`, once per message id: a second send
    of the same id changes nothing. Wakes the invocation if it waits in `receive(topic)`.
    Refused for a finished invocation (`MessageRefused`) and, where the handler awaits the
    topic with a type, for a value that does not fit it (`MessageValueRefused`).
    Result: the record."""

    id: str
    topic: str
    message_id: str
    at: int
    value: bytes
    wants_reply: bool = False


class Continue(msgspec.Struct, gc=False):
    """Continue-as-new: finish `id` (owned at `epoch`) and create `record` with entry 0, at once."""

    id: str
    epoch: int
    entries: list[tuple[int, bytes]]
    transition: Transition
    record: InvocationRecord
    started: bytes
    state: list[tuple[str, bytes | None]] | None = None
    cancel_seen: bool = False


class RequestCancel(msgspec.Struct, gc=False):
    """Ask for cancellation; result is the record after the request."""

    id: str
    at: int
    rollback: bool = False  # also undo the invocation's ctx.state changes when it ends cancelled


class Create(msgspec.Struct, gc=False):
    """Create `record` with entry 0 (`started`) unless it exists: `Store.create` as an operation,
    so that many creations share a transaction. Result: (record, created).

    With `lease`, a store that declares `Capability.LEASE_AT_CREATE` also takes the new
    invocation's lease for that owner in the same transaction, at epoch 1 (what `Engine.run`
    does with an invocation it starts, saving an `Acquire` of its own): the record it
    returns is then `running`, unless the invocation is queued behind another of its key,
    when it stays `pending` with the owner as its waiter (`Acquire.wait_turn`)."""

    record: InvocationRecord
    started: bytes
    lease: Acquire | None = None
    # What to do when the record's key has an unfinished turn (running, suspended or queued):
    # "enqueue" behind it, "reject" (KeyBusy), "interrupt" (ask each to cancel, then queue:
    # this one runs next), "rollback" (the same, asking each to undo its state changes too).
    if_busy: str = "enqueue"


Op = Append | Acquire | Renew | SetStatus | Resolve | RequestCancel | Continue | Create | Send

# What `apply` gives back for each operation, in its position (or the error that refused it):
#   Append -> InvocationRecord | None (a record when it carried a transition)
#   Acquire -> (epoch, InvocationRecord)        Renew -> None
#   SetStatus, Resolve, RequestCancel, Continue, Send -> InvocationRecord
#   Create -> (InvocationRecord, created)
OpResult = InvocationRecord | tuple[int, InvocationRecord] | tuple[InvocationRecord, bool] | None


@runtime_checkable
class WorkBell(Protocol):
    """`Store.work_bell`: what a worker that polls also waits on."""

    socket: socket.socket

    def drain(self) -> None:
        """Read every ring that arrived (the socket is not readable until the next one)."""

    def close(self) -> None:
        """Stop being rung."""


class Store(Protocol):
    if TYPE_CHECKING:
        # Read-only to the runtime, so a backend may declare it `str`. Only for the checker:
        # a store that subclasses the protocol still assigns `self.path` in its __init__.
        @property
        def path(self) -> str | None: ...
    else:
        path: str | None
    max_entry_bytes: int
    # Defaults for a store that subclasses the protocol and says nothing: a local store
    # that offers nothing beyond the required calls.
    blocking: bool = False  # calls wait on the network: keep them off the event loop
    capabilities: frozenset[Capability] = frozenset()

    def create(self, record: InvocationRecord, started: bytes) -> tuple[InvocationRecord, bool]:
        """Create an invocation with entry 0, or return the existing one (`created` False).

        Raises InvocationConflict when the id exists with a different input digest.
        """

    def get(self, invocation_id: str) -> InvocationRecord | None: ...

    def get_many(self, invocation_ids: Sequence[str]) -> builtins.list[InvocationRecord | None]:
        """`get` of each, in order (one statement on a store over the network); raises
        CorruptEntry if any of them does not decode."""
        return [self.get(invocation_id) for invocation_id in invocation_ids]

    def require(self, invocation_id: str) -> InvocationRecord:
        """`get`, raising InvocationNotFound (with what to do) when there is no such invocation."""

    def list(self, status: Status | None = None) -> list[InvocationRecord]: ...

    def ids(self, status: Status) -> builtins.list[str]:
        """The ids of the invocations of `status`, read from the status index without decoding
        a record: what a worker looks through for work, reading only the records it does not hold."""

    def ids_starting(self, prefix: str, limit: int) -> builtins.list[str]:
        """Up to `limit` ids that start with `prefix` (an id itself included), in id order,
        read from the order the records are kept in: neither every record nor any record's
        value is read (`journal.expand_id` is built on it)."""

    def page(self, query: Query) -> Page:
        """One page of invocations, newest first (creation time, then id), filtered and
        continued after `query.after` as `journal.Query` says. A record that does not decode
        is listed as `journal.Damaged` and the others still are. Kept in an index: a page
        filtered by status, handler or key reads only the records it returns and one more."""

    def summary(self) -> builtins.list[HandlerSummary]:
        """Counts by handler and status and each handler's longest waiting runnable invocation,
        from counts the store keeps as statuses change: no record is read."""

    def batch_records(self, prefix: bytes) -> builtins.list[tuple[bytes, bytes]]:
        """The records of batches (`journal/batches.py`) whose keys start with `prefix`, in key order."""

    def write_batch_records(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Write records of batches, in one transaction."""

    def entries(self, invocation_id: str, start: int = 0) -> builtins.list[tuple[int, bytes]]: ...

    def entry_count(self, invocation_id: str) -> int: ...

    def lease(self, invocation_id: str) -> Lease | None: ...

    def live_lease(self, invocation_id: str, now_us: int) -> Lease | None:
        """The lease if it still protects a live owner: not expired, and its owner not known
        dead (a gone pid on this host; on PostgreSQL, an ended database session)."""

    def resolution(self, invocation_id: str, name: str) -> Resolution | None: ...

    def due_timers(self, now_us: int) -> builtins.list[str]: ...

    def debounce(self, record: InvocationRecord, started: bytes, wait_us: int,
                 max_us: int | None) -> tuple[InvocationRecord, bool]:
        """Start `record` (pending, keyed) debounced, in one transaction: if a debounced start
        of the same handler and key is still waiting to begin, it takes `started`'s input and
        its start moves to `wait_us` after `record.created_at` (never more than `max_us` after
        the first start of the burst), and that record comes back with False; otherwise
        `record` is created to start `wait_us` from then, with True."""
        ...

    def schedules(self) -> builtins.list[ScheduleRecord]:
        """Every schedule in the store, by name."""
        ...

    def schedule(self, name: str) -> ScheduleRecord | None: ...

    def put_schedule(self, record: ScheduleRecord, *, replace: bool = False) -> ScheduleRecord:
        """Add a schedule (an existing name is an error unless `replace`); the record stored."""
        ...

    def delete_schedule(self, name: str) -> bool: ...

    def advance_schedule(self, record: ScheduleRecord, expected_version: int, creates: Sequence[Create],
                         cancels: Sequence[str] = ()) -> bool:
        """In one transaction, if the schedule is still at `expected_version`: create its ticks'
        invocations (`Create` without a lease; idempotent by id), ask `cancels` to cancel,
        and store `record` one version on. False, writing nothing, if another process moved
        the schedule first: the ticks are then that process's."""
        ...

    def advance_schedules(self, moves: Sequence[tuple[ScheduleRecord, int, Sequence[Create], Sequence[str]]]
                          ) -> builtins.list[bool | None]:
        """`advance_schedule(*move)` for each move, in one transaction: what each returned,
        or None for a schedule that another process's transaction is moving right now (it is
        not waited for; its ticks are that process's). A move refused writes nothing; one
        that raises writes nothing for any of them."""
        ...

    def fire_schedules(self, names: Sequence[str],
                       decide: Callable[[ScheduleRecord, InvocationRecord | None],
                                        tuple[ScheduleRecord, Sequence[Create], Sequence[str]] | None]
                       ) -> builtins.list[tuple[ScheduleRecord, bool] | None]:
        """Fire the schedules `names`, in one transaction: each one that no other process is
        firing or changing right now (it is not waited for) is read with the record of its
        last run (`last_id`), and `decide` says what to do: None, or the schedule moved on,
        the creations of its ticks' invocations and the runs to cancel, done as
        `advance_schedule` does. For each name: `(the schedule as it stands now, whether
        this call moved it)`, or None if another process holds it or it does not exist.
        `decide` runs inside the transaction (again if the transaction is retried): it must
        be quick and have no effect of its own. Two workers firing the same due schedules
        with it each take those the other does not hold at that moment, and see those the
        other moved as they now stand."""
        ...

    def ready(self, limit: int | None = None, after: tuple[int, int, str] | None = None) -> builtins.list[str]:
        """Pending invocations that may start now (a delayed start is not among them until
        it is due: `due_timers` has it), highest priority first, then oldest, read from an
        index; at most `limit`; with `after`, those that come after that place in this
        order: `(priority, created_at, id)` of an invocation (a worker reads on past those
        it cannot start yet)."""
        ...

    def next_message(self, invocation_id: str, topic: str, after: int = 0) -> tuple[int, InboxMessage] | None:
        """The first message waiting in the invocation's inbox on `topic` whose number is
        greater than `after`, with its number (arrival order), or None."""

    def message(self, invocation_id: str, message_id: str) -> SentMessage | None:
        """What was sent to the invocation under `message_id` (and its reply, once journaled)."""

    def published(self, invocation_id: str, name: str | None = None) -> dict[str, PublishedValue]:
        """The latest value the invocation published under `name` (every name without one):
        one indexed read per name, whatever the length of its journal."""

    def cancel_requests_made(self) -> int:
        """How many cancel requests the store has recorded, ever (`Capability.CANCEL_COUNTER`)."""
        raise NotImplementedError

    def state(self, key: str) -> dict[str, bytes]:
        """The durable state of key (thread) `key`: name -> raw msgpack value."""

    def key_queue(self, key: str) -> builtins.list[str]:
        """Unfinished invocations of `key` in the order they run (the first one runs now)."""

    def apply(self, ops: Sequence[Op], *, durable: bool = True) -> builtins.list[OpResult | BaseException]:
        """Run `ops`, each atomically, in one transaction (LMDB splits a batch of more than
        `journal.backends.lmdb._store.OPS_PER_TRANSACTION` into several). `durable=False`: the caller will not ask for this
        commit to be durable (`async`); a store whose commits are durable by themselves
        (PostgreSQL's synchronous_commit) may then commit without waiting for the disk."""

    async def apply_async(
        self, ops: Sequence[Op], *, durable: bool = True, deferred: builtins.list[BaseException] | None = None
    ) -> builtins.list[OpResult | BaseException] | None:
        """`apply` without leaving the event loop, for a `blocking` store that can wait on the
        network asynchronously (`Capability.LOOP_COMMITS`); None if it cannot for this batch
        (nothing was done), and the caller then runs `apply` on a thread. The default always
        says None.

        With `deferred`, a native asyncio cancellation is kept there instead of raised: once
        the batch is sent, the wait for its answer goes on (others may be waiting for their
        operations in it), and before that, nothing is done (None)."""
        return None

    @overload
    def apply_one(self, op: Acquire) -> tuple[int, InvocationRecord]: ...
    @overload
    def apply_one(self, op: SetStatus | Resolve | RequestCancel | Continue | Send) -> InvocationRecord: ...
    @overload
    def apply_one(self, op: Append | Renew) -> InvocationRecord | None: ...
    @overload
    def apply_one(self, op: Create) -> tuple[InvocationRecord, bool]: ...

    def apply_one(self, op: Op) -> OpResult:
        """`apply` of one operation: its result, or its error raised."""
        (result,) = self.apply([op])
        if isinstance(result, BaseException):
            raise result
        return result

    def delete(self, invocation_ids: Sequence[str], *, keep_record: bool = False) -> int: ...

    def sync(self) -> None:
        """Make every committed transaction durable (an fsync; a no-op where commits are durable)."""

    def wait_for_work(self, timeout: float) -> None:
        """Block until an invocation may have become runnable, or `timeout` seconds pass.

        PostgreSQL wakes on a NOTIFY from the transaction that made it runnable
        (`Capability.WAKE_ON_WORK`); a store that cannot tell just waits out the timeout (the
        runtime polls those instead).
        """

    def work_bell(self) -> WorkBell | None:
        """A bell for one worker (`Capability.WORK_BELL`): its `socket` becomes readable when
        a commit in any process may have made an invocation runnable; `drain()` empties it,
        `close()` unregisters it. None when this store cannot ring (opened read-only)."""
        raise NotImplementedError

    def next_wake(self) -> int | None:
        """The earliest wake-up time (µs) of a suspended invocation's timer, if any."""

    def outage(self) -> StoreUnavailable | None:
        """While the store's server cannot be reached (`Capability.RECONNECTS`): the error a
        call that does not wait for it gets; None while it can be (and for a local store)."""
        return None

    def reconnects(self) -> int:
        """How many times this store connected to its server again after losing it (a restart,
        a failover, a session ended: `Capability.RECONNECTS`), since it was opened; 0 for a
        local store. The metric `journal_store_reconnects_total`."""
        return 0

    def wait_for_server(self, seconds: float | None) -> None:
        """From now on, a call that cannot reach the store's server waits at most `seconds`
        for it, counted from when it went away (None: as long as it takes), then raises
        `StoreUnavailable` (`Capability.RECONNECTS`; a local store has no server to wait for)."""

    def start_background_sync(self, interval: float) -> None:
        """`async` durability: make commits durable in the background within `interval` seconds."""

    def live(self) -> LiveChannel:
        """Where running steps' live output (chunks) goes and is followed from (`journal/_live.py`):
        not journaled, never synced. Made on first use and closed with the store."""

    def limits(self) -> LimitTable:
        """The limits every process sharing the store obeys (`journal/limits/`): their rules, who
        holds and who waits for a unit. Not journaled and never synced but for rule changes; made
        on first use and closed with the store."""

    def close(self) -> None: ...
