"""Branch positions: where each task of a handler stands in its invocation's journal.

Every entry records `prev`, the position token of the branch (task) that made it, and
replay matches an operation only with the entry recorded after its own position. For
that to identify one recorded path, no two branches may ever stand at the same position:

- an operation moves its branch to a token hashed from the previous one and what the
  operation was (kind, name, argument digest), so a position names the same place on
  every execution, whichever seq the operation got;
- a task spawned by handler code (an anyio task group, `asyncio.gather`, `create_task`,
  a trio nursery) starts from a token of its own, hashed from its parent's position and
  its spawn index there. Tasks are spawned in program order, so the k-th task a branch
  spawns at a position is the same task on every execution, however the scheduler then
  orders them (trio shuffles them on purpose);
- `ctx.gather`/`ctx.select` give their branches tokens from the branch index.

Spawned tasks are seen through the event loop: a task factory on asyncio (it wraps any
factory already installed), an instrument on trio. A task spawned while a step function
runs belongs to the step, not to the handler, and starts no branch.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import sys
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from .._base._step_info import _current

# Where a branch (a task of the handler) stands in its invocation's journal:
# `(serial, seq, token, legacy, spawned)`, a plain tuple because every operation builds one
# (a NamedTuple's constructor cost W1 a tenth of its time per step). Read it by unpacking:
# - serial: tells one invocation context's branches from another's (a child invocation run
#   from inside a parent's branch inherits the parent's value);
# - seq: the seq it claimed last;
# - token: its position token, what step keys and replay matching are built from;
# - legacy: for a spawned task that has claimed nothing yet, the parent's token (journals
#   recorded before spawned tasks had tokens of their own recorded that instead), else None;
# - spawned: how many tasks it has spawned at this position.
Position = tuple[int, int, int, int | None, int]


_ORIGIN: Position = (0, 0, 0, None, 0)
_branch: ContextVar[Position] = ContextVar("journal_branch", default=_ORIGIN)


def branch_token(parent: int, index: int) -> int:
    """The starting token of branch `index` of a ctx.gather/ctx.select called at `parent`."""
    raw = hashlib.blake2b(f"{parent}/{index}".encode(), digest_size=6).digest()
    return -1 - int.from_bytes(raw, "big")


def spawn_token(parent: int, index: int) -> int:
    """The starting token of the `index`-th task spawned by a branch standing at `parent`."""
    raw = hashlib.blake2b(f"{parent}>{index}".encode(), digest_size=6).digest()
    return -(1 << 50) - int.from_bytes(raw, "big")


# The machines that count their live branches (replay-only checks), by context serial.
_counting: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def count_branches(machine: Any) -> None:
    """Tell `machine` (`branch_started`, `branch_ended`) when a task of its handler starts and ends."""
    _counting[machine.serial] = machine


def _spawned(inherited: Position | None) -> Position | None:
    """In the spawning task: the position the new task starts from (None: not a branch),
    counting the spawn in the parent's position. `inherited` is the position in the new
    task's context: a task started in a context of its own (trio's system tasks) is no
    branch of the code that happened to be running when it was spawned."""
    parent = _branch.get()
    serial, seq, token, legacy, spawned = parent
    if not serial or inherited != parent or _current.get() is not None:
        return None
    _branch.set((serial, seq, token, legacy, spawned + 1))
    return (serial, seq, spawn_token(token, spawned), token if legacy is None else legacy, 0)


# -- asyncio: a task factory -------------------------------------------------------------------


def _wrap_factory(previous: Callable[..., asyncio.Future[Any]] | None) -> Callable[..., Any]:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        given = kwargs.get("context")
        start = _spawned(given.get(_branch, _ORIGIN) if given is not None else _branch.get())
        if start is not None:
            context = given or contextvars.copy_context()
            context.run(_branch.set, start)
            kwargs["context"] = context
        task = previous(loop, coro, **kwargs) if previous is not None else asyncio.Task(coro, loop=loop, **kwargs)
        counting = _counting.get(start[0]) if start is not None and _counting else None
        if counting is not None:
            counting.branch_started()
            task.add_done_callback(lambda _: counting.branch_ended())
        return task

    factory.__journal_branches__ = True  # type: ignore[attr-defined]
    return factory


def _install_asyncio(loop: asyncio.AbstractEventLoop) -> None:
    current = loop.get_task_factory()
    if not getattr(current, "__journal_branches__", False):
        loop.set_task_factory(_wrap_factory(current))


# -- trio: an instrument --------------------------------------------------------------------------

_trio_installed: Any = None


def _install_trio() -> None:
    global _trio_installed
    import trio

    if _trio_installed is None:
        class _Spawns(trio.abc.Instrument):
            def __init__(self) -> None:
                self._counted: dict[Any, Any] = {}  # task -> the machine counting it

            def task_spawned(self, task: Any) -> None:
                # Runs in the spawning task, before the new one starts.
                start = _spawned(task.context.get(_branch, _ORIGIN))
                if start is not None:
                    task.context.run(_branch.set, start)
                    counting = _counting.get(start[0]) if _counting else None
                    if counting is not None:
                        counting.branch_started()
                        self._counted[task] = counting

            def task_exited(self, task: Any) -> None:
                counting = self._counted.pop(task, None) if self._counted else None
                if counting is not None:
                    counting.branch_ended()

        _trio_installed = (trio.lowlevel.RunVar("journal_branches", default=False), _Spawns())
    marker, instrument = _trio_installed
    if not marker.get():
        trio.lowlevel.add_instrument(instrument)
        marker.set(True)


def install() -> None:
    """Make the running event loop give the tasks that handler code spawns positions of their own."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        _install_asyncio(loop)
    elif "trio" in sys.modules:
        _install_trio()
