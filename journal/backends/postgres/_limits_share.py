"""A process's share of an uncontended limit on PostgreSQL: taken in one call, used without any.

A step under a limit on PostgreSQL costs a call to the server to take its units (the release
rides on the next one), which on a quiet server about doubled a `sync` step. Where the rows as
this process last saw them show plenty of room (`_logic.acquire_share`: nobody waits, the
concurrency at most half taken, a rate window at most half full), the call that acquires for a
step takes instead one concurrency unit under a hold of its own (the share's) and a block of
rate units at once. The steps of this process under exactly those names then use it one at a
time, each taking one of its rate units, with no call: the step's hold id maps onto the share.

A share ends, its unit given back by the next call as any release, when its rate units are used
up, after `LIFE` (so a rule changed or a line formed elsewhere is seen again well within a
second), when this process sees someone wait on one of its names or its concurrency more than
half taken, when this process changes the rules, pauses one of its names or lists the limits,
and when the engine settles. Its rate units are counted in the window at the end of its life,
so each counts for a whole period after whenever it is used; those left unused when it ends
are taken out of the window again with its hold's release (until then the window counts more
than was used, never less). A process that dies drops its share as any hold, with its session,
and its unused rate units stay counted until their window passes.
"""

from __future__ import annotations

import time

from ...limits import LimitRule, _logic

LIFE = 0.05  # seconds a share lives at most
LIFE_US = int(LIFE * 1e6)
SUFFIX = "~share"  # a share's hold id: the id of the step's hold that took it, and this


class Share:
    """One share: its hold in the store (`hid`, of `names` for `owner`), the rate units it has
    left (None: no rate to count), until when it may be used (monotonic), the rules it was taken
    under (`known`, the table's `_known` then) and the state rows as seen then, the hold id of the
    attempt using it now, the tokens its users reported, whether it has ended and whether its
    hold has been given back, and the window's buckets it counted its rate units in."""

    __slots__ = ("hid", "names", "owner", "left", "until", "known", "seen", "user", "used", "ended", "returned",
                 "counted")

    def __init__(self, hid: str, names: tuple[str, ...], owner: str, left: int | None, until: float,
                 known: tuple[float, dict[str, LimitRule]], seen: dict[tuple[str, bytes], bytes | None],
                 user: str, counted: tuple[tuple[str, bytes], ...]) -> None:
        self.hid = hid
        self.names = names
        self.owner = owner
        self.left = left
        self.until = until
        self.known = known
        self.seen = seen
        self.user: str | None = user
        self.used = 0
        self.ended = False  # no step may use it any more
        self.returned = False  # its hold is given back (with the next call)
        self.counted = counted  # the buckets its rate units were counted in

    def usable(self, known: tuple[float, dict[str, LimitRule]] | None, rows: dict[tuple[str, bytes], bytes | None],
               ) -> bool:
        """Whether the next step may use it: rate units left, young enough, the rules those it
        was taken under, and its names' state rows as this process saw them since still roomy."""
        if (self.left is not None and self.left <= 0) or time.monotonic() >= self.until or known is not self.known:
            return False
        for row, raw in self.seen.items():
            now = rows.get(row)
            if now is raw:
                continue
            if now is None:  # forgotten (or gone): not known to be roomy
                return False
            rule = _logic.rule_in(self.known[1], row[1].decode())
            if rule is None or not _logic.roomy(_logic.decode_state(now), rule, time.time_ns() // 1000):
                return False
            self.seen[row] = now
        return True
