"""The deterministic replayer: a cursor over recorded entries.

Pure: no I/O, no clock, no async. Each context operation takes the next seq when it is
called (program order), then asks `match` for the entry recorded at that seq. A recorded
entry must be the same kind, name and argument digest as the call, or the invocation
diverged. When nothing is recorded at a seq the operation runs live.
"""

from __future__ import annotations

from typing import Any

from journal import TERMINAL_KINDS, CancelReceived, Entry, Started, kind_of, name_of

from .errors import NondeterminismError

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


class Replayer:
    """Hands out seqs and checks each operation against the journal."""

    def __init__(self, invocation_id: str, entries: dict[int, Entry]) -> None:
        self.invocation_id = invocation_id
        self._entries = entries
        self.next_seq = 1
        self._last_recorded = max((s for s, e in entries.items() if not isinstance(e, TERMINAL_KINDS)), default=0)

    @property
    def replaying(self) -> bool:
        """True while recorded entries lie ahead of the cursor (the handler is catching up)."""
        return self.next_seq <= self._last_recorded

    def take(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def started(self) -> Started:
        entry = self._entries.get(0)
        if not isinstance(entry, Started):
            raise NondeterminismError(
                f"invocation {self.invocation_id!r} has no start entry at seq 0; run `journal check`",
                invocation_id=self.invocation_id, seq=0,
            )
        return entry

    def terminal(self) -> Entry | None:
        return next((e for e in self._entries.values() if isinstance(e, TERMINAL_KINDS)), None)

    def match(self, seq: int, kind: type, name: str | None = None, digest: int | None = None) -> Any:
        """The entry recorded at `seq` for this operation, or None to run it live."""
        entry = self._entries.get(seq)
        if entry is None or isinstance(entry, CancelReceived):
            return entry
        recorded_digest = getattr(entry, "digest", None)
        if type(entry) is kind and name_of(entry) == name and (digest is None or recorded_digest == digest):
            return entry
        asked = describe(kind.__struct_config__.tag, name, digest)
        held = describe(kind_of(entry), name_of(entry), recorded_digest if digest is not None else None)
        diffs = []
        if type(entry) is not kind:
            diffs.append(f"kind: journal {kind_of(entry)!r}, code {kind.__struct_config__.tag!r}")
        if name_of(entry) != name:
            diffs.append(f"name: journal {name_of(entry)!r}, code {name!r}")
        if type(entry) is kind and digest is not None and recorded_digest != digest:
            diffs.append("arguments: the call's arguments differ from the recorded ones")
        raise self.divergence(seq, held, asked, diffs)

    def check_finished(self) -> None:
        """The handler returned: any recorded operation it never reached is a divergence."""
        left = sorted(s for s, e in self._entries.items() if s >= self.next_seq and not isinstance(e, TERMINAL_KINDS))
        if left:
            seq = left[0]
            entry = self._entries[seq]
            raise self.divergence(
                seq, describe(kind_of(entry), name_of(entry)), "nothing: the handler returned",
                [f"{len(left)} recorded entr{'y' if len(left) == 1 else 'ies'} from seq {seq} on were not replayed"],
            )

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
