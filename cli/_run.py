"""Commands that run handlers or reach running ones: run, resume, resolve, cancel.

What they print when a run ends (the outcome, its exit status, how to continue a
suspended invocation) is in `_report.py`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import click

from journal import InvocationRecord, Status, UnencodableValue, encode_value
from journal.errors import DiskFull
from runtime import Engine, Outcome

from . import _render as render
from ._common import (
    FAILED,
    INTERRUPTED,
    OK,
    USAGE,
    Exit,
    db_option,
    echo_err,
    edge,
    existing_store,
    fail,
    full_id,
    json_option,
    out,
    own_the_collector,
    run_async,
    runs_recorded_handlers,
    store_path,
    suggest,
    warn_store,
)
from ._handlers import Spec, handler_option, importable_cwd, load
from ._report import Progress, disk_full_help, interrupted_help, outcome_json, queued_exit, report
from ._start_options import start_kwargs, start_options
from ._thread_view import unblock_hint

# -- pieces ----------------------------------------------------------------------------------------


def read_input(input_json: str | None, input_file: str | None, *, name: str = "--input") -> tuple[Any, bool]:
    """The handler input from --input / --input-file (`-` reads stdin); `(None, False)` if none.

    `name` is what the messages call the JSON argument (`resolve` takes it as JSON)."""
    if input_json is not None and input_file is not None:
        raise fail("give the input once: --input JSON or --input-file PATH, not both")
    if input_json is not None:
        where = f"{name} (stdin)" if input_json == "-" else name
        text = sys.stdin.read() if input_json == "-" else input_json
    elif input_file is not None:
        where = "stdin" if input_file == "-" else input_file
        if input_file == "-":
            text = sys.stdin.read()
        else:
            try:
                with open(input_file, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise fail(f"cannot read --input-file {input_file}: {exc}") from None
    else:
        return None, False
    try:
        return json.loads(text), True
    except json.JSONDecodeError as exc:
        raise fail(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise fail(f"{where} is nested too deeply to decode; flatten the input") from None


def _announce(invocation_id: str) -> Callable[[InvocationRecord], None]:
    """What a run tells its user when it waits for an earlier invocation of its key."""
    def queued(head: InvocationRecord) -> None:
        echo_err(f"{invocation_id} waits for {head.id}, which runs first on key {head.key!r}")

    return queued


async def _turn_note(engine: Engine, outcome: Outcome, db: str | None) -> str | None:
    """For a run that stopped queued behind an invocation nobody is running (`turn:ID`):
    what to do, since waiting would never end."""
    if outcome.status != Status.PENDING or not (outcome.waiting or "").startswith("turn:"):
        return None
    assert outcome.waiting is not None
    head = await engine.committer.read(engine.store.get, outcome.waiting[len("turn:"):])
    hint = None if head is None else await engine.committer.read(unblock_hint, engine.store, head, time.time_ns() // 1000,
                                                                  db)
    record = await engine.committer.read(engine.store.require, outcome.id)
    return "\n".join([
        f"invocation {outcome.id} is queued on key {record.key!r}: invocations of a key run one at "
        "a time, in arrival order, and an earlier one is unfinished.",
        hint or f"the queue waits for {outcome.waiting[len('turn:'):]}",
        f"then continue this one: {suggest(['resume', outcome.id], db)}",
    ])


def _execute(db: str | None, durability: str, progress: Progress, work: Any, *, create: bool = False,
             handlers: dict[str, Any] | None = None) -> Any:
    """Open an engine on the store and run `work(engine)`; Ctrl-C leaves with exit 130."""
    path = store_path(db) if create else existing_store(db)
    warn_store(path)

    async def main() -> Any:
        async with Engine.open(path, durability=durability, handlers=handlers) as engine:
            engine.observe(progress)
            return await work(engine)

    result, interrupted = run_async(main)
    if interrupted:
        raise Exit(INTERRUPTED, "interrupted")
    return result


def _conclude(db: str | None, durability: str, steps: Progress, work: Any, interrupted_id: Any,
              *, started: float, show: bool, as_json: bool, create: bool = False,
              handlers: dict[str, Any] | None = None) -> NoReturn:
    """Run `work` and leave with the outcome's exit status (`run` and `resume` end alike)."""
    own_the_collector()  # this process runs the invocation and nothing else
    async def work_and_wait(engine: Engine) -> tuple[Outcome, InvocationRecord | None, str | None]:
        outcome = await work(engine)
        waits_on = None
        if outcome.status == Status.SUSPENDED and outcome.waiting:  # (a typed promise's record says its type)
            waits_on = await engine.committer.read(engine.waiting_for, outcome.id)
        return outcome, waits_on, await _turn_note(engine, outcome, db)

    try:
        outcome, waits_on, queued = _execute(db, durability, steps, work_and_wait, create=create, handlers=handlers)
    except Exit as exc:
        invocation_id = interrupted_id()
        if exc.code == INTERRUPTED and invocation_id is not None:
            raise Exit(INTERRUPTED, interrupted_help(invocation_id, db)) from None
        raise
    except DiskFull as exc:
        invocation_id = interrupted_id()
        if invocation_id is None:
            raise
        # Not the handler's failure: the store could not take the next entry, and the
        # invocation went back to `pending` with every step committed before it.
        raise Exit(FAILED, disk_full_help(exc, invocation_id, db)) from None
    if queued is not None:
        queued_exit(outcome, queued, as_json)
    if show:
        echo_err(f"{outcome.status.value} in {render.duration(time.perf_counter() - started)} ({steps.summary()})")
    raise Exit(report(outcome, db=db, as_json=as_json, waits_on=waits_on))


# -- commands -----------------------------------------------------------------------------------


@click.command()
@click.argument("target")
@click.option("--input", "input_json", metavar="JSON", help="The handler's input as JSON (`-` reads stdin).")
@click.option("--input-file", metavar="PATH", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read the input JSON from a file (`-` reads stdin).")
@click.option("--id", "invocation_id", metavar="ID",
              help="The invocation id (default: a new random one). Running an existing id attaches to it.")
@click.option("--key", metavar="KEY",
              help="The thread it belongs to: invocations of a key run one at a time and share ctx.state.")
@start_options
@db_option
@click.option("--limit", "limits", metavar="NAME", multiple=True,
              help="A limit it holds a unit of while it runs (repeatable; journal limit set NAME ...).")
@click.option("--durability", type=click.Choice(["sync", "async", "exit"]), default="sync", show_default=True,
              help="sync: fsync every step; async: fsync within 100 ms; exit: write when the run ends.")
@click.option("--progress/--no-progress", default=None,
              help="Show each step as it finishes (default: when stderr is a terminal).")
@json_option
@edge
def run(target: str, input_json: str | None, input_file: str | None, invocation_id: str | None, key: str | None,
        limits: tuple[str, ...], priority: int, delay_text: str | None, at_text: str | None,
        debounce_text: str | None, debounce_max_text: str | None, if_busy: str, db: str | None, durability: str,
        progress: bool | None, as_json: bool) -> None:
    """Run a handler as a new durable invocation (or attach to --id).

    TARGET is path/to/file.py:function or package.module:function, an `async def`
    handler. Exit status: 0 completed, 1 failed, 2 bad usage or input, 3 suspended
    (the commands that continue it are printed), 4 nondeterminism, 130 interrupted.

    Example:

    \b
        journal run examples/research.py:research --input '{"question": "Why LMDB?"}'
    """
    options = start_kwargs(priority, delay_text, at_text, debounce_text, debounce_max_text, if_busy)
    fn = load(target)
    value, given = read_input(input_json, input_file)
    show = sys.stderr.isatty() if progress is None else progress
    steps = Progress(show)
    chosen: list[str] = []
    started = time.perf_counter()

    def begun(record: InvocationRecord) -> None:
        chosen.append(record.id)
        if not runs_recorded_handlers(db) and record.handler == getattr(fn, "__journal_path__", None):
            from . import _started_here  # so that `resume` and `replay` from here need no --handler

            _started_here.note(store_path(db), record.id, record.handler)
        if show:
            echo_err(f"running {record.id} ({render.cut(record.handler, 60)})")
        elif invocation_id is None and not as_json:  # the only way to learn a generated id
            echo_err(f"invocation {record.id}")

    async def work(engine: Engine) -> Outcome:
        try:
            return await engine.run(fn, value, id=invocation_id, key=key, lax_input=True, started=begun,
                                    limit=list(limits) or None,
                                    queued=lambda head: _announce(chosen[0])(head), **options)
        except (ValueError, UnencodableValue, RecursionError) as exc:
            if chosen:  # not the input: it was recorded
                raise
            hint = "" if given else "; pass it with --input JSON or --input-file PATH"
            raise fail(f"bad input: {exc}{hint}") from None

    _conclude(db, durability, steps, work, lambda: chosen[0] if chosen else None,
              started=started, show=show, as_json=as_json, create=True)


@click.command()
@click.argument("invocation_id", metavar="ID")
@db_option
@click.option("--durability", type=click.Choice(["sync", "async", "exit"]), default="sync", show_default=True,
              help="How steps run from here on are made durable.")
@click.option("--progress/--no-progress", default=None,
              help="Show each step as it finishes (default: when stderr is a terminal).")
@handler_option("Run this code (path/to/file.py:function or package.module:function) instead of the handler "
                   "the journal names; NAME=TARGET gives the code for invocations recorded as NAME (repeatable). "
                   "Required on PostgreSQL, unless `journal run` started it from this host.")
@json_option
@edge
def resume(invocation_id: str, db: str | None, durability: str, progress: bool | None, handler_specs: tuple[Spec, ...],
           as_json: bool) -> None:
    """Continue an invocation: replay, then run the rest live.

    Use it after a crash, after `journal resolve`, when a timer is due, or after fixing
    the code of a diverged invocation. Exit status as for `journal run`.

    A running invocation whose owner is gone (killed: `journal ls` shows it as `running
    (owner gone)`) is taken over; one whose owner is alive is refused with exit 2.

    The handler the journal names is imported only if it is an ordinary handler of
    yours (a .py file you own that nobody else can write, or a module outside the
    standard library); --handler names the code to run yourself.

    Example:

    \b
        journal resume 3f2a9c
        journal resume 3f2a9c --handler agents/triage.py:triage
    """
    from ._handlers import load_handlers, lone_target

    importable_cwd()
    handlers = load_handlers(handler_specs) if handler_specs else None  # (bad code before a look at the store)
    invocation_id = full_id(db, invocation_id)
    noted = None
    if not runs_recorded_handlers(db) and not handler_specs:
        from ._started_here import required

        noted = required(store_path(db), invocation_id)
        handler_specs = (Spec(None, noted),)  # the code this user's `journal run` imported here
        handlers = load_handlers(handler_specs)
    # A lone TARGET is the code to run, whatever name the journal records; NAME=TARGET pairs
    # are looked up by the recorded name.
    fn = next(iter(handlers.values())) if handlers and lone_target(handler_specs) else None
    show = sys.stderr.isatty() if progress is None else progress
    steps = Progress(show)
    started = time.perf_counter()
    if show:
        echo_err(f"resuming {invocation_id}")

    async def work(engine: Engine) -> Outcome:
        # Refused while a live process runs it (a finished one reports how it ended).
        await engine.check_resumable(invocation_id, finished_ok=True)
        record = await engine.committer.read(engine.store.require, invocation_id)
        if noted is not None and record.handler != noted:
            raise fail(f"invocation {invocation_id} now records handler {render.safe(record.handler)!r}, not "
                       f"{render.safe(noted)!r}, which `journal run` started it with here: pass --handler NAME=TARGET")
        return await engine.resume(invocation_id, fn, wait_turn=True, queued=_announce(invocation_id))

    _conclude(db, durability, steps, work, lambda: invocation_id,
              started=started, show=show, as_json=as_json, handlers=handlers)


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.argument("name")
@click.argument("value", metavar="[JSON]", required=False)
@click.option("--reject", metavar="MSG", help="Reject the promise instead: the handler gets PromiseRejected(MSG).")
@click.option("--early", is_flag=True,
              help="Deliver it although the invocation does not wait on NAME yet: it is kept until the handler asks.")
@db_option
@json_option
@edge
def resolve(invocation_id: str, name: str, value: str | None, reject: str | None, early: bool, db: str | None,
            as_json: bool) -> None:
    """Resolve (or --reject) a promise an invocation waits for.

    JSON (default null) is delivered to promise NAME of invocation ID.

    A suspended invocation waiting on NAME becomes pending: `journal resume ID` (or a
    running `journal worker`) continues it. JSON `-` reads the value from stdin.

    A promise the invocation neither waits on nor has recorded is refused (exit 2), so
    that a typo in NAME does not vanish; --early delivers it ahead of the handler's asking.

    A promise awaited with a type (`ctx.promise(NAME, type=T)`) refuses a value that
    does not fit T (exit 2, naming the type): nothing is delivered, it stays pending.

    A parent suspended in ctx.call waits on `child:CHILD`, which only the child's result
    settles: resolve what the child waits for instead (`journal resume PARENT` says what).

    Example:

    \b
        journal resolve 3f2a9c approval '{"approved": true, "by": "ada"}'
    """
    if reject is not None and value is not None:
        raise fail("give a JSON value or --reject MSG, not both")
    invocation_id = full_id(db, invocation_id)
    decoded = None
    if value is not None:
        decoded, _ = read_input(value, None, name=f"the value for promise {name!r}")
        try:
            encode_value(decoded)
        except UnencodableValue as exc:
            raise fail(f"the value for promise {name!r} cannot be journaled: {exc}") from None

    async def work(engine: Engine) -> Any:
        engine.store.require(invocation_id)
        if reject is not None:
            return await engine.reject(invocation_id, name, reject, early=early)
        return await engine.resolve(invocation_id, name, decoded, early=early)

    record = _execute(db, "sync", Progress(False), work)
    if as_json:
        click.echo(render.to_json({
            "id": record.id, "name": name, "rejected": reject is not None, "status": record.status.value,
            "waiting": record.waiting,
        }))
    else:
        verb = "rejected" if reject is not None else "resolved"
        out(f"{verb} promise {name!r} of {record.id}; it is {record.status.value}")
    if record.status == Status.PENDING:
        echo_err(f"continue it with: {suggest(['resume', record.id], db)}")
    elif record.status == Status.SUSPENDED and record.waiting not in (None, name):
        echo_err(f"note: it waits on promise {record.waiting!r}; {name!r} is kept until the handler asks for it")
    elif record.status == Status.RUNNING:
        echo_err("it is running in another process, which receives the value when it asks for it")


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--no-wait", is_flag=True, help="Only record the request; the next run of the invocation receives it.")
@click.option("--rollback", is_flag=True,
              help="Also undo the ctx.state changes it made to its key, atomically with its `cancelled` entry.")
@handler_option("The code to run it with here if nobody runs it, as for resume. On PostgreSQL, without it "
                   "(and unless `journal run` started it from this host) a worker that has its handler "
                   "delivers the cancellation, and this command waits for that.")
@db_option
@click.option("--progress/--no-progress", default=None,
              help="Show each compensating step as it finishes (default: when stderr is a terminal).")
@json_option
@edge
def cancel(invocation_id: str, no_wait: bool, rollback: bool, handler_specs: tuple[Spec, ...], db: str | None,
           progress: bool | None, as_json: bool) -> None:
    """Cancel an invocation: its handler gets `Cancelled`.

    The exception is raised at the handler's next context call.

    The handler may catch it to run compensating steps (journaled as usual); the
    invocation then ends `cancelled`. A suspended or pending invocation is run here
    to receive it; one running elsewhere is waited for. Exit status 0 once cancelled.
    On PostgreSQL the handler is not read from the database: it is run here with the
    code --handler gives (or that `journal run` started it with from this host), else a
    worker that has its handler delivers the cancellation and this command waits for it.

    With --rollback, the state of its key (ctx.state) is put back as it was before the
    invocation, in the same transaction as its `cancelled` entry, so the next invocation
    of the key sees none of its changes (nor those of its compensating steps).

    Example:

    \b
        journal cancel 3f2a9c
        journal cancel 3f2a9c --rollback
        journal cancel 3f2a9c --db postgresql:///jobs --handler summarize=agents/summary.py:run
    """
    from ._handlers import load_handlers, lone_target

    importable_cwd()
    if handler_specs:  # bad code is refused before a look at the store
        load_handlers(handler_specs)
    invocation_id = full_id(db, invocation_id)
    show = sys.stderr.isatty() if progress is None else progress
    if not handler_specs and not runs_recorded_handlers(db):
        # The handler is not read from the database; the code `journal run` started it with here may run it.
        from ._started_here import handler_for, refusal

        noted = handler_for(store_path(db), invocation_id)
        if noted is not None and refusal(noted) is None:
            handler_specs = (Spec(None, noted),)
    handlers = load_handlers(handler_specs) if handler_specs else None
    lone = next(iter(handlers.values())) if handlers and lone_target(handler_specs) else None
    # Without code to run it here, on PostgreSQL, a worker that has its handler delivers the cancellation.
    by_a_worker = handlers is None and not runs_recorded_handlers(db)
    waited: list[str] = []

    async def work(engine: Engine) -> tuple[Outcome, bool]:
        record = engine.store.require(invocation_id)
        while record.continued_as is not None:
            record = engine.store.require(record.continued_as)
        if record.finished:
            return Outcome.of(record), True
        if lone is not None and engine.handlers is not None:  # one TARGET: the code whatever name it records
            engine.handlers[record.handler] = lone
        if no_wait or not by_a_worker:
            return await engine.cancel(invocation_id, run=not no_wait, rollback=rollback), False
        outcome = await engine.cancel(invocation_id, run=False, rollback=rollback)
        if outcome.status in (Status.PENDING, Status.SUSPENDED):
            waited.append(record.handler)
            echo_err(f"cancellation of {outcome.id} requested; waiting for a worker that has handler "
                     f"{render.safe(record.handler)!r} to deliver it (Ctrl-C stops waiting, and the request "
                     f"stays recorded), or deliver it here: {_cancel_here(outcome.id, record.handler, db)}")
        return await engine.wait(outcome.id), False

    try:
        outcome, already = _execute(db, "sync", Progress(show), work, handlers=handlers)
    except Exit as exc:
        if exc.code == INTERRUPTED and waited:
            raise Exit(INTERRUPTED, f"interrupted; the cancellation of {invocation_id} is recorded, and a worker "
                       f"that has handler {render.safe(waited[0])!r} delivers it when it runs it") from None
        raise
    if already:
        if as_json:
            click.echo(render.to_json(outcome_json(outcome)))
        if outcome.status == Status.CANCELLED:  # cancelling is idempotent: same answer as the first time
            if not as_json:
                out(f"cancelled {outcome.id}")
            raise Exit(OK, f"(invocation {outcome.id} was already cancelled)")
        raise Exit(USAGE, f"invocation {outcome.id} already {outcome.status.value}; there is nothing to cancel")
    if no_wait and outcome.status not in (Status.CANCELLED, Status.COMPLETED, Status.FAILED):
        if as_json:
            click.echo(render.to_json(outcome_json(outcome)))
        else:
            out(f"cancellation of {invocation_id} requested; it is {outcome.status.value}")
        raise Exit(OK, "its next run receives it: " + (
            "the one in flight, at its next context call" if outcome.status == Status.RUNNING else
            f"`{suggest(['resume', outcome.id], db)}`, or a worker"))
    raise Exit(report(outcome, db=db, as_json=as_json, cancel_ok=True))


def _cancel_here(invocation_id: str, handler: str, db: str | None) -> str:
    """`journal cancel ID --handler NAME=TARGET`, for a name; `--handler TARGET` for a recorded path."""
    spec = f"{handler}=path/to/file.py:function" if ":" not in handler and "/" not in handler else handler
    return suggest(["cancel", invocation_id, "--handler", spec], db)
