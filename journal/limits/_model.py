"""What the store keeps about limits: the rules an operator sets, the state of each limited
name (who holds a unit, who waits, whether a provider paused it), and how a name and a
period are written."""

from __future__ import annotations

import re

import msgspec

from ..errors import JournalError


class LimitError(JournalError, ValueError):
    """A limit rule or name that cannot be used (a bad period, an empty rule, a bad name)."""


class Window(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """At most `limit` in every window of `period` seconds, wherever the window starts."""

    limit: int
    period: float

    def __str__(self) -> str:
        return f"{self.limit}/{period_text(self.period)}"


class LimitRule(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The rule of a name (or of every `PREFIX:<anything>` for a `PREFIX:*` rule). Fields only
    ever appended, with defaults: rules are kept in the store."""

    concurrency: int | None = None
    rate: Window | None = None
    tokens: Window | None = None


class Holder(msgspec.Struct, array_like=True, gc=False):
    """One unit held: by which process (to give it back when that process is known dead),
    since when, the tokens it reserved, and the time of the window events it recorded."""

    owner: str
    host: str
    pid: int
    at: int
    tokens: int = 0
    label: str = ""  # what holds it: an invocation id, for an operator
    # The claim (the lease epoch) of the invocation's execution that holds it, 0 for a worker's
    # look: a hold shared by every process (an invocation's run) is given back by the
    # execution that holds it (or a later one), never by an earlier one ending late.
    claim: int = 0


class Waiter(msgspec.Struct, array_like=True, gc=False):
    owner: str
    host: str
    pid: int
    priority: int
    arrival: int  # µs; with the waiter's id, the order of arrival
    seen: int  # µs: when its process last asked (a waiter unseen for long is gone)
    label: str = ""


class LimitState(msgspec.Struct, gc=False):
    """The state of one limited name (an exact name, or one name under a `PREFIX:*` rule)."""

    holds: dict[str, Holder] = {}
    waiters: dict[str, Waiter] = {}
    rate_count: int = 0  # window events counted for the rate (those not yet pruned)
    tokens_in_window: int = 0
    paused_until: int = 0  # µs: a provider pushed back; nothing is granted before then
    tokens_total: int = 0  # every token ever charged (settled usage, else the estimate)
    rate_oldest: int = 0  # µs: the end of the oldest rate bucket still counted (0: none known)
    tokens_oldest: int = 0  # ... and of the oldest tokens bucket: nothing to prune before then


class LimitView(msgspec.Struct, gc=False):
    """One line of `journal limit ls --json`: a rule, or a name under a `PREFIX:*` rule."""

    name: str
    concurrency: int | None
    rate: Window | None
    tokens: Window | None
    in_use: int
    waiting: int
    tokens_used: int  # in the current window of the tokens rule (all time without one)
    paused_until: int | None  # µs, while paused
    tokens_total: int = 0  # every token ever charged to the name (`journal_limit_tokens_total`)

    def to_json(self) -> dict[str, object]:
        from .._time import iso_from_us

        def window(w: Window | None) -> dict[str, object] | None:
            return None if w is None else {"limit": w.limit, "period": w.period}

        return {"name": self.name, "concurrency": self.concurrency, "rate": window(self.rate),
                "tokens": window(self.tokens), "in_use": self.in_use, "waiting": self.waiting,
                "tokens_used": self.tokens_used,
                "paused_until": None if self.paused_until is None else iso_from_us(self.paused_until)}


class Granted(msgspec.Struct, frozen=True, gc=False):
    """The units were taken (or had been, by an earlier try of the same hold)."""


class Blocked(msgspec.Struct, frozen=True, gc=False):
    """Not yet: the hold waits (registered as a waiter) on `names`. `retry_at` (µs) is when a
    window or a pause next lets a unit go, None when only a release can; `ahead` how many live
    waiters come before it on the name that blocks it."""

    names: tuple[str, ...]
    retry_at: int | None
    ahead: int


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WINDOW = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smhd])\s*$")
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


def parse_window(text: str, what: str = "rate") -> Window:
    """`N/PERIOD`, PERIOD a number and a unit (`s`, `m`, `h`, `d`): `500/m`, `60/5s`, `200000/1h`."""
    found = _WINDOW.match(text)
    if found is None:
        raise LimitError(f"--{what} {text!r} is not N/PERIOD: write a count, a slash and a period such as "
                         "500/m, 60/5s or 200000/1h (units s, m, h, d)")
    count, number, unit = found.groups()
    period = (float(number) if number else 1.0) * _UNITS[unit]
    if int(count) < 1 or period <= 0:
        raise LimitError(f"--{what} {text!r} must allow at least 1 in a period longer than 0")
    return Window(int(count), period)


def period_text(period: float) -> str:
    for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if period >= seconds and period % seconds == 0:
            n = int(period // seconds)
            return unit if n == 1 else f"{n}{unit}"
    return f"{period:g}s"


def check_name(name: str, *, rule: bool = False) -> str:
    """A limit name: 1-200 characters, no control characters; a rule's name may end in `:*`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise LimitError(f"limit name {name!r} must be 1-200 characters without control characters")
    if "*" in name and not (rule and name.endswith(":*") and "*" not in name[:-1] and len(name) > 2):
        raise LimitError(f"limit name {name!r}: '*' is allowed only as a rule's last part, as in 'tenant:*' "
                         "(every tenant:<name> gets its own count)")
    return name


def check_rule(rule: LimitRule) -> LimitRule:
    if rule.concurrency is None and rule.rate is None and rule.tokens is None:
        raise LimitError("a limit needs at least one of --concurrency N, --rate N/PERIOD, --tokens N/PERIOD")
    if rule.concurrency is not None and rule.concurrency < 1:
        raise LimitError(f"--concurrency must be at least 1, got {rule.concurrency}")
    for window in (rule.rate, rule.tokens):
        if window is not None and (window.limit < 1 or window.period <= 0):
            raise LimitError(f"a window must allow at least 1 in a period longer than 0, got {window}")
    return rule
