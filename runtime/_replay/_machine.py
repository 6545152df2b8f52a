"""The invocation state machine: one execution of an invocation, synchronous and I/O-free.

It owns what an execution knows: each branch's position and the claims that hand out
seqs (the `Replayer` says which recorded entry a claim replays), the entries and state changes waiting to be written,
cancellation (requested, delivered, seen), what stopped the execution (a lost lease, a
broken store, a divergence), the answers `ctx.patched` gave, and the seeds of
`ctx.random`/`ctx.uuid`. It never awaits, writes or reads the store: the shells around
it do that. `InvocationContext` (the handler's `ctx`) turns each context call into a
claim here plus whatever I/O the call needs; the executor (runtime/_engine/_executor.py) drives
an execution and writes the `Ending` that `Machine.settle` decides for it; `replay_journal`
drives it in replay-only mode, where an operation with nothing recorded stops instead of
running.
"""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import random as _random
import uuid as _uuid
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from journal import (
    PRIOR_SET,
    CancelReceived,
    Completed,
    ErrorInfo,
    Failed,
    Frame,
    Patched,
    StateSet,
    Status,
    Talk,
    UnencodableValue,
    encode_entry,
    encode_value,
    now_us,
)
from journal import Cancelled as CancelledEntry
from journal.errors import LeaseLost

from ..errors import Cancelled, NondeterminismError, TerminalError
from ._branches import _branch, branch_token, spawn_token
from ._frames import user_frames
from ._groups import leaves as _leaves
from ._mistakes import unjournalable
from ._replayer import R, Replayer
from ._suspend import ContinueAsNew, Restart, Suspend

_serials = itertools.count(1)



def position_after(prev: int, tag: str | int | None, name: str | None, call_digest: int | None) -> int:
    """The position a branch moves to from `prev` by an operation (its entry kind's tag, name
    and argument digest): `_branches.py` says why positions are hashed so. Here, beside the
    one place that moves a branch, because every live step computes it."""
    text = f"{prev}\x00{tag}\x00{name}\x00{call_digest}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 2

class EndOfJournal(BaseException):
    """Replay-only mode: the operation has nothing recorded, so a resumed run would go live
    here. Not caught by `except Exception`, so the handler cannot carry on past it."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class Ending(NamedTuple):
    """How an execution ends, as `Machine.settle` decides it; the executor writes it.

    `how` says what to do: "write" the final `entry` (if any) with the transition to
    `status` (`change` holds the transition's other fields); "diverged" (park it with
    `change["divergence"]`); "continue" as new with `cont`; "reread" the record (the lease was
    lost: another owner writes now); "give back" the lease and raise `error` (stopped from
    outside, or a broken store); "restart" it (always-replay); or "crash": raise `error`
    having written nothing, as a crash would."""

    how: str
    status: Status | None = None
    entry: Any = None
    change: dict[str, Any] = {}
    error: BaseException | None = None
    cont: ContinueAsNew | None = None


class Machine:
    """One execution of one invocation. Every method is synchronous and does no I/O."""

    def __init__(self, invocation_id: str, replayer: Replayer, max_entry_bytes: int, *,
                 replay_only: bool = False) -> None:
        self.invocation_id = invocation_id
        self.serial = next(_serials)
        self.replayer = replayer
        self.max_entry_bytes = max_entry_bytes
        self.replay_only = replay_only
        self.pending: list[tuple[int, bytes]] = []  # entries to write with the next append
        self.pending_state: list[tuple[str, bytes | None]] = []  # state changes that go with them
        self.pending_talk: Talk | None = None  # `exit` durability: what buffered entries change beside the journal
        self.pending_tags: list[tuple[str, str]] = []  # `ctx.tag`s that go with them
        self.cancel_reason: str | None = None
        self.rollback = False  # a cancel asked to undo the invocation's state changes
        self._priors: dict[str, tuple[int, StateSet]] = {}  # live first changes of each state name
        self.cancel_delivered = False
        self._cancel_seen = False  # a delivery not yet written: the next write consumes the request
        self.lost: LeaseLost | None = None
        self.broken: Exception | None = None  # the store failed under this execution
        self.divergence: NondeterminismError | None = None
        self._patches: dict[str, bool] = {}
        self._randoms: dict[int, _random.Random] = {}
        self._uuids: dict[int, int] = {}
        # Seqs handed out to live operations, and the positions they ran at, as dict keys: a
        # dict of a few keys is a third of the size of a set of five (one per step of a short
        # agent, many thousand in flight).
        self._live: dict[int, None] = {}
        self._live_at: dict[int, None] = {}
        self._top = replayer.top  # the highest seq recorded or handed out
        self.claims = 0  # grows with every claim (replay-only mode watches it for progress)
        self.checked = 0  # recorded operations replayed
        self.stopped_at: int | None = None  # replay-only: the lowest seq that would have run live
        self.on_halt: Callable[[], None] | None = None  # told when a branch stops or diverges
        # Replay-only: the handler's tasks still running (counted by runtime/_replay/_branches.py
        # once `count_branches` is called), and how many of them are parked where they stop
        # (they would go live there, or lost a replayed select) until they are cancelled.
        self.branches = 1
        self.parked = 0

    # -- positions -------------------------------------------------------------------------

    def position(self) -> tuple[int, int, int | None]:
        """(the seq the calling branch claimed last, its position token, its legacy token)."""
        serial, seq, token, legacy, _ = _branch.get()
        return (seq, token, legacy) if serial == self.serial else (0, 0, None)

    def token(self) -> int:
        serial, _, token, _, _ = _branch.get()
        return token if serial == self.serial else 0

    def begin(self) -> contextvars.Token[Any]:
        """Make the calling task the invocation's first branch, at the start of the journal.
        Returns the token that puts the caller's position back (`_branch.reset`) afterwards."""
        return _branch.set((self.serial, 0, 0, None, 0))

    def end(self, token: contextvars.Token[Any]) -> None:
        _branch.reset(token)

    def fork_point(self) -> tuple[int, int]:
        """Where a ctx.gather/ctx.select is called: the calling branch's token, and how many
        tasks it spawned there before (each gather or select at one position spawns anew)."""
        serial, _, token, _, spawned = _branch.get()
        return (token, spawned) if serial == self.serial else (0, 0)

    def enter_branch(self, point: tuple[int, int], index: int) -> None:
        """Start the calling task as branch `index` of a ctx.gather/ctx.select called at `point`.

        The first one at a position gives its branches the tokens journals always recorded;
        a later one at the same position (two gathers with no operation of the caller
        between them) derives them from its spawn count too, and keeps the old token as
        the branch's legacy one, for journals recorded when both shared it."""
        parent, spawned = point
        seq = self.position()[0]
        token = old = branch_token(parent, index)
        if spawned:
            token = branch_token(spawn_token(parent, spawned), index)
        _branch.set((self.serial, seq, token, old if spawned else None, 0))

    def _advance(self, seq: int, prev: int, kind: type[R], name: str | None, call_digest: int | None) -> None:
        _branch.set((self.serial, seq, position_after(prev, kind.__struct_config__.tag, name, call_digest), None, 0))

    # -- claims ----------------------------------------------------------------------------

    def claim(self, kind: type[R], name: str | None = None, call_digest: int | None = None) -> tuple[int, int, R | None]:
        """Claim the calling branch's next operation: `(seq, prev, recorded entry or None to run live)`.

        Raises what stopped the execution, `NondeterminismError` when the journal holds
        another operation here, `Cancelled` where cancellation was recorded, and in
        replay-only mode `EndOfJournal` where the operation would run live.
        """
        if self.lost is not None or self.broken is not None or self.divergence is not None:
            self.raise_if_stopped()
        after, last, legacy = self.position()
        self.claims += 1
        replayer = self.replayer
        found = None
        if replayer.unclaimed:  # once every recorded entry is replayed, the replayer has no say
            try:
                found = replayer.claim(last, kind, name, call_digest, legacy=legacy)
            except NondeterminismError as exc:
                self._halt(exc)
                raise
        if found is None:
            # Live: the lowest seq after the branch's last that the crashed run handed out but
            # never committed, so that later entries' `prev` links still line up.
            seq, recorded, taken, live = after + 1, None, replayer.seqs, self._live
            while seq in taken or seq in live:
                seq += 1
            live[seq] = None
            if seq > self._top:
                self._top = seq
            self._went_live(seq, last, kind, name, call_digest)
        else:
            seq, recorded = found
            self.checked += 1
            if legacy is not None and recorded.prev == legacy:
                last = legacy  # an old journal's path goes on from the shared position
        self._advance(seq, last, kind, name, call_digest)
        if recorded is not None and recorded.__class__ is CancelReceived:
            self.cancel_reason = self.cancel_reason or recorded.reason
            self.raise_cancelled(seq)
        # A recorded CancelReceived raised above (mypy does not narrow on `__class__ is`).
        return seq, last, recorded  # type: ignore[return-value]

    def _went_live(self, seq: int, last: int, kind: type[R], name: str | None, call_digest: int | None) -> None:
        if self.replay_only:
            terminal = self.replayer.terminal()
            if terminal is not None:
                self._halt(self.replayer.divergence(
                    seq, f"{type(terminal).__struct_config__.tag} (the recorded run ended there)",
                    _describe(kind, name, call_digest),
                    [f"the code makes a call after the point where the recorded invocation "
                     f"{type(terminal).__struct_config__.tag}"],
                ))
                raise self.divergence  # type: ignore[misc]
            self.stopped_at = seq if self.stopped_at is None else min(self.stopped_at, seq)
            if self.on_halt is not None:
                self.on_halt()
            raise EndOfJournal(seq)
        if last in self._live_at:
            raise TerminalError(
                f"invocation {self.invocation_id!r}: two concurrent branches made a context call from the same "
                f"point (seq {seq}), so a replay could not tell their journal entries apart. They run in tasks "
                "this runtime does not see being spawned (another event loop task factory, or threads); run "
                "concurrent context calls with `await ctx.gather(...)` instead"
            )
        self._live_at[last] = None

    def branch_started(self) -> None:
        self.branches += 1

    def branch_ended(self) -> None:
        self.branches -= 1

    def park(self, parked: bool) -> None:
        """The calling branch parks where it stops for good (True), or is released (False)."""
        self.parked += 1 if parked else -1

    @property
    def all_parked(self) -> bool:
        """Every live branch has stopped for good: nothing can claim anything more."""
        return self.parked >= self.branches

    def _halt(self, divergence: NondeterminismError) -> None:
        self.divergence = self.divergence or divergence
        if self.on_halt is not None:
            self.on_halt()

    def patched(self, change_id: str) -> tuple[int, int] | bool:
        """`ctx.patched(change_id)`: the same answer every time within an execution (the first
        one decides). Returns a bool, or `(seq, prev)` when the caller must journal the patch."""
        known = self._patches.get(change_id)
        if known is not None:
            return known
        self.raise_if_stopped()
        replayer = self.replayer
        if not replayer.exhausted or replayer.terminal() is not None:
            # Replaying: True only if the recorded run took the new path. A finished journal
            # took the old one wherever it does not say otherwise.
            after, last, legacy = self.position()
            seq = replayer.claim_recorded(last, Patched, change_id, legacy)
            if seq is not None:
                self.claims += 1
                self._advance(seq, last, Patched, change_id, None)
            self._patches[change_id] = seq is not None
            return seq is not None
        seq, prev, _ = self.claim(Patched, change_id)
        self._patches[change_id] = True
        return seq, prev

    # -- writes ----------------------------------------------------------------------------

    def buffer(self, seq: int, entry: Any) -> None:
        """Keep `entry` at `seq` to be written with the next append (synchronous operations)."""
        self.pending.append((seq, encode_entry(entry, self.max_entry_bytes)))

    def buffer_talk(self, talk: Talk) -> None:
        """Keep what a buffered entry changes beside the journal (`exit` durability) for the final append."""
        if self.pending_talk is None:
            self.pending_talk = Talk()
        kept = self.pending_talk
        kept.received += talk.received
        kept.replies += talk.replies
        kept.published += talk.published
        kept.types += talk.types

    def take_talk(self) -> Talk | None:
        talk, self.pending_talk = self.pending_talk, None
        return talk

    def buffer_state(self, name: str, raw: bytes | None) -> None:
        self.pending_state.append((name, raw))

    def take_writes(self, seq: int = 0, entry: Any = None) -> tuple[list[tuple[int, bytes]], Any, bool]:
        """What the next append writes: the buffered entries (then `entry` at `seq`), the
        state changes, and whether it consumes a cancel request."""
        entries, self.pending = self.pending, []
        if entry is not None:
            entries.append((seq, encode_entry(entry, self.max_entry_bytes)))
        state, self.pending_state = self.pending_state or None, []
        seen, self._cancel_seen = self._cancel_seen, False
        return entries, state, seen

    def take_tags(self) -> list[tuple[str, str]] | None:
        """The tags the next append sets on the record (with the entries that record them)."""
        tags, self.pending_tags = self.pending_tags or None, []
        return tags

    def take_final(self, entry: Any | None) -> tuple[list[tuple[int, bytes]], Any, bool]:
        """`take_writes` for the append that ends the execution, with its final `entry`."""
        if entry is None:
            return self.take_writes(0, None)
        self._top += 1  # after everything recorded or handed out
        self._live[self._top] = None
        return self.take_writes(self._top, entry)

    def note_prior(self, seq: int, change: StateSet) -> None:
        """A live first change of a state name, which records what the name was before."""
        self._priors.setdefault(change.name, (seq, change))

    def roll_back(self) -> list[str]:
        """For `cancel --rollback`: queue, after every buffered change, the writes that give each
        state name this invocation changed the value it had before; returns those names."""
        firsts: dict[str, tuple[int, StateSet]] = {}
        changed: set[str] = set()
        for seq, change in [*self.replayer.recorded_of(StateSet), *self._priors.values()]:
            changed.add(change.name)
            if change.prior and (change.name not in firsts or seq < firsts[change.name][0]):
                firsts[change.name] = (seq, change)
        unknown = sorted(changed - set(firsts))
        if unknown:
            raise TerminalError(
                f"invocation {self.invocation_id!r} cannot roll back state {', '.join(map(repr, unknown))}: "
                "those changes were journaled by a version that did not record the values before them"
            )
        for name, (_, change) in sorted(firsts.items()):
            self.pending_state.append((name, bytes(change.was) if change.prior == PRIOR_SET else None))
        return sorted(firsts)

    def abandon_writes(self) -> None:
        """Forget what is buffered: the journal ends where the execution diverged."""
        self.pending, self.pending_state, self.pending_talk, self.pending_tags = [], [], None, []

    # -- waits: run on, wait here, or suspend ---------------------------------------------

    def went_on(self) -> bool:
        """Whether the recorded run made another operation after the calling branch's last one."""
        return self.replayer.goes_on_from(self.token())

    def timer_wait(self, until: int, now: int, inline_limit: float) -> str:
        """What a timer due at `until` does now: "due" (go on), "suspend" (too far off to wait
        for in this process), or "wait" here (near enough, or a cancel is to be delivered)."""
        remaining = (until - now) / 1e6
        if remaining <= 0:
            return "due"
        if remaining > inline_limit and not self.cancel_due:
            return "suspend"
        return "wait"

    def promise_wait(self, resolved: bool, deadline: int | None, now: int) -> str:
        """What a live promise does: "resolved", "timed out" (its deadline passed), or "suspend"."""
        if resolved:
            return "resolved"
        if deadline is not None and now >= deadline:
            return "timed out"
        return "suspend"

    # -- cancellation and stopping ---------------------------------------------------------

    def request_cancel(self, reason: str) -> bool:
        if self.cancel_reason is None:
            self.cancel_reason = reason
            return True
        return False

    @property
    def cancel_due(self) -> bool:
        """A cancel was requested and the handler has not received it yet."""
        return self.cancel_reason is not None and not self.cancel_delivered

    def cancel_entry(self, prev: int, at: int | None = None) -> CancelReceived:
        return CancelReceived(now_us() if at is None else at, self.cancel_reason or "", prev)

    def raise_cancelled(self, seq: int) -> NoReturn:
        self.cancel_delivered = True
        self._cancel_seen = True
        raise Cancelled(f"invocation {self.invocation_id!r} was cancelled (at seq {seq})")

    def stop(self, error: Exception) -> None:
        if isinstance(error, LeaseLost):
            self.lost = self.lost or error
        else:
            self.broken = self.broken or error

    def raise_if_stopped(self) -> None:
        if self.lost is not None:
            raise self.lost
        if self.broken is not None:
            raise self.broken
        if self.divergence is not None:
            raise self.divergence  # also to a handler that caught it and carried on

    # -- the end of the execution ----------------------------------------------------------

    def settle(self, now: int, *, result: Any = None, error: BaseException | None = None,
               interrupted: type[BaseException] = BaseException) -> Ending:
        """How the execution ends: its handler returned `result`, or raised `error` (a group's
        leaves are what count). `interrupted` is the class of a cancellation from outside
        (the event loop's own), and `now` the time the final entry records."""
        if error is None:
            if self.cancel_delivered:
                return self._cancelled(now)
            try:
                raw = encode_value(result)
            except UnencodableValue as exc:
                why = unjournalable(result, "the handler") or f"the handler's result cannot be journaled: {exc}"
                return self._failed(now, ErrorInfo("TerminalError", why))
            return Ending("write", Status.COMPLETED, Completed(now, raw), {"result": raw})
        leaves = _leaves(error)
        if self.lost is not None or any(isinstance(e, LeaseLost) for e in leaves):
            return Ending("reread")
        exits = [e for e in leaves if isinstance(e, SystemExit)]
        if exits and not self.cancel_delivered:
            # sys.exit() in handler code is the handler's own (deterministic) ending, not an
            # interruption: it fails the invocation instead of leaving it to fail again at
            # every resume, and the process running it carries on.
            code = exits[0].code
            return self._failed(now, ErrorInfo("SystemExit", f"the handler called sys.exit({code!r}); a handler ends "
                                               "by returning a value or raising an exception, never by exiting the "
                                               "process", True))
        if any(isinstance(e, (interrupted, KeyboardInterrupt, SystemExit)) for e in leaves):
            return Ending("give back", error=error)  # stopped from outside: stays resumable
        if self.broken is not None:
            # The store failed under the runtime (a full disk): nothing about the handler is decided.
            return Ending("give back", error=self.broken)
        if any(isinstance(e, Restart) for e in leaves):
            return Ending("restart")
        if not any(isinstance(e, (Exception, Suspend, ContinueAsNew)) for e in leaves):
            return Ending("crash", error=error)  # an unknown BaseException: nothing is written, the lease lapses
        diverged = self.divergence or next((e for e in leaves if isinstance(e, NondeterminismError)), None)
        if diverged is not None and self.cancel_reason is not None:
            # Cancelling a diverged invocation abandons it: its journal ends where it diverged.
            self.abandon_writes()
            return self._cancelled(now, self.cancel_reason)
        if diverged is not None:
            return Ending("diverged", Status.DIVERGED, change={"divergence": str(diverged)})
        cont = next((e for e in leaves if isinstance(e, ContinueAsNew)), None)
        if cont is not None and not self.cancel_delivered:
            return Ending("continue", cont=cont)
        suspends = [e for e in leaves if isinstance(e, Suspend)]
        # Compensation after a cancel may wait too (for an approval, a timer): it suspends
        # like any other wait, and ends `cancelled` once it finishes.
        if suspends and not any(isinstance(e, Cancelled) for e in leaves):
            # Branches may wait on different things (select over a promise and a timer): wake on any.
            names = list(dict.fromkeys(name for e in suspends for name in e.names()))
            wakes = [e.wake_at for e in suspends if e.wake_at is not None]
            types = list({t.name: t for e in suspends for t in e.types}.values())
            return Ending("write", Status.SUSPENDED, None, {
                "waiting": names[0] if names else None, "waiting_any": names[1:], "wake_at": min(wakes, default=None),
                "promise_types": types})
        if self.cancel_delivered and all(isinstance(e, (Cancelled, Suspend)) for e in leaves):
            return self._cancelled(now)
        error_info, failing = _error_info(leaves)
        return self._failed(now, error_info, user_frames(failing))

    def _cancelled(self, now: int, reason: str | None = None) -> Ending:
        return Ending("write", Status.CANCELLED, CancelledEntry(now, reason or self.cancel_reason or ""))

    def _failed(self, now: int, error: ErrorInfo, frames: list[Frame] | None = None) -> Ending:
        return Ending("write", Status.FAILED, Failed(now, error, frames or []), {"error": error})

    # -- deterministic randomness ----------------------------------------------------------

    # Randomness and ids derive from the invocation id and the branch's position, not from a
    # counter shared by all branches: concurrent branches draw the same numbers on replay
    # whatever order they are scheduled in.

    def random(self) -> _random.Random:
        position = self.token()
        generator = self._randoms.get(position)
        if generator is None:
            seed = hashlib.blake2b(f"{self.invocation_id}\x00random\x00{position}".encode(), digest_size=8).digest()
            generator = self._randoms[position] = _random.Random(int.from_bytes(seed, "big"))
        return generator

    def uuid(self) -> _uuid.UUID:
        position = self.token()
        count = self._uuids[position] = self._uuids.get(position, 0) + 1
        raw = hashlib.blake2b(f"{self.invocation_id}\x00{position}\x00{count}".encode(), digest_size=16).digest()
        return _uuid.UUID(bytes=raw, version=4)


def _describe(kind: type[R], name: str | None, call_digest: int | None) -> str:
    tag = str(kind.__struct_config__.tag)
    text = tag if name is None else f"{tag} {name!r}"
    return text if call_digest is None else f"{text} (args digest {call_digest:016x})"


def _error_info(leaves: list[BaseException]) -> tuple[ErrorInfo, BaseException]:
    """The error the invocation fails with, and the exception it is (whose frames are journaled)."""
    exc = next((e for e in leaves if not isinstance(e, Suspend)), leaves[0])
    if isinstance(exc, TerminalError):
        return ErrorInfo(exc.type_name, exc.message or str(exc), True), exc
    return ErrorInfo(type(exc).__qualname__, str(exc) or type(exc).__qualname__, True), exc
