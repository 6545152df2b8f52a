"""What every command shares: the store option, exit codes, errors at the edge, Ctrl-C."""

from __future__ import annotations

import functools
import gc
import shlex
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from journal import Store, default_path
from journal.backends import backend_for
from journal.errors import (
    CorruptEntry,
    DiskFull,
    InvocationBusy,
    InvocationConflict,
    InvocationNotFound,
    JournalError,
    KeyBusy,
    LeaseLost,
    MessageNotFound,
    MessageRefused,
    PromiseConflict,
    PromiseNotFound,
    PromiseValueRefused,
    StoreError,
    StoreUnavailable,
    ValueNotPublished,
)

from ._render import safe

T = TypeVar("T")

# Exit codes (DESIGN.md, "The command line").
OK, FAILED, USAGE, SUSPENDED, DIVERGED, INTERRUPTED = 0, 1, 2, 3, 4, 130

_USAGE_ERRORS = (InvocationNotFound, InvocationConflict, InvocationBusy, KeyBusy, PromiseConflict, PromiseNotFound,
                 PromiseValueRefused, MessageRefused, MessageNotFound, ValueNotPublished, StoreError, ValueError)


class Exit(Exception):
    """Leave the command with `code` after printing `message` (if any) to stderr."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def fail(message: str, code: int = USAGE) -> Exit:
    return Exit(code, message)


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--db", "db", metavar="PATH|URL", default=None,
        help="The journal store: a directory (LMDB), or a postgresql:// URL "
        "(default: $JOURNAL_DB, else ./.journal).",
    )(fn)


def _parse_tags(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    from journal import parse_tag
    from journal.errors import JournalError

    tags: dict[str, str] = {}
    for text in values:
        try:
            key, value = parse_tag(text)
        except JournalError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        tags[key] = value
    return tags


def tag_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--tag K=V`, repeatable, parsed into a dict (a bad tag is a usage error that says why)."""
    return click.option("--tag", "tags", metavar="K=V", multiple=True, callback=_parse_tags, help=help)


def _parse_retention(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    from journal import parse_retention

    try:
        return parse_retention(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def retain_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--retain completed=7d,failed=30d,cancelled=7d`: trim finished invocations as they come due."""
    return click.option(
        "--retain", "retention", metavar="STATUS=AGE,...", callback=_parse_retention,
        help="Trim finished invocations once they are this old (since they finished), continuously, in small "
        "transactions beside the work, by `journal trim`'s rules; e.g. completed=7d,failed=30d,cancelled=7d "
        "(units s m h d w; a status not named is kept).")(fn)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (a stable shape; see docs/cli.md).")(fn)


def store_path(db: str | None) -> str:
    """The store `--db` names (or `$JOURNAL_DB`, else ./.journal), as its backend knows it."""
    target = db or default_path()
    return backend_for(target).locate(target)


def runs_recorded_handlers(db: str | None) -> bool:
    """Whether this store's invocations may run the handler they recorded without --handler:
    only where the store is private to its owner (LMDB), never from a shared database."""
    return backend_for(store_path(db)).runs_recorded_handlers


def existing_store(db: str | None) -> str:
    """The store's path, which must exist: only `run` and `worker` create a store."""
    path = store_path(db)
    backend_for(path).check_location(path, must_exist=True)
    return path


def open_store(db: str | None, *, readonly: bool = True) -> Store:
    """Open an existing store (read-only unless the command writes; on PostgreSQL the
    database user's rights decide)."""
    path = store_path(db)
    backend = backend_for(path)
    for warning in backend.check_location(path, must_exist=True):
        echo_err(warning)
    return backend.open(path, readonly=readonly)


def full_id(db: str | None, text: str) -> str:
    """The invocation id that ID on the command line names: an id, or a unique prefix of one
    (`journal.expand_id`: an ambiguous prefix is refused, listing the ids it starts)."""
    from journal import expand_id

    with open_store(db) as store:
        return expand_id(store, text)


def warn_store(path: str) -> None:
    """Say so (once per command) when others could write the store; refuse a name that can be no store."""
    for warning in backend_for(path).check_location(path, must_exist=False):
        echo_err(warning)


def suggest(words: list[str], db: str | None) -> str:
    """A command line to paste: `journal resume ID [--db PATH]`."""
    parts = ["journal"] + [shlex.quote(w) for w in words]
    if db is not None:
        parts += ["--db", shlex.quote(db)]
    return " ".join(parts)


def echo_err(message: str) -> None:
    """A message for humans on stderr; journal contents in it are escaped (`render.safe`)."""
    click.echo(safe(message), err=True)


def out(text: str = "") -> None:
    """Human output on stdout, escaped like `echo_err`; `--json` goes through click.echo as is."""
    click.echo(safe(text))


def edge(fn: Callable[..., T]) -> Callable[..., T]:
    """Convert what a command raises into a message on stderr and an exit code: the CLI's only catch."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except Exit as exc:
            if exc.message:
                echo_err(exc.message if exc.code == OK else f"error: {exc.message}")
            sys.exit(exc.code)
        except KeyboardInterrupt:
            echo_err("interrupted")
            sys.exit(INTERRUPTED)
        except _nondeterminism() as exc:
            echo_err(str(exc))
            sys.exit(DIVERGED)
        except (CorruptEntry, DiskFull, LeaseLost, StoreUnavailable) as exc:
            echo_err(f"error: {exc}")
            sys.exit(FAILED)
        except _USAGE_ERRORS as exc:
            echo_err(f"error: {exc}")
            sys.exit(USAGE)
        except JournalError as exc:
            echo_err(f"error: {type(exc).__name__}: {exc}")
            sys.exit(FAILED)

    return wrapper


def _nondeterminism() -> tuple[type[BaseException], ...]:
    """`runtime.errors.NondeterminismError`, if the runtime was imported: else nothing raised it.

    Commands that only read a store never import the runtime (it costs more than the
    rest of their start-up), so the edge does not import it to name an error either.
    (The runtime's `HandlerNotFound` is a ValueError: a usage error like the others.)"""
    errors = sys.modules.get("runtime.errors")
    return (errors.NondeterminismError,) if errors is not None else ()


def own_the_collector() -> None:
    """Tune the garbage collector for a process that the engine owns (`journal run`, `resume`,
    `worker`, `serve`); the library never does it behind an embedding program's back.

    Thousands of invocations in flight are many live objects, and with CPython's default
    thresholds (700, 10, 10) the collector traverses them again and again: 10,000 concurrent
    agents of 5 steps (W5 in `python -m bench`) spent ~40% of their CPU in it. Collecting
    the youngest generation every 50,000 allocations cuts that to a few percent, and the
    middle one every 100 of those rather than 20 spares W5 a pass over all its agents'
    objects, 0.15-0.18 s of a 4-second run (docs/performance.md has the figures); garbage
    cycles are still collected, later."""
    gc.set_threshold(50_000, 100, 100)


def run_async(work: Callable[[], Awaitable[T]],
              on_stop: Callable[[], None] | None = None) -> tuple[T | None, signal.Signals | None]:
    """Run `work` under anyio; Ctrl-C (or SIGTERM) cancels it cleanly, after calling `on_stop`.

    Returns `(result, stopped_by)`: the signal that stopped it, or None. Cancellation
    reaches the engine as an ordinary anyio cancellation, so an invocation in flight gives
    its lease back and stays pending.
    """

    import anyio

    async def main() -> tuple[T | None, signal.Signals | None]:
        result: list[T] = []
        interrupted: signal.Signals | None = None

        async def watch(signals: Any, tg: anyio.abc.TaskGroup) -> None:
            nonlocal interrupted
            async for signum in signals:
                interrupted = interrupted or signal.Signals(signum)
                if on_stop is not None:
                    on_stop()
                tg.cancel_scope.cancel()

        async def body(tg: anyio.abc.TaskGroup) -> None:
            nonlocal interrupted
            try:
                result.append(await work())
            except BaseException as exc:
                # KeyboardInterrupt raised inside the work (by handler code, or Ctrl-C under
                # trio) must not leave the task: asyncio would print it as a crash.
                stop = exc.subgroup(KeyboardInterrupt) if isinstance(exc, BaseExceptionGroup) else (
                    exc if isinstance(exc, KeyboardInterrupt) else None)
                if stop is None:
                    raise
                interrupted = interrupted or signal.SIGINT
            tg.cancel_scope.cancel()

        # The receiver stays installed until the work has cleaned up (closed the store): a
        # Ctrl-C meanwhile is received here instead of raising KeyboardInterrupt in the cleanup.
        with anyio.open_signal_receiver(*stops) as signals:
            if early:  # a signal came before the receiver was there to get it
                return None, signal.Signals(early[0])
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, signals, tg)
                tg.start_soon(body, tg)
        return (result[0] if result else None), interrupted

    # Until the receiver is installed (and after it is gone), a signal is only noted: left to
    # Python's default handler, asyncio's runner would cancel its main task, which anyio does
    # not treat as a stop, and the command would go on as if nothing had happened.
    early: list[int] = []
    previous = {}
    stops = stop_signals()
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, lambda signum, frame: early.append(signum)) for s in stops}
    try:
        return anyio.run(main)
    except BaseExceptionGroup as group:
        raise _first_leaf(group) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a command: SIGINT (Ctrl-C) and SIGTERM, but not one this process
    was started with ignored. A script's background job (`journal worker &`) ignores SIGINT,
    so that a Ctrl-C at the terminal stops only the script's foreground command; it goes on
    ignoring it, as Python itself and other programs do, and SIGTERM stops it."""
    return tuple(s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN)


def how_to_stop() -> str:
    """What stops this command, for its start-up line."""
    stops = stop_signals()
    if len(stops) == 2:
        return "SIGTERM or Ctrl-C stops it"
    if signal.SIGTERM in stops:
        return "SIGTERM stops it (it was started with SIGINT ignored, as a script's background job is)"
    if signal.SIGINT in stops:
        return "Ctrl-C stops it (it was started with SIGTERM ignored)"
    return "it was started with SIGINT and SIGTERM ignored: only SIGKILL stops it"


def stopped_message(by: signal.Signals, summary: str) -> str:
    """The last line of `worker` or `serve` stopped by a signal: one rule for both (docs/cli.md,
    "Stopping"). A service's stop is its normal end, so it exits 0: a service manager that
    sends SIGTERM (systemd, Kubernetes) sees a clean stop, not a failure."""
    name = "Ctrl-C" if by == signal.SIGINT else by.name
    return f"stopped by {name} ({summary}); invocations in flight are pending for the next worker"
def tell_store_events() -> Callable[[], None]:
    """For a long-running command (`worker`, `serve`): what the store logs about reaching its
    server (one line when it cannot, one when it can again) goes to stderr until the
    function returned is called."""
    import logging  # (here: `journal --help` and `journal ls` import no logging)

    class StoreEvents(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            echo_err(record.getMessage())

    logger = logging.getLogger("journal")
    handler, before = StoreEvents(logging.INFO), (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.propagate = False  # told once, here, not again by a root handler
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.level, logger.propagate = before

    return undo


def _first_leaf(exc: BaseException) -> BaseException:
    """The error a command should report from a task group's exception group: its first leaf."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
