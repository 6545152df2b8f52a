"""The deterministic replayer: matches each operation the handler issues with the journal.

Pure: no I/O, no clock, no async. Each operation claims a seq when it is called, and its
entry records `prev`, the position token of its branch (the task it runs in) before it
(see runtime/_replay/_branches.py). No two branches ever stand at the same position, so at most
one recorded entry follows a position, and an operation's claim is decided at once:

- an entry recorded after the branch's position that matches (same kind, name and
  argument digest) is replayed;
- an entry recorded there that does not match is a divergence, reported before any
  side effect: only this branch could have recorded it;
- nothing recorded there: the operation runs live (the journal ended there, or the
  process died before its entry was committed). The machine (runtime/_replay/_machine.py)
  then hands it the lowest seq after it that no recorded entry holds, and once every
  recorded entry was claimed it no longer asks the replayer at all.

So concurrent branches scheduled in another order on replay than when recorded (trio
shuffles them on purpose) each follow their own recorded path, and no branch ever waits
for another to find out whether the code diverged.

Journals recorded before spawned tasks had positions of their own hold several entries
after one position (a task group's branches shared their parent's). A spawned task that
has claimed nothing yet also looks there (its `legacy` token), and takes a matching
entry; it never reports a divergence against them, since they may be its siblings'.
"""

from __future__ import annotations

from typing import TypeGuard, TypeVar, cast

from journal import (
    TERMINAL_KINDS,
    Called,
    CancelReceived,
    Emitted,
    Entry,
    Now,
    Patched,
    Promise,
    Published,
    Received,
    Replied,
    Selected,
    Sleep,
    Started,
    StateGot,
    StateKeys,
    StateSet,
    Step,
    Tagged,
    kind_of,
    name_of,
)

from ..errors import NondeterminismError

# The entries that a handler's operations record (every one carries `prev`): all that
# follow entry 0 (`Started`) except an invocation's terminal entry.
Recorded = (
    Step | Now | Sleep | Promise | Emitted | Patched | CancelReceived | StateGot | StateSet | StateKeys
    | Called | Selected | Received | Replied | Published | Tagged
)
R = TypeVar("R", bound=Recorded)

_LIKELY_CAUSE = (
    "Likely cause: the handler's code changed since this invocation was recorded (a step renamed, "
    "added, removed or reordered, or its arguments changed), or it branches on something that is "
    "not journaled (the wall clock, random numbers, set iteration order, environment variables)."
)


def describe(kind: str, name: str | None, digest: int | None = None) -> str:
    text = kind if name is None else f"{kind} {name!r}"
    if digest is not None:
        text += f" (args digest {digest:016x})"
    return text


def _tag(kind: type[R]) -> str:
    return str(kind.__struct_config__.tag)


class Replayer:
    """Checks each operation against the recorded entries, and finds the one to replay."""

    def __init__(self, invocation_id: str, entries: dict[int, Entry]) -> None:
        self.invocation_id = invocation_id
        self._entries = cast(  # entry 0 is the only `Started` (journal/_entries.py)
            dict[int, Recorded],
            {s: e for s, e in entries.items() if s > 0 and not isinstance(e, TERMINAL_KINDS)})
        self._start = entries.get(0)
        self._terminal = next((e for e in entries.values() if isinstance(e, TERMINAL_KINDS)), None)
        self.unclaimed = set(self._entries)  # read by the machine: empty once every entry was replayed
        self.seqs = self._entries.keys()  # the seqs recorded entries hold: never handed out live
        self.top = max(entries, default=0)  # the highest seq recorded (the terminal entry's, if any)
        self._by_prev: dict[int, list[int]] = {}
        for seq in sorted(self._entries):
            self._by_prev.setdefault(getattr(self._entries[seq], "prev", 0), []).append(seq)

    # -- what was recorded -----------------------------------------------------------------

    @property
    def replayed(self) -> int:
        """How many recorded entries (besides `started`) the handler has matched so far."""
        return len(self._entries) - len(self.unclaimed)

    def started(self) -> Started:
        if not isinstance(self._start, Started):
            raise NondeterminismError(
                f"invocation {self.invocation_id!r} has no start entry at seq 0; run `journal check`",
                invocation_id=self.invocation_id, seq=0,
            )
        return self._start

    def terminal(self) -> Entry | None:
        return self._terminal

    @property
    def exhausted(self) -> bool:
        """True once every recorded entry was claimed: operations from now on run live."""
        return not self.unclaimed

    def recorded(self, seq: int) -> Recorded | None:
        return self._entries.get(seq)

    def goes_on_from(self, position: int) -> bool:
        """Whether the journal records an operation made from branch position `position`:
        the recorded run got past whatever stood there (a timer that ended, for one)."""
        return bool(self._by_prev.get(position))

    def recorded_of(self, kind: type[R]) -> list[tuple[int, R]]:
        """Every recorded entry of `kind`, claimed or not, in seq order."""
        return [(seq, entry) for seq, entry in sorted(self._entries.items()) if type(entry) is kind]

    # -- claiming --------------------------------------------------------------------------

    def claim(self, last: int, kind: type[R], name: str | None = None, digest: int | None = None, *,
              legacy: int | None = None) -> tuple[int, R | CancelReceived] | None:
        """The recorded entry an operation whose branch stands at position `last` replays, as
        `(seq, entry)`, or None if nothing is recorded there (it runs live); `legacy` see the
        module doc. Raises `NondeterminismError` when the entry recorded at this position is
        another operation. A recorded `CancelReceived` there is returned whatever the
        operation: cancellation was delivered at that point of the branch.
        """
        if not self.unclaimed:
            return None
        candidates = [s for s in self._by_prev.get(last, ()) if s in self.unclaimed]
        for seq in candidates:
            entry = self._entries[seq]
            if isinstance(entry, CancelReceived) or _matches(entry, kind, name, digest):
                return self._take(seq, entry)
        if candidates:
            raise self._report(candidates[0], self._entries[candidates[0]], kind, name, digest)
        if legacy is not None:
            for seq in self._by_prev.get(legacy, ()):
                entry = self._entries[seq]
                if seq in self.unclaimed and _matches(entry, kind, name, digest):
                    return self._take(seq, entry)
        return None

    def claim_recorded(self, last: int, kind: type[Recorded], name: str | None = None, legacy: int | None = None) -> int | None:
        """Claim the recorded entry after `last` that matches, if there is one; never goes live."""
        for prev in (last, legacy):
            for seq in self._by_prev.get(prev, ()) if prev is not None else ():
                if seq in self.unclaimed and _matches(self._entries[seq], kind, name, None):
                    return self._take(seq, self._entries[seq])[0]
        return None

    def _take(self, seq: int, entry: R) -> tuple[int, R]:
        self.unclaimed.discard(seq)
        return seq, entry

    # -- divergence ------------------------------------------------------------------------

    def check_finished(self) -> None:
        """The handler returned: a recorded operation it never reached is a divergence."""
        if not self.unclaimed:
            return
        left = sorted(self.unclaimed)
        entry = self._entries[left[0]]
        raise self.divergence(
            left[0], describe(kind_of(entry), name_of(entry)), "nothing: the handler returned",
            [f"{len(left)} recorded entr{'y' if len(left) == 1 else 'ies'} from seq {left[0]} on were not replayed"],
        )

    def _report(self, seq: int, entry: Entry, kind: type[R], name: str | None, digest: int | None) -> NondeterminismError:
        held_digest = getattr(entry, "digest", None)
        held = describe(kind_of(entry), name_of(entry), held_digest if digest is not None else None)
        diffs = []
        if type(entry) is not kind:
            diffs.append(f"kind: journal {kind_of(entry)!r}, code {_tag(kind)!r}")
        if name_of(entry) != name:
            diffs.append(f"name: journal {name_of(entry)!r}, code {name!r}")
        if type(entry) is kind and name_of(entry) == name and digest is not None and held_digest != digest:
            diffs.append("arguments: the call's arguments differ from the recorded ones")
        return self.divergence(seq, held, describe(_tag(kind), name, digest), diffs)

    def divergence(self, seq: int, held: str, asked: str, diffs: list[str]) -> NondeterminismError:
        lines = [
            f"nondeterminism in invocation {self.invocation_id!r} at seq {seq}:",
            f"  journal has: {held}",
            f"  code asked:  {asked}",
        ]
        lines += [f"  - {d}" for d in diffs]
        lines += [
            _LIKELY_CAUSE,
            f"Fix: restore the recorded code path (or guard new code with ctx.patched(...)) and run "
            f"`journal resume {self.invocation_id}`, or continue from before the divergence with "
            f"`journal fork {self.invocation_id} --at {seq}`.",
        ]
        return NondeterminismError("\n".join(lines), invocation_id=self.invocation_id, seq=seq)


def _matches(entry: Recorded, kind: type[R], name: str | None, digest: int | None) -> TypeGuard[R]:
    return (
        type(entry) is kind
        and name_of(entry) == name
        and (digest is None or getattr(entry, "digest", None) == digest)
    )
