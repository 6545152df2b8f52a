"""The frames of the user's code a failure is journaled with (`journal.Failed.traceback`).

Only what an operator needs to find the line: file, line and function of each frame, the
handler's outermost first, ending where it raised (a failed step's function included, as
the cause `ctx.run` chains its error to). journal's and the runtime's own frames, the
standard library's and installed packages' are left out; if that leaves nothing, the
others are kept. Bounded in count and size, and computed only when an invocation fails.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from types import TracebackType

from journal import Frame

MAX_FRAMES = 20  # the innermost ones are kept: where it raised
_MAX_TEXT = 300  # characters of a file name or function name

# This file is in a room of runtime/, beside journal/ and cli/.
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OURS = tuple(os.path.join(_REPOSITORY, name) + os.sep
              for name in ("journal", "runtime", "cli"))
_LIBRARIES = tuple(dict.fromkeys(os.path.abspath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
                                 if (p := sysconfig.get_paths().get(key))))


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else "..." + text[-(_MAX_TEXT - 3):]


def _walk(tb: TracebackType | None) -> list[tuple[str, int, str]]:
    return [(summary.filename, summary.lineno or 0, summary.name) for summary in traceback.extract_tb(tb)]


def user_frames(exc: BaseException) -> list[Frame]:
    """The user's frames of `exc`, followed by those of the exception it was chained `from`
    (a failed step: the handler's call of `ctx.run`, then the step function where it raised)."""
    raw: list[tuple[str, int, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        raw += _walk(current.__traceback__)
        current = current.__cause__
    mine = [f for f in raw if not os.path.abspath(f[0]).startswith(_OURS)]
    users = [f for f in mine if not os.path.abspath(f[0]).startswith(_LIBRARIES)] or mine
    return [Frame(_cut(file), line, _cut(function)) for file, line, function in users[-MAX_FRAMES:]]
