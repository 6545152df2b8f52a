"""The rules of limits inside one transaction, written once for every backend.

Tables (a backend provides them as `journal.kv.Txn` tables):
    limit_rules   name                          -> LimitRule (an exact name or `PREFIX:*`)
    limit_state   name                          -> LimitState (a limited name's holders, waiters, pause)
    limit_events  name 0x00 kind end(u64 BE)    -> count (u64 BE): what each window counts, kind `r`
                  for the rate (grants) and `t` for tokens, in buckets of a hundredth of the period
                  that end at `end` (µs), in time order

A rate or tokens window holds wherever it starts (no burst beyond N in any PERIOD): each grant
is counted in the bucket of its time, and a bucket counts until its *end* has left the window,
a little longer than each of its grants would (at most a hundredth of the period: the price of
keeping a hundred keys per name instead of one per grant, so the table does not grow with the
rate). Buckets leave from the front as they expire (amortised O(1) a grant), and the state keeps
the running count and token sum of those still in the window, so an uncontended grant reads one
state and the oldest bucket, and writes both and the current bucket.

Waiters are served by priority (higher first), then by arrival: a request is granted only if
no live waiter comes before it on a name that limits it. A holder or a waiter whose process is
known dead (`alive` says so: a gone pid on this host, an ended database session) is dropped
when it stands in someone's way, so no unit leaks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import msgspec

from .._records import HOST
from ..kv._rules import Txn, pid_alive
from ._model import Blocked, Granted, Holder, LimitRule, LimitState, LimitView, Waiter, check_name

LIMIT_TABLES = ("limit_rules", "limit_state", "limit_events")

# A waiter asks again at least every second while it waits; one not seen for this long is
# gone (its process died on a host whose death nobody here can see).
WAITER_GONE_US = 30_000_000

_enc = msgspec.msgpack.Encoder()
_rule_dec = msgspec.msgpack.Decoder(LimitRule)
_state_dec = msgspec.msgpack.Decoder(LimitState)

Alive = Callable[[str, str, int], bool]  # (owner, host, pid) -> whether that process may still live


def local_alive(owner: str, host: str, pid: int) -> bool:
    """A holder on this host is alive while its pid is; of another host nothing is known."""
    return host != HOST or pid == os.getpid() or pid_alive(pid)


class Request(msgspec.Struct, frozen=True, gc=False):
    """One hold: units of `names` for one attempt of a step (or one run of an invocation)."""

    hid: str
    names: tuple[str, ...]
    owner: str
    host: str
    pid: int
    tokens: int = 0
    priority: int = 0
    label: str = ""
    arrival: int | None = None  # µs: its place in line (an invocation's creation time); default now
    claim: int = 0  # the execution's lease epoch, for an invocation's run (`Holder.claim`)


# -- rules -----------------------------------------------------------------------------------


def rule_in(known: dict[str, LimitRule], name: str) -> LimitRule | None:
    """`rule_for` among rules already read (`rules(txn)`): its own, else the longest `PREFIX:*`."""
    found = known.get(name)
    if found is not None:
        return found
    end = len(name)
    while (cut := name.rfind(":", 0, end)) > 0:
        found = known.get(name[: cut + 1] + "*")
        if found is not None:
            return found
        end = cut
    return None


def rule_for(txn: Txn, name: str) -> LimitRule | None:
    """The rule that limits `name`: its own, else the longest `PREFIX:*` that covers it."""
    raw = txn.get("limit_rules", name.encode())
    if raw is not None:
        return _rule_dec.decode(raw)
    end = len(name)
    while (cut := name.rfind(":", 0, end)) > 0:
        raw = txn.get("limit_rules", name[: cut + 1].encode() + b"*")
        if raw is not None:
            return _rule_dec.decode(raw)
        end = cut
    return None


def set_rule(txn: Txn, name: str, rule: LimitRule) -> None:
    txn.put("limit_rules", check_name(name, rule=True).encode(), _enc.encode(rule))


def remove_rule(txn: Txn, name: str) -> bool:
    key = name.encode()
    if txn.get("limit_rules", key) is None:
        return False
    txn.delete("limit_rules", key)
    return True


def rules(txn: Txn) -> dict[str, LimitRule]:
    return {key.decode(): _rule_dec.decode(raw) for key, raw in txn.scan("limit_rules", b"")}


# -- state -----------------------------------------------------------------------------------


def decode_state(raw: bytes) -> LimitState:
    return _state_dec.decode(raw)


def _state(txn: Txn, name: str) -> LimitState:
    raw = txn.get("limit_state", name.encode())
    return LimitState() if raw is None else _state_dec.decode(raw)


def _put_state(txn: Txn, name: str, state: LimitState) -> None:
    txn.put("limit_state", name.encode(), _enc.encode(state))


def _event_prefix(name: str, kind: bytes) -> bytes:
    return name.encode() + b"\x00" + kind


def _bucket_key(name: str, kind: bytes, at: int, period: float) -> tuple[bytes, int]:
    """The key of the bucket a grant at `at` counts in, and when that bucket ends (µs)."""
    length = max(1000, int(period * 1e6) // 100)
    end = (at // length + 1) * length
    return _event_prefix(name, kind) + end.to_bytes(8, "big"), end


def _add(txn: Txn, key: bytes, amount: int) -> tuple[int, int]:
    """Add `amount` (may be negative) to a bucket, not below 0: (before, after)."""
    raw = txn.get("limit_events", key)
    before = int.from_bytes(raw, "big") if raw is not None else 0
    after = max(0, before + amount)
    if after:
        txn.put("limit_events", key, after.to_bytes(8, "big"))
    elif raw is not None:
        txn.delete("limit_events", key)
    return before, after


def _prune(txn: Txn, name: str, state: LimitState, rule: LimitRule, now: int) -> None:
    """Drop the buckets that left their window (and every bucket of a window the rule no longer has)."""
    for kind, window in ((b"r", rule.rate), (b"t", rule.tokens)):
        rate = kind == b"r"
        if (state.rate_count if rate else state.tokens_in_window) == 0:
            continue
        horizon = now - int(window.period * 1e6) if window is not None else None
        oldest = state.rate_oldest if rate else state.tokens_oldest
        if horizon is not None and oldest > horizon:
            continue  # the oldest bucket still counts: nothing to look at (the uncontended path)
        prefix = _event_prefix(name, kind)
        gone: list[tuple[bytes, int]] = []
        oldest = 0
        for key, raw in txn.scan("limit_events", prefix):
            at = int.from_bytes(key[len(prefix): len(prefix) + 8], "big")
            if horizon is not None and at > horizon:
                oldest = at
                break
            gone.append((key, int.from_bytes(raw, "big")))
        for key, _amount in gone:
            txn.delete("limit_events", key)
        removed = sum(amount for _, amount in gone)
        if rate:
            state.rate_count, state.rate_oldest = max(0, state.rate_count - removed), oldest
        else:
            state.tokens_in_window, state.tokens_oldest = max(0, state.tokens_in_window - removed), oldest


def _oldest(txn: Txn, name: str, kind: bytes) -> int | None:
    prefix = _event_prefix(name, kind)
    for key, _ in txn.scan_some("limit_events", prefix, prefix, 1):
        return int.from_bytes(key[len(prefix): len(prefix) + 8], "big")
    return None


def _ahead(state: LimitState, request: Request, now: int, alive: Alive, dropped: list[str]) -> int:
    """How many waiters come before `request`. Those first in line that are gone (a dead owner,
    or unseen for long) leave it; behind the first live one, the others are counted as they are
    (asking a thousand pids on every acquisition would cost more than the line)."""
    mine = state.waiters.get(request.hid)
    arrival = mine.arrival if mine is not None else request.arrival if request.arrival is not None else now + 1
    place = (-request.priority, arrival, request.hid)
    ahead = sorted((-w.priority, w.arrival, wid) for wid, w in state.waiters.items()
                   if wid != request.hid and (-w.priority, w.arrival, wid) < place)
    for n, (_, _, wid) in enumerate(ahead):
        waiter = state.waiters[wid]
        if now - waiter.seen <= WAITER_GONE_US and alive(waiter.owner, waiter.host, waiter.pid):
            return len(ahead) - n
        del state.waiters[wid]
        dropped.append(wid)
    return 0


def _reap_holds(state: LimitState, alive: Alive) -> bool:
    verdicts: dict[tuple[str, str, int], bool] = {}  # (each process asked once: a look at /proc costs µs)
    dead = [hid for hid, h in state.holds.items() if not _asked(verdicts, alive, h.owner, h.host, h.pid)]
    for hid in dead:
        del state.holds[hid]
    return bool(dead)


def _asked(verdicts: dict[tuple[str, str, int], bool], alive: Alive, owner: str, host: str, pid: int) -> bool:
    """`alive(owner, host, pid)`, kept in `verdicts` for the rest of one look."""
    key = (owner, host, pid)
    verdict = verdicts.get(key)
    if verdict is None:
        verdict = verdicts[key] = alive(owner, host, pid)
    return verdict


def acquire(txn: Txn, request: Request, now: int, alive: Alive = local_alive,
            known: dict[str, LimitRule] | None = None) -> Granted | Blocked:
    """Take one unit of every limited name of `request` at once, or none and wait in line.

    Idempotent by `request.hid`: a request already granted is granted again (a retry whose
    answer was lost). Names without a rule limit nothing and are not touched."""
    limited: list[tuple[str, LimitRule, LimitState]] = []
    for name in request.names:
        rule = rule_for(txn, name) if known is None else known.get(name) or rule_in(known, name)
        if rule is not None:
            limited.append((name, rule, _state(txn, name)))
    if not limited:
        return Granted()
    if _free(limited, request, now):  # the uncontended path: what the rules below would do, decided at once
        _grant(txn, limited, request, now)
        return Granted()
    if all(request.hid in state.holds for _, _, state in limited):
        # Granted already (a retry whose answer was lost, or another process claiming the same
        # invocation): the holder is the latest to ask, so its death frees the unit.
        for name, _, state in limited:
            held = state.holds[request.hid]
            if request.claim < held.claim:
                # A look (claim 0), or an execution that has lost its lease to a later one: the
                # hold stays the later execution's, whose death (not the asker's) frees it.
                continue
            if (held.owner, held.pid, held.claim) != (request.owner, request.pid, request.claim):
                state.holds[request.hid] = Holder(request.owner, request.host, request.pid, held.at, held.tokens,
                                                  held.label, request.claim)
                _put_state(txn, name, state)
        return Granted()
    blocking: list[str] = []
    retry_at: int | None = None
    ahead = 0
    changed: set[str] = set()
    for name, rule, state in limited:
        _prune(txn, name, state, rule, now)
        why_at: int | None = None
        blocked = False
        if state.paused_until > now:
            blocked, why_at = True, state.paused_until
        if rule.concurrency is not None and len(state.holds) >= rule.concurrency:
            if _reap_holds(state, alive):
                changed.add(name)
            if len(state.holds) >= rule.concurrency:
                blocked = True
        if rule.rate is not None and state.rate_count + 1 > rule.rate.limit:
            blocked = True
            oldest = _oldest(txn, name, b"r")
            if oldest is not None:
                at = oldest + int(rule.rate.period * 1e6) + 1
                why_at = at if why_at is None else max(why_at, at)
        if rule.tokens is not None and state.tokens_in_window > 0 and (
            state.tokens_in_window + request.tokens > rule.tokens.limit
        ):
            blocked = True
            oldest = _oldest(txn, name, b"t")
            if oldest is not None:
                at = oldest + int(rule.tokens.period * 1e6) + 1
                why_at = at if why_at is None else max(why_at, at)
        if state.waiters:
            dropped: list[str] = []
            n = _ahead(state, request, now, alive, dropped)
            if dropped:
                changed.add(name)
            if n:
                blocked = True
                ahead = max(ahead, n)
        if blocked:
            blocking.append(name)
            if why_at is not None:
                retry_at = why_at if retry_at is None else min(retry_at, why_at)
    if blocking:
        for name, _, state in limited:
            mine = state.waiters.get(request.hid)
            if name in blocking:
                state.waiters[request.hid] = Waiter(
                    request.owner, request.host, request.pid, request.priority,
                    mine.arrival if mine is not None else request.arrival if request.arrival is not None else now,
                    now, request.label)
                changed.add(name)
            elif mine is not None:  # no longer blocked here: it waits on the others only
                del state.waiters[request.hid]
                changed.add(name)
        for name, _, state in limited:
            if name in changed:
                _put_state(txn, name, state)
        return Blocked(tuple(blocking), retry_at, ahead)
    _grant(txn, limited, request, now)
    return Granted()


def _free(limited: list[tuple[str, LimitRule, LimitState]], request: Request, now: int) -> bool:
    """Whether `request` is granted as it is, with nothing to look at: it holds none of the
    names yet, nobody waits on them, none is paused, and each has room in its concurrency and
    its windows, whose oldest buckets still count (nothing to prune)."""
    for _, rule, state in limited:
        if request.hid in state.holds or state.waiters or state.paused_until > now:
            return False
        if rule.concurrency is not None and len(state.holds) >= rule.concurrency:
            return False
        rate = rule.rate
        if rate is None:
            if state.rate_count:
                return False
        elif state.rate_count >= rate.limit or (state.rate_count
                                                and state.rate_oldest <= now - int(rate.period * 1e6)):
            return False
        window = rule.tokens
        if window is None:
            if state.tokens_in_window:
                return False
        elif state.tokens_in_window and (state.tokens_in_window + request.tokens > window.limit
                                         or state.tokens_oldest <= now - int(window.period * 1e6)):
            return False
    return True


def _grant(txn: Txn, limited: list[tuple[str, LimitRule, LimitState]], request: Request, now: int,
           units: int = 1, counted_at: int = 0) -> None:
    """Grant `request`; `units` rate units counted at `counted_at` (µs, default now): a share's."""
    for name, rule, state in limited:
        if state.waiters:
            state.waiters.pop(request.hid, None)
        state.holds[request.hid] = Holder(request.owner, request.host, request.pid, now, request.tokens, request.label,
                                          request.claim)
        if rule.rate is not None:
            key, end = _bucket_key(name, b"r", counted_at or now, rule.rate.period)
            _add(txn, key, units)
            state.rate_count += units
            if not state.rate_oldest or end < state.rate_oldest:  # (a share's bucket may end after later ones)
                state.rate_oldest = end
        if rule.tokens is not None and request.tokens:
            key, end = _bucket_key(name, b"t", now, rule.tokens.period)
            _add(txn, key, request.tokens)
            state.tokens_in_window += request.tokens
            state.tokens_oldest = state.tokens_oldest or end
        _put_state(txn, name, state)


# -- shares ----------------------------------------------------------------------------------

SHARE_UNITS = 16  # rate units a share takes at most (unless the backend says): at most 1% of the rule's N


def share_units(known: dict[str, LimitRule], names: tuple[str, ...], most: int = SHARE_UNITS) -> int | None:
    """The rate units a share of `names` would take (None: no rate to count, the share ends by
    age only), or 0 when a share cannot be had: a tokens window (each step's estimate and usage
    count there), or a rate too small for a block of two to be under 1% of it."""
    units: int | None = None
    for name in names:
        rule = rule_in(known, name)
        if rule is None:
            continue
        if rule.tokens is not None:
            return 0
        if rule.rate is not None:
            units = min(most if units is None else units, rule.rate.limit // 100)
            if units < 2:
                return 0
    return units


def acquire_share(txn: Txn, request: Request, now: int, until: int, units: int | None,
                  known: dict[str, LimitRule]) -> list[tuple[str, bytes]] | None:
    """Take a share of `request.names` for the hold `request.hid`, if every limited name has
    plenty of room: one concurrency unit (with the holders after it at most half the limit),
    and `units` rate units at once (the window's count after them at most half of N), counted
    in the bucket of `until`, the end of the share's life, so each of them counts for a whole
    period after whichever moment of that life it is used. The buckets it counted them in, for
    `return_units` (None: no share, nothing written). A share is for a process's steps one at a
    time, with no call to the store each (`journal/backends/postgres/_limits.py`)."""
    limited: list[tuple[str, LimitRule, LimitState]] = []
    for name in request.names:
        rule = rule_in(known, name)
        if rule is not None:
            limited.append((name, rule, _state(txn, name)))
    if not limited:
        return None
    for _, rule, state in limited:
        if rule.tokens is not None:
            return None
        if rule.concurrency is not None and 2 * (len(state.holds) + 1) > rule.concurrency:
            return None
        if rule.rate is not None and (units is None or 2 * (state.rate_count + units) > rule.rate.limit):
            return None
    if not _free(limited, request, now):
        return None
    _grant(txn, limited, request, now, units or 1, until)
    return [(name, _bucket_key(name, b"r", until, rule.rate.period)[0]) for name, rule, _ in limited
            if rule.rate is not None]


def return_units(txn: Txn, counted: tuple[tuple[str, bytes], ...], units: int) -> None:
    """Take `units` rate units a share counted in the buckets `counted` and never used out of
    their windows again (a bucket gone since, with its window, has nothing left to take)."""
    for name, key in counted:
        raw = txn.get("limit_state", name.encode())
        if raw is None:
            continue
        before, after = _add(txn, key, -units)
        if before != after:
            state = _state_dec.decode(raw)
            state.rate_count = max(0, state.rate_count - (before - after))
            _put_state(txn, name, state)


def release_share(txn: Txn, hid: str, names: tuple[str, ...], used_tokens: int | None, now: int,
                  known: dict[str, LimitRule] | None, unused: int, counted: tuple[tuple[str, bytes], ...]) -> bool:
    """Give back a share's hold `hid` (`release`), and take the `unused` rate units it counted
    in the buckets `counted` out of their windows again, once: a give-back sent again (a call
    whose answer was lost, or another connection's call that carried it meanwhile) finds the
    hold gone and takes nothing out a second time, which would leave the window counting fewer
    steps than ran."""
    held = unused > 0 and any(hid in _state(txn, name).holds for name, _ in counted)
    waited = release(txn, hid, names, used_tokens, now, known)
    if held:
        return_units(txn, counted, unused)
    return waited


def roomy(state: LimitState, rule: LimitRule, now: int) -> bool:
    """Whether a share of a name may go on, as its state was last seen: nobody waits, it is not
    paused, and its concurrency is at most half taken."""
    return not state.waiters and state.paused_until <= now and (
        rule.concurrency is None or 2 * len(state.holds) <= rule.concurrency)


def release(txn: Txn, hid: str, names: tuple[str, ...], used_tokens: int | None, now: int,
            known: dict[str, LimitRule] | None = None, claim: int | None = None) -> bool:
    """Give back `hid`'s units; `used_tokens` (what the step reported) replaces its estimate
    in the tokens window, so an estimate too high is given back and one too low charged.
    With `claim`, only a hold of that claim or an earlier one goes back (`Holder.claim`; lease
    epochs only grow): an execution gives back what a look or an earlier execution of the same
    invocation took, never what a later one has taken over since. Whether a unit went back to a limit
    others wait for (a store whose workers sleep between looks wakes them)."""
    waited = False
    for name in names:
        raw = txn.get("limit_state", name.encode())
        if raw is None:
            continue
        state = _state_dec.decode(raw)
        holder = state.holds.get(hid)
        if holder is not None and (claim is None or holder.claim <= claim):
            del state.holds[hid]
        else:
            holder = None  # (another claim's: it stays)
        waiter = state.waiters.pop(hid, None)
        if holder is None and waiter is None:
            continue
        if holder is not None:
            charged = holder.tokens
            if used_tokens is not None:
                charged = used_tokens
                rule = rule_for(txn, name) if known is None else rule_in(known, name)
                if rule is not None and rule.tokens is not None and used_tokens != holder.tokens:
                    key, end = _bucket_key(name, b"t", holder.at, rule.tokens.period)
                    if end > now - int(rule.tokens.period * 1e6):  # its bucket still counts: settled there
                        before, after = _add(txn, key, used_tokens - holder.tokens)
                        state.tokens_in_window = max(0, state.tokens_in_window + after - before)
                        if after and not state.tokens_oldest:
                            state.tokens_oldest = end
            state.tokens_total += charged
            waited = waited or bool(state.waiters)
        txn.put("limit_state", name.encode(), _enc.encode(state))
    return waited


def pause(txn: Txn, names: tuple[str, ...], until: int) -> list[str]:
    """Pause every limited name of `names` until `until` (µs): a provider pushed back. The
    names paused (those with a rule)."""
    paused = []
    for name in names:
        if rule_for(txn, name) is None:
            continue
        state = _state(txn, name)
        if until > state.paused_until:
            state.paused_until = until
            _put_state(txn, name, state)
        paused.append(name)
    return paused


def views(txn: Txn, now: int) -> list[LimitView]:
    """Every rule, and every name a `PREFIX:*` rule limits that has a state, by name."""
    found = rules(txn)
    names = set(found)
    for key, _ in txn.scan("limit_state", b""):
        names.add(key.decode())
    out = []
    verdicts: dict[tuple[str, str, int], bool] = {}
    for name in sorted(names):
        rule = found.get(name) if name in found else rule_for(txn, name)
        if rule is None:
            continue
        state = _state(txn, name)
        used = state.tokens_total
        if rule.tokens is not None:
            horizon = now - int(rule.tokens.period * 1e6)
            prefix = _event_prefix(name, b"t")
            used = sum(int.from_bytes(raw, "big") for key, raw in txn.scan("limit_events", prefix)
                       if int.from_bytes(key[len(prefix): len(prefix) + 8], "big") > horizon)
        if name.endswith(":*"):  # the rule itself: its names are listed on their own
            out.append(LimitView(name, rule.concurrency, rule.rate, rule.tokens, 0, 0, 0, None))
            continue
        holds = [h for h in state.holds.values() if _asked(verdicts, local_alive, h.owner, h.host, h.pid)]
        waiting = [w for w in state.waiters.values() if now - w.seen <= WAITER_GONE_US]
        out.append(LimitView(name, rule.concurrency, rule.rate, rule.tokens, len(holds), len(waiting), used,
                             state.paused_until if state.paused_until > now else None, state.tokens_total))
    return out


def waiting_for(txn: Txn, label: str, now: int) -> list[str]:
    """The names a hold labelled `label` (an invocation id) waits on."""
    out = []
    for key, raw in txn.scan("limit_state", b""):
        state = _state_dec.decode(raw)
        for waiter in state.waiters.values():
            if waiter.label == label and now - waiter.seen <= WAITER_GONE_US:
                out.append(key.decode())
                break
    return out


def forget_name(txn: Txn, name: str) -> None:
    """Drop a name's state and events (its rule was removed)."""
    txn.delete("limit_state", name.encode())
    for key, _ in list(_scan(txn, name.encode() + b"\x00")):
        txn.delete("limit_events", key)


def _scan(txn: Txn, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    return txn.scan("limit_events", prefix)


