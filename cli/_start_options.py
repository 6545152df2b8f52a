"""The start options `journal start` and `journal run` share (`--priority`, `--delay`,
`--at`), parsed once; `Engine.start` checks them and says what was wrong."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._common import fail

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhdw])")


def parse_duration(text: str, option: str) -> float:
    """`90s`, `15m`, `1h30m`, `2d`, `500ms` or a plain number of seconds, as seconds."""
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        return float(cleaned)
    if not cleaned or _PART.sub("", cleaned):
        raise fail(f"{option} {text!r} is not a duration; write it like 30s, 15m, 1h30m, 2d or 500ms")
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(cleaned))


def parse_instant(text: str, option: str) -> datetime.datetime:
    """An ISO 8601 time; one without a zone is read as UTC (as every time journal prints)."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise fail(f"{option} {text!r} is not an ISO 8601 time; write it like 2030-01-01T09:00:00Z") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def start_options(fn: F) -> F:
    for decorator in reversed((
        click.option("--priority", type=int, default=0, show_default=True,
                     help="Higher first, then the oldest: the order workers claim runnable invocations, "
                     "and the place in a limit's line."),
        click.option("--delay", "delay_text", metavar="DURATION",
                     help="Keep it pending for this long before it may run (30s, 15m, 2h, 1d)."),
        click.option("--at", "at_text", metavar="ISO",
                     help="Keep it pending until this time (ISO 8601; UTC when it names no zone)."),
        click.option("--debounce", "debounce_text", metavar="DURATION",
                     help="With --key: while a debounced start of this handler and key has not begun, this one "
                     "replaces its input and moves its start to DURATION from now; the same id is printed."),
        click.option("--debounce-max", "debounce_max_text", metavar="DURATION",
                     help="Never move a debounced start past this long after the first start of the burst."),
        click.option("--if-busy", type=click.Choice(["enqueue", "reject", "interrupt", "rollback"]),
                     default="enqueue", show_default=True,
                     help="With --key, when the key has an unfinished turn: wait behind it, refuse (exit 2), "
                     "cancel it and run this one next, or cancel it and restore the key's state too."),
    )):
        fn = decorator(fn)
    return fn


def start_kwargs(priority: int, delay_text: str | None, at_text: str | None, debounce_text: str | None = None,
                 debounce_max_text: str | None = None, if_busy: str = "enqueue") -> dict[str, Any]:
    """The options as `Engine.start` keywords."""
    if delay_text is not None and at_text is not None:
        raise fail("give --delay or --at, not both")
    if debounce_max_text is not None and debounce_text is None:
        raise fail("--debounce-max goes with --debounce DURATION")
    return {
        "if_busy": if_busy,
        "debounce": parse_duration(debounce_text, "--debounce") if debounce_text is not None else None,
        "debounce_max": parse_duration(debounce_max_text, "--debounce-max") if debounce_max_text else None,
        "priority": priority,
        "delay": parse_duration(delay_text, "--delay") if delay_text is not None else None,
        "start_at": parse_instant(at_text, "--at") if at_text is not None else None,
    }
