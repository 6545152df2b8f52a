"""Where code is running, and the determinism guard that acts on it.

Handler code (outside any step) must be deterministic; a step function may do anything.
The engine marks handler code with `_handler_scope` (the invocation id while the handler
runs, None everywhere else); a step function runs inside that scope but with its step
published (`current_step()`), which exempts it. The determinism guard uses both:
once installed, the process's sources of nondeterminism (`time.time`, `datetime.now`,
`random.*`, `uuid.uuid4`, `os.urandom`, ...) check, on each call, whether

1. the guard is on in the calling context (`determinism_guard()`, a `ContextVar`, so a
   guarded invocation does not affect one running beside it without the guard),
2. the caller is handler code (`_handler_scope` is set and no step is running), and
3. the direct caller is the user's code, not the standard library, an installed package
   or `runtime`/`journal` themselves (the engine, asyncio, anyio and logging read the
   clock legitimately while a handler runs);

and if so raise `DeterminismViolation` naming the `ctx` equivalent. Otherwise they call
the original function: the cost outside guarded handler code is one `ContextVar.get`.

Functions are replaced where callers look them up (`time.time`, `random.random`, ...), so
a name imported with `from time import time` before the guard was installed is not seen.
`datetime.datetime.now`/`utcnow` and `datetime.date.today` are replaced on the classes
themselves (CPython only), so every import style is covered.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import gc
import os
import random
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import Any

from .._base._step_info import in_step

# The invocation id while a handler runs (its steps included); None elsewhere.
_handler_scope: ContextVar[str | None] = ContextVar("journal_handler_scope", default=None)
# Whether the determinism guard applies in this context (see `determinism_guard`).
_guard_on: ContextVar[bool] = ContextVar("journal_determinism_guard", default=False)


@contextmanager
def determinism_guard(enabled: bool = True) -> Iterator[None]:
    """Within this block, handler code that reads the clock or an unseeded random source raises.

    Invocations run (or tasks started) inside the block are guarded; the rest of the process
    is not. Use it around `engine.run(...)` or `engine.serve()` in production, or in tests::

        with determinism_guard():
            outcome = await engine.run(agent, "question")

    A violation raises `runtime.errors.DeterminismViolation` (a `NondeterminismError`, so
    the engine parks the invocation as diverged) with a message naming the `ctx` call to
    use instead. Step functions are never affected. `enabled=False` switches the guard off
    for a block nested in a guarded one.
    """
    install()
    token = _guard_on.set(enabled)
    try:
        yield
    finally:
        _guard_on.reset(token)


# -- what is guarded -----------------------------------------------------------------------

_RANDOM_INSTEAD = ("ctx.random().{name}(...)", "seeded from the invocation id, it gives the same numbers on replay")
_NOT_RANDOM = frozenset({"seed", "getstate", "setstate"})  # manage state, do not read it


_CLOCK = "journaled, it gives the same instant on replay"
_UUID = "derived from the invocation id, it gives the same UUIDs on replay"


def _targets() -> list[tuple[Any, str, str, tuple[str, str]]]:
    """(owner, attribute, name shown, (what to use instead, why)) for each guarded function."""
    targets: list[tuple[Any, str, str, tuple[str, str]]] = [
        (time, "time", "time.time()", ("ctx.now()", _CLOCK + "; .timestamp() gives the float")),
        (time, "time_ns", "time.time_ns()", ("ctx.now()", _CLOCK)),
        (uuid, "uuid4", "uuid.uuid4()", ("ctx.uuid()", _UUID)),
        (uuid, "uuid1", "uuid.uuid1()", ("ctx.uuid()", _UUID)),
        (os, "urandom", "os.urandom()", ("ctx.random().randbytes(n)", _RANDOM_INSTEAD[1])),
    ]
    for name in sorted(random.__all__):
        fn = getattr(random, name, None)
        if getattr(fn, "__self__", None) is random._inst and name not in _NOT_RANDOM:
            targets.append((random, name, f"random.{name}()", (_RANDOM_INSTEAD[0].format(name=name), _RANDOM_INSTEAD[1])))
    return targets


_CLASS_TARGETS = (
    (datetime.datetime, "now", "datetime.now()", ("ctx.now()", _CLOCK + " as an aware UTC datetime")),
    (datetime.datetime, "utcnow", "datetime.utcnow()", ("ctx.now()", _CLOCK + " as an aware UTC datetime")),
    (datetime.date, "today", "date.today()", ("ctx.now().date()", _CLOCK)),
)

_install_lock = threading.Lock()
_installed = False


def install() -> None:
    """Put the guarded functions in place, once per process. Idempotent and cheap to call again."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        for owner, attr, shown, instead in _targets():
            original = getattr(owner, attr)
            setattr(owner, attr, _guarded(original, shown, instead))
        if sys.implementation.name == "cpython":
            for cls, attr, shown, instead in _CLASS_TARGETS:
                _patch_class_method(cls, attr, shown, instead)
        _installed = True


def _guarded(original: Callable[..., Any], shown: str, instead: tuple[str, str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _guard_on.get():
            _check(shown, instead, sys._getframe(1))
        return original(*args, **kwargs)

    guarded.__journal_guarded__ = original  # type: ignore[attr-defined]
    return guarded


def _patch_class_method(cls: type, attr: str, shown: str, instead: tuple[str, str]) -> None:
    # datetime's classes are C types whose attributes cannot be assigned; their method
    # dict can still be updated (then the type's method cache must be invalidated). This
    # covers `from datetime import datetime; datetime.now()`, the common import style.
    namespace = gc.get_referents(cls.__dict__)[0]
    original = namespace[attr]

    def guarded(klass: type, *args: Any, **kwargs: Any) -> Any:
        if _guard_on.get():
            _check(shown, instead, sys._getframe(1))
        return original.__get__(None, klass)(*args, **kwargs)

    guarded.__name__ = attr
    guarded.__qualname__ = f"{cls.__name__}.{attr}"
    guarded.__doc__ = original.__doc__
    namespace[attr] = classmethod(guarded)
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def _check(shown: str, instead: tuple[str, str], frame: FrameType | None) -> None:
    invocation_id = _handler_scope.get()
    if invocation_id is None or in_step() or frame is None or not _is_user_code(frame.f_code.co_filename):
        return
    from ..errors import DeterminismViolation

    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    raise DeterminismViolation(
        f"{shown} was called by handler code of invocation {invocation_id!r} outside ctx.run ({where}). "
        "Its result is not journaled, so a replay after a crash would see a different value and could take "
        f"another path. Use {instead[0]} instead ({instead[1]}), or move the call into a step function "
        "passed to ctx.run(...).",
        invocation_id=invocation_id,
        call=shown,
    )


# -- whose code is calling -------------------------------------------------------------------


def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path))
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        roots.add(os.path.realpath(os.path.join(prefix, "lib")))
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # this file is in a room of runtime/
    roots.add(here)  # runtime/
    roots.add(os.path.join(os.path.dirname(here), "journal"))  # journal/
    return tuple(root + os.sep for root in sorted(roots))


_LIBRARY_ROOTS = _library_roots()
_user_code: dict[str, bool] = {}


def _is_user_code(filename: str) -> bool:
    """True for the user's own code; False for the standard library, installed packages, runtime and journal."""
    known = _user_code.get(filename)
    if known is None:
        if filename.startswith("<frozen "):
            known = False
        elif filename.startswith("<"):  # exec'd strings, the REPL: the user's
            known = True
        else:
            path = os.path.realpath(filename)
            known = not path.startswith(_LIBRARY_ROOTS)
        _user_code[filename] = known
    return known
