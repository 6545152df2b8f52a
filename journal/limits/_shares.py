"""A process's share of an uncontended limit: taken in one call to the store, used without any.

A step under a limit costs a call to the store to take its units and another to give them back
(on PostgreSQL a round trip, which on a quiet server about doubled a `sync` step; on LMDB two
write transactions of the limits' own environment). Where the rows show plenty of room
(`_logic.acquire_share`: nobody waits, the concurrency at most half taken, a rate window at most
half full), the call that acquires for a step takes instead one concurrency unit under a hold of
its own (the share's) and a block of rate units at once. The steps of this process under exactly
those names then use it one at a time, each taking one of its rate units, with no call: the
step's hold id maps onto the share.

A share ends, its unit given back as any release, when its rate units are used up, after `LIFE`
(so a rule changed or a line formed elsewhere is seen again well within a second), when this
process sees someone wait on one of its names or its concurrency more than half taken (the
backend says how it sees that: `_share_usable`), when this process changes the rules, pauses one
of its names or lists the limits, and when the engine settles. Its rate units are counted in the
window at the end of its life, so each counts for a whole period after whenever it is used;
those left unused when it ends are taken out of the window again with its hold's release (until
then the window counts more than was used, never less). A process that dies drops its share as
any hold, and its unused rate units stay counted until their window passes.

A share still in use when its life ends goes back when its step ends; one idle then goes back
at once. A thread of the table's own (`_reap`) ends it `_REAP_AFTER` seconds after its life,
whether or not the event loop that took it still runs; a backend may end it sooner itself
(PostgreSQL, on the event loop, where its give-back rides with the loop's next call).
"""

from __future__ import annotations

import abc
import logging
import threading
import time

from ..kv._rules import Txn
from . import _logic
from ._logic import Request
from ._model import LimitRule, LimitView
from ._table import LimitTable

LIFE = 0.05  # seconds a share lives at most (a backend may give its shares a shorter life)
LIFE_US = int(LIFE * 1e6)
_REAPER_IDLE = 1.0  # seconds the thread that ends shares waits for one before it ends too
_log = logging.getLogger("journal.limits")
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
            if now == raw:  # (on PostgreSQL, mostly the very bytes seen)
                continue
            if now is None:  # forgotten (or gone): not known to be roomy
                return False
            rule = _logic.rule_in(self.known[1], row[1].decode())
            if rule is None or not _logic.roomy(_logic.decode_state(now), rule, time.time_ns() // 1000):
                return False
            self.seen[row] = now
        return True


def give_back(txn: Txn, share: Share, now: int) -> bool:
    """Give back `share`'s hold: the tokens its users reported, and the rate units it never
    used taken out of its window (whether a unit went back to a line, as `_logic.release`)."""
    return _logic.release_share(txn, share.hid, share.names, share.used or None, now, share.known[1],
                                share.left or 0, share.counted)


class SharingTable(LimitTable):
    """A `LimitTable` whose steps may go on shares. The backend takes a share in its own call
    (`_logic.acquire_share`, then `_new_share`), says whether one may still be used
    (`_share_usable`) and gives one back (`_return_share`); the bookkeeping is here."""

    # Seconds after a share's life its table's thread ends it, if nothing has (a backend that
    # ends its shares itself while its event loop runs waits longer).
    _REAP_AFTER = 0.0

    def __init__(self) -> None:
        # By (names, owner), the share steps may use next; by the hold id of the step attempt
        # using one, that share. Changed under `_share_lock` (a thread listing the limits or
        # pausing a name ends them).
        self._shares: dict[tuple[tuple[str, ...], str], Share] = {}
        self._users: dict[str, Share] = {}
        self._share_lock = threading.RLock()  # (re-entered: `_use_share` -> `_share_usable` -> a backend's)
        # The thread that ends shares at the end of their life (`_reap`), started with the first;
        # `_reaper_asleep` while it waits with no share to end (a new one must wake it).
        self._reaper: threading.Thread | None = None
        self._reaper_asleep = False
        self._reaper_wake = threading.Condition(self._share_lock)
        self._reaper_stopped = False

    @abc.abstractmethod
    def _share_usable(self, share: Share) -> bool:
        """Whether the next step may use `share` (`Share.usable`, over the rows as the backend sees them)."""

    @abc.abstractmethod
    def _return_share(self, share: Share, awaited: bool) -> None:
        """Give back the hold of `share`, ended and used by no step (`give_back`);
        `awaited`: someone in this process waits for a unit."""

    def _may_share(self, request: Request) -> bool:
        """Whether `request` is a step's attempt (no tokens to count, no invocation's claim or
        place in line), the only kind that goes on a share."""
        return request.tokens == 0 and request.claim == 0 and request.arrival is None

    def _use_share(self, request: Request) -> bool:
        """Whether `request` goes on this process's share of its names (granted, with no call)."""
        if request.hid in self._users:
            return True  # (granted already)
        share = self._shares.get((request.names, request.owner))
        if share is None or share.user is not None or not self._may_share(request):
            return False  # none, busy with another attempt, or not for this one: it takes the ordinary path
        with self._share_lock:
            if share.ended or share.user is not None:
                return False
            usable = self._share_usable(share)
            if usable:
                share.user = request.hid
                self._users[request.hid] = share
                if share.left is not None:
                    share.left -= 1
        if not usable:
            self._end_share(share)
        return usable

    def _new_share(self, request: Request, user: str, units: int | None, until: float,
                   counted: tuple[tuple[str, bytes], ...], known: tuple[float, dict[str, LimitRule]],
                   seen: dict[tuple[str, bytes], bytes | None]) -> None:
        """The share the last call took (`request`, with the share's hold id) under the rules
        `known` (`_known` then), in use by the step attempt `user` that took it, the state rows as
        that call left them (`seen`); it ends by itself at `until`."""
        share = Share(request.hid, request.names, request.owner, None if units is None else units - 1, until,
                      known, seen, user, counted)
        key = (request.names, request.owner)
        with self._share_lock:
            self._users[user] = share
            if key in self._shares:  # (another task took one meanwhile: this one serves its taker only)
                share.ended = True
            else:
                self._shares[key] = share
        self._end_later(share)

    def _end_later(self, share: Share) -> None:
        """Have `_share_expired(share)` called once its life is over (by `_reap`)."""
        with self._reaper_wake:
            if self._reaper_stopped:
                return
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="journal-limit-shares", daemon=True)
                self._reaper.start()
            elif self._reaper_asleep:
                self._reaper_wake.notify()

    def _reap(self) -> None:
        """End each share `_REAP_AFTER` after its life, until the table closes or no share has
        been taken for `_REAPER_IDLE` (a thread: an event loop that took a share may have ended
        before it does; a store dropped unclosed keeps no thread)."""
        after = self._REAP_AFTER
        idle_since: float | None = None
        while True:
            with self._reaper_wake:
                if self._reaper_stopped:
                    return
                now = time.monotonic()
                live = [s for s in (*self._shares.values(), *self._users.values()) if not s.ended]
                due = [s for s in live if s.until + after <= now]
                if not live:
                    if idle_since is None:
                        idle_since = now
                    elif now - idle_since >= _REAPER_IDLE:
                        self._reaper = None  # (decided under the lock: the next share starts another)
                        return
                    self._reaper_asleep = True
                    self._reaper_wake.wait(idle_since + _REAPER_IDLE - now)
                    self._reaper_asleep = False
                    continue
                idle_since = None
                if not due:
                    self._reaper_wake.wait(min(s.until for s in live) + after - now + 0.0005)
                    continue
            for share in due:
                try:
                    self._share_expired(share)
                except Exception as exc:  # (its unit goes back when this process ends: said, not lost silently)
                    _log.warning("could not give back a share of limits %s: %s", ", ".join(share.names), exc)
            try:
                self._reaped()
            except Exception as exc:  # (the thread goes on: the next shares must still end)
                _log.warning("could not give back units of limits: %s", exc)

    def _reaped(self) -> None:
        """After the thread ended shares (a backend that keeps give-backs for later sends them)."""

    def _stop_reaper(self, wait: float | None = None) -> None:
        """Stop the thread that ends shares, and wait for it (at most `wait` seconds) if it is
        giving one back: the table closes."""
        with self._reaper_wake:
            self._reaper_stopped = True
            self._reaper_wake.notify()
            reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(wait)

    def _share_expired(self, share: Share) -> None:
        """Its life is over: no further step uses it, and it goes back now, or when the step on
        it ends. (Its step's release may have come a moment before `until` and left it: a timer
        may fire early, uvloop's by up to a millisecond.)"""
        if not share.ended:
            self._end_share(share, awaited=True)

    def _share_of(self, hid: str, used_tokens: int | None) -> Share | None:
        """The share the step attempt `hid` used, now free of it (None: it used none)."""
        with self._share_lock:
            share = self._users.pop(hid, None)
            if share is not None:
                share.user = None
                share.used += used_tokens or 0
        return share

    def _end_share(self, share: Share, awaited: bool = False) -> None:
        """No step uses `share` any more: its hold goes back once the step using it (if any) ends."""
        with self._share_lock:
            key = (share.names, share.owner)
            if self._shares.get(key) is share:
                del self._shares[key]
            share.ended = True
            if share.user is not None or share.returned:
                return
            share.returned = True
        self._return_share(share, awaited)

    def _end_shares(self, names: tuple[str, ...] | None = None) -> None:
        """End this process's shares (those of any of `names`)."""
        for share in list(self._users.values()) + list(self._shares.values()):
            if names is None or any(name in share.names for name in names):
                self._end_share(share)

    def _close_shares(self) -> None:
        """End every share, those steps still use too (the store is closing)."""
        with self._share_lock:
            shares = [*self._users.values(), *self._shares.values()]
            for share in shares:
                share.user = None
            self._users.clear()
        for share in shares:
            self._end_share(share)

    def ls(self) -> list[LimitView]:
        self._end_shares()  # (this process's idle shares are not listed as units in use)
        return super().ls()

    def pause(self, names: tuple[str, ...], until_us: int) -> list[str]:
        self._end_shares(names)
        return super().pause(names, until_us)

    def set(self, name: str, rule: LimitRule) -> None:
        self._end_shares()
        super().set(name, rule)

    def remove(self, name: str) -> bool:
        self._end_shares()
        return super().remove(name)
