"""Turning records and entries into text: tables that fit the terminal, human units, JSON."""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import click
import msgspec

from journal import (
    Entry,
    PromiseType,
    Status,
    decode_value,
    from_us,
    iso_from_us,
    kind_of,
    name_of,
    schema_example,
)

MIN_WIDTH = 80  # without COLUMNS, when stdout is not a terminal
MIN_COLUMNS = 40  # the narrowest layout the tables keep their columns in
_STATUS_COLOURS = {
    Status.PENDING: "blue",
    Status.RUNNING: "cyan",
    Status.SUSPENDED: "yellow",
    Status.DIVERGED: "magenta",
    Status.COMPLETED: "green",
    Status.FAILED: "red",
    Status.CANCELLED: "white",
}
_json = msgspec.json.Encoder(enc_hook=repr)


# -- hostile text ----------------------------------------------------------------------------------

# Journal contents are LLM output: a step value may carry terminal escapes (retitle, clear,
# hide text) or bidi overrides that reorder what the reader sees. Human output shows each
# such character as a visible escape; newlines and tabs stay.
_UNSAFE = [c for c in range(0x20) if c not in (0x09, 0x0A)] + list(range(0x7F, 0xA0)) + [
    0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}


_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _UNSAFE if c >= 0x7F}


class Styled(str):
    """Text this program coloured itself, every hostile part of it already escaped."""


def safe(text: str) -> str:
    """`text` with control characters and bidi overrides shown as escapes (`\\x1b`)."""
    if isinstance(text, Styled):
        return text
    return text.translate(_ESCAPES)


def styled(text: str, **style: Any) -> Styled:
    """Our own colour around `text` (escaped first)."""
    return Styled(click.style(safe(text), **style))


# -- JSON --------------------------------------------------------------------------------------


def to_json(data: Any, *, pretty: bool = True) -> str:
    """Encode for `--json` output: datetimes as ISO 8601, bytes as base64, the rest as repr."""
    raw = _json.encode(data)
    # JSON escapes C0 controls itself; DEL, C1 controls and bidi overrides pass through it
    # raw, and inside a JSON string `\\uXXXX` means the same character.
    return (msgspec.json.format(raw, indent=2) if pretty else raw).decode().translate(_JSON_ESCAPES)


iso = iso_from_us  # every time in tables, as in --json (journal.views)


# -- human units ---------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """`850ms`, `1.2s`, `3m05s`, `2h10m`, `3d04h`."""
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def size(n: int) -> str:
    """`512 B`, `1.5 KiB`, `3.2 MiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age(us: int, now_us: int | None = None) -> str:
    now = now_us if now_us is not None else time.time_ns() // 1000
    return f"{duration((now - us) / 1e6)} ago"


def clock(us: int) -> str:
    """A local wall-clock time for live output: `14:03:27.512`."""
    moment = datetime.datetime.fromtimestamp(us / 1e6)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def when(us: int) -> str:
    """An absolute UTC time plus its age: `2024-05-01 12:00:03 UTC (3m05s ago)`."""
    return f"{from_us(us):%Y-%m-%d %H:%M:%S} UTC ({age(us)})"


def status(value: Status | str) -> Styled:
    value = Status(value)
    return styled(value.value, fg=_STATUS_COLOURS[value], bold=value in (Status.FAILED, Status.DIVERGED))


def value_text(value: Any) -> str:
    """A decoded value for humans: strings as they are, everything else as compact JSON,
    control characters escaped either way."""
    if isinstance(value, str):
        return safe(value)
    return safe(to_json(value, pretty=False))


def raw_text(raw: Any) -> str:
    try:
        return value_text(decode_value(raw))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "<undecodable>"


class Whole(str):
    """Text that is never cut when stdout is not a terminal (an error message): a script or a
    log reading it gets it all, whatever width a table or a header line has."""


def cut(text: str, width: int) -> str:
    """Fit `text` on one line of `width` columns, ending in an ellipsis when it is cut; a
    `Whole` text is put on one line but not cut when stdout is not a terminal."""
    whole = isinstance(text, Whole) and not sys.stdout.isatty()
    text = safe(text)
    text = " ".join(text.split()) if ("\n" in text or "\t" in text) else text
    if len(text) <= width or whole:
        return text
    if width <= 1:
        return "…"[:width]
    return text[: width - 1] + "…"


# -- tables --------------------------------------------------------------------------------------


def terminal_width() -> int:
    """The columns human output fits in: `COLUMNS` when it is set (on a terminal or not), else
    the terminal's width, else (stdout is a pipe or a file) 80. Error messages are not cut to
    it when stdout is not a terminal (`Whole`)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_COLUMNS, int(columns))
    if sys.stdout.isatty():
        return max(MIN_COLUMNS, shutil.get_terminal_size((MIN_WIDTH, 24)).columns)
    return MIN_WIDTH


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, flex: Sequence[int] = (),
          right: Sequence[int] = (), width: int | None = None) -> str:
    """Columns separated by two spaces, shrunk to fit `width`.

    The columns in `flex` give way, in the order listed, each down to a floor of 12 (or its
    header's width); the others keep their width. A `Styled` cell (`status`) keeps its
    colour, and widths are measured without it; control characters in other cells are escaped.
    """
    whole = not sys.stdout.isatty()
    rows = [[Whole(safe(c)) if isinstance(c, Whole) else safe(c) for c in r] for r in rows]
    width = width or terminal_width()
    # A `Whole` cell (an error, in the last column) is printed whole when stdout is not a
    # terminal, and does not widen its column for the others.
    widths = [max([len(click.unstyle(h))] + [len(click.unstyle(r[i])) for r in rows
                                             if not (whole and isinstance(r[i], Whole))])
              for i, h in enumerate(headers)]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for i in flex:
        if excess <= 0:
            break
        floor = max(len(headers[i]), 12)
        give = min(excess, widths[i] - floor)
        if give > 0:
            widths[i] -= give
            excess -= give
    lines = []
    for cells in [list(headers)] + rows:
        out = []
        for i, cell in enumerate(cells):
            plain = click.unstyle(cell)
            if isinstance(cell, Whole) and whole and i == len(cells) - 1:
                cell = plain = cut(cell, widths[i])
            elif len(plain) > widths[i]:
                cell = plain = cut(plain, widths[i])
            pad = " " * (widths[i] - len(plain))
            last = i == len(cells) - 1
            out.append(pad + cell if i in right else (cell if last else cell + pad))
        lines.append("  ".join(out).rstrip())
    return Styled("\n".join(lines))


# -- entries -------------------------------------------------------------------------------------


def entry_detail(entry: Entry) -> str:
    """What an entry says, in a few words, for tables and `tail`."""
    kind = kind_of(entry)
    if kind == "started":
        return "input " + raw_text(entry.input)
    if kind == "step":
        if entry.error is not None:
            return Whole(f"error {entry.error.type}: {entry.error.message}"
                         + (f"  ({entry.attempts} attempts)" if entry.attempts > 1 else ""))
        return raw_text(entry.value) + (f"  ({entry.attempts} attempts)" if entry.attempts > 1 else "")
    if kind == "promise":
        if entry.timed_out:
            return "timed out"
        return Whole(f"rejected: {entry.error}") if entry.error is not None else raw_text(entry.value)
    if kind == "state_get":
        return raw_text(entry.value) if entry.found else "(not set)"
    if kind == "state_set":
        return "(cleared)" if entry.cleared else raw_text(entry.value)
    if kind == "state_keys":
        return ", ".join(entry.names) or "(none)"
    if kind == "called":
        return f"child {entry.child}" + ("" if entry.awaited else " (not awaited)")
    if kind == "selected":
        return f"branch {entry.index} won"
    if kind == "continued_as_new":
        return f"continued as {entry.next_id}"
    if kind == "sleep":
        return f"until {iso(entry.until)} ({duration((entry.until - entry.at) / 1e6)})"
    if kind == "now":
        return iso(entry.at) or ""
    if kind in ("completed", "emitted"):
        return raw_text(entry.value)
    if kind == "failed":
        return Whole(f"{entry.error.type}: {entry.error.message}")
    if kind in ("cancelled", "cancel_received"):
        return entry.reason
    return ""


def short_handler(path: str) -> str:
    """`/long/path/agents.py:greet` reads as `agents.py:greet` in tables."""
    target, _, attr = path.rpartition(":")
    return f"{os.path.basename(target)}:{attr}" if target.endswith(".py") else path


def entry_name(entry: Entry) -> str:
    """The NAME column: the step or promise name; for a `called` entry, the child's handler."""
    name = name_of(entry)
    if name is None:
        return "-"
    return short_handler(name) if kind_of(entry) == "called" else name


def entry_row(seq: int, entry: Entry, *, start_us: int | None) -> list[str]:
    at = f"+{duration((entry.at - start_us) / 1e6)}" if start_us is not None else clock(entry.at)
    return [str(seq), at, kind_of(entry), entry_name(entry), entry_detail(entry)]


ENTRY_HEADERS = ("SEQ", "AT", "KIND", "NAME", "DETAIL")


def fitting(wanted: PromiseType | None) -> str:
    """A value to resolve a promise with, as JSON: one that fits its type, if it has one."""
    if wanted is None:
        return "true"
    try:
        return to_json(schema_example(msgspec.json.decode(wanted.schema)), pretty=False)
    except (msgspec.DecodeError, TypeError):
        return "true"
