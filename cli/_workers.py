"""Commands for queues of invocations: `start` records one, `worker` runs them (on any host)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import click

from journal import Capability, Store, UnencodableValue, iso_from_us, open_store
from journal.backends import describe
from journal.errors import DiskFull
from runtime import Engine, is_handler_name

from . import _render as render
from ._common import (
    FAILED,
    INTERRUPTED,
    OK,
    Exit,
    db_option,
    echo_err,
    edge,
    fail,
    how_to_stop,
    json_option,
    out,
    own_the_collector,
    run_async,
    runs_recorded_handlers,
    stopped_message,
    store_path,
    tell_store_events,
    warn_store,
)
from ._handlers import Spec, handler_option, importable_cwd, load, load_handlers
from ._report import Progress
from ._run import read_input
from ._start_options import start_kwargs, start_options

# How long a long-running command, once asked to stop, still waits for a database that is
# away, to give its invocations back (their leases run out by themselves otherwise).
STOP_PATIENCE = 5.0


@asynccontextmanager
async def serving_engine(path: str, **options: Any) -> AsyncIterator[Engine]:
    """An engine for `worker` and `serve`: its store waits for its server however long it is
    away (a PostgreSQL store reconnects with backoff meanwhile), and says so on stderr
    (`stop_waiting` shortens the wait once the process is asked to stop)."""
    import anyio

    untell = tell_store_events()
    try:
        store = await anyio.to_thread.run_sync(lambda: open_store(path, reconnect_for=None))
        try:
            async with Engine.open(store=store, **options) as engine:
                yield engine
        finally:
            await anyio.to_thread.run_sync(store.close)
    finally:
        untell()


def stop_waiting(store: Store | None) -> None:
    """A long-running command was asked to stop: its store waits `STOP_PATIENCE` more for an absent server."""
    if store is not None and Capability.RECONNECTS in store.capabilities:
        store.wait_for_server(STOP_PATIENCE)


@click.command()
@click.argument("handler", metavar="TARGET|NAME")
@click.option("--input", "input_json", metavar="JSON", help="The handler's input as JSON (`-` reads stdin).")
@click.option("--input-file", metavar="PATH", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read the input JSON from a file (`-` reads stdin).")
@click.option("--id", "invocation_id", metavar="ID", help="The invocation id (default: a new random one).")
@click.option("--key", metavar="KEY", help="The thread it belongs to (invocations of a key run one at a time).")
@click.option("--limit", "limits", metavar="NAME", multiple=True,
              help="A limit it holds a unit of while it runs (repeatable; journal limit set NAME ...).")
@start_options
@db_option
@json_option
@edge
def start(handler: str, input_json: str | None, input_file: str | None, invocation_id: str | None,
          key: str | None, limits: tuple[str, ...], priority: int, delay_text: str | None, at_text: str | None,
          debounce_text: str | None, debounce_max_text: str | None, if_busy: str, db: str | None,
          as_json: bool) -> None:
    """Record a pending invocation and print its id, without running it.

    A worker runs it: `journal worker` on LMDB, or on PostgreSQL a worker given
    `--handler NAME=TARGET`. TARGET (path/to/file.py:function or package.module:function)
    is imported here to check the input; a NAME (no ':' or '/') is recorded as is, and
    the worker that has it checks the input. Starting an existing id with the same input
    prints that id again.

    Example:

    \b
        journal start summarize --input '{"url": "https://example.com"}' --db postgresql:///jobs
        journal start summarize --input '{"url": "https://example.com"}' --priority 10 --delay 5m
        journal start agent.py:agent --input '"q"' --limit openai --priority 5
    """
    importable_cwd()
    options = start_kwargs(priority, delay_text, at_text, debounce_text, debounce_max_text, if_busy)
    value, _ = read_input(input_json, input_file)
    path = store_path(db)
    warn_store(path)
    target: Any = handler if is_handler_name(handler) else load(handler)

    async def main() -> Any:
        async with Engine.open(path) as engine:
            try:
                return await engine.start(target, value, id=invocation_id, key=key, lax_input=True,
                                          limit=list(limits) or None, **options)
            except (ValueError, UnencodableValue, RecursionError) as exc:
                raise fail(f"bad input: {exc}") from None

    record, interrupted = run_async(main)
    if interrupted:
        raise Exit(INTERRUPTED, "interrupted")
    if as_json:
        click.echo(render.to_json({"id": record.id, "status": record.status.value, "handler": record.handler,
                                   "priority": record.priority, "start_at": iso_from_us(record.start_at)}))
    else:
        out(record.id)


@click.command()
@db_option
@handler_option("A handler this worker runs (repeatable). With any given, it runs only invocations of "
              "these and never imports a path read from the store. Required on PostgreSQL.")
@click.option("--concurrency", type=click.IntRange(1), default=16, show_default=True,
              help="How many invocations run at once.")
@click.option("--until-idle", is_flag=True, help="Exit once nothing is runnable (for scripts and cron).")
@click.option("--durability", type=click.Choice(["sync", "async", "exit"]), default="sync", show_default=True)
@click.option("--lease-ttl", metavar="SECONDS", type=click.FloatRange(1, min_open=False), default=30.0,
              show_default=True,
              help="How long this worker's claim on an invocation lasts without renewal (renewed every third "
              "of it): a worker cut off from the database loses its invocations after this, and another "
              "takes them over.")
@click.option("--disk-full-wait", metavar="SECONDS", type=click.FloatRange(0), default=None,
              help="With --until-idle: how long to wait for room when the store's disk is full before giving "
              "up with exit status 1 (default 60). Without --until-idle the worker waits as long as it takes.")
@click.option("--quiet", "-q", is_flag=True, help="Do not log each step (failed invocations are still logged).")
@edge
def worker(db: str | None, handler_specs: tuple[Spec, ...], concurrency: int, until_idle: bool, durability: str,
           lease_ttl: float, disk_full_wait: float | None, quiet: bool) -> None:
    """Run invocations as they become runnable, until Ctrl-C or SIGTERM.

    Picks up pending invocations, those whose owner died, and timers that are due;
    resolved promises make their invocations pending, so the worker continues them.
    Ctrl-C or SIGTERM stops cleanly, with exit status 0 (130 with --until-idle, stopped
    before it was idle): invocations in flight stay pending for the next worker.
    Started with SIGINT ignored (`journal worker &` in a script), it goes on ignoring
    Ctrl-C.

    Any number of workers, on any number of hosts, may share a PostgreSQL store: each
    invocation runs in one of them at a time, and a new one wakes them at once
    (LISTEN/NOTIFY). There each worker names its handlers with --handler, since a
    database user need not be allowed to choose code for the workers' hosts. When the
    database goes away (a restart, a failover, a lost network), the worker waits and
    reconnects, saying so on stderr, and goes on when it is back; it never exits for it.

    Example:

    \b
        journal worker --concurrency 32
        journal worker --db postgresql://app@db.internal/jobs --handler summarize=agents.summary:run
    """
    if disk_full_wait is not None and not until_idle:
        raise fail("--disk-full-wait bounds the wait of a worker started with --until-idle; a worker that runs "
                   "until stopped waits for room on a full disk as long as it takes")
    path = store_path(db)
    if not runs_recorded_handlers(db) and not handler_specs:
        raise fail("a worker on PostgreSQL runs only the handlers it is given: pass --handler NAME=TARGET "
                   "(repeatable), e.g. --handler summarize=agents.summary:run")
    importable_cwd()
    warn_store(path)
    handlers = load_handlers(handler_specs) if handler_specs else None
    steps = Progress(not quiet, prefix_ids=True)
    own_the_collector()  # the worker's process is the engine's

    opened: list[Store] = []

    async def main() -> None:
        async with serving_engine(path, durability=durability, handlers=handlers, lease_ttl=lease_ttl) as engine:
            opened.append(engine.store)
            engine.observe(steps)
            await engine.serve(concurrency=concurrency, idle_exit=until_idle, disk_full_wait=disk_full_wait)

    try:
        if not quiet:
            echo_err(f"worker on {describe(path)} (pid {os.getpid()}, concurrency {concurrency}"
                     + (f", handlers {', '.join(sorted(handlers))}" if handlers else "") + f"); {how_to_stop()}")
        _, stopped_by = run_async(main, on_stop=lambda: stop_waiting(opened[0] if opened else None))
    except DiskFull as exc:  # --until-idle, and the disk stayed full (a worker that runs on waits)
        raise Exit(FAILED, f"{exc}. Once there is room, run this worker again") from None
    except KeyboardInterrupt:  # a Ctrl-C after the line that says it stops the worker, before the engine runs
        stopped_by = signal.SIGINT
    if stopped_by is not None and until_idle:  # a batch job stopped before its end, as `run` is
        raise Exit(INTERRUPTED, f"interrupted before it was idle ({steps.summary()}); invocations in flight "
                   "are pending for the next worker")
    if stopped_by is not None:
        raise Exit(OK, stopped_message(stopped_by, steps.summary()))
    if not quiet:
        echo_err(f"worker idle; exiting ({steps.summary()})")
