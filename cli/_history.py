"""Commands over an invocation's history: replay it against current code, fork it."""

from __future__ import annotations

import json
from typing import Any

import anyio
import click

from journal import expand_id
from journal import fork as fork_invocation
from journal.errors import JournalError
from runtime import is_handler_name
from runtime.errors import HandlerNotFound, NondeterminismError
from runtime.testing import replay_journal

from . import _render as render
from ._batch import check_where, run_where, where_options
from ._common import (
    DIVERGED,
    OK,
    USAGE,
    Exit,
    db_option,
    echo_err,
    edge,
    fail,
    json_option,
    open_store,
    out,
    runs_recorded_handlers,
    store_path,
    suggest,
)
from ._handlers import Spec, handler_option, importable_cwd, load_handlers, lone_target
from ._inspect import require

# -- replay -------------------------------------------------------------------------------------


def _replay_one(store: Any, invocation_id: str, target: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"id": invocation_id, "status": "ok", "seq": None, "checked": 0,
                              "finished": False, "message": None}
    if store.entry_count(invocation_id) == 0:
        return {**result, "status": "skipped", "message": "no journal (it was trimmed)"}
    try:
        report = anyio.run(replay_journal, target, store, invocation_id)
    except NondeterminismError as exc:
        return {**result, "status": "diverged", "seq": exc.seq, "message": str(exc)}
    except (HandlerNotFound, JournalError) as exc:
        return {**result, "status": "error", "message": str(exc)}
    except SystemExit as exc:
        return {**result, "status": "error",
                "message": f"the handler called sys.exit({exc.code!r}); a handler returns or raises instead"}
    except Exception as exc:  # the handler module or its input decoding failed outside any step
        return {**result, "status": "error", "message": f"the handler raised {type(exc).__name__}: {exc}"}
    return {**result, "checked": report.checked, "finished": report.finished, "seq": report.stopped_at}


def _replay_named(store: Any, invocation_id: str, handlers: dict[str, Any]) -> dict[str, Any]:
    """`_replay_one` with the code `--handler NAME=TARGET` gives for the name the invocation records."""
    record = store.get(invocation_id)
    fn = handlers.get(record.handler) if record is not None else None
    if record is not None and fn is None:
        return {"id": invocation_id, "status": "error", "seq": None, "checked": 0, "finished": False,
                "message": f"it records the handler {record.handler!r}, which no --handler names (given: "
                           f"{', '.join(sorted(handlers))}): add --handler "
                           + (f"{record.handler}=TARGET" if is_handler_name(record.handler) else "TARGET, its code")}
    return _replay_one(store, invocation_id, fn)


def _started_here(db: str | None, store: Any, invocation_id: str) -> str | None:
    """The handler `journal run` started the invocation with from here, if the store still records it."""
    from . import _started_here as here

    noted = here.handler_for(store_path(db), invocation_id)
    record = store.get(invocation_id)
    return noted if record is not None and record.handler == noted else None


def _replay_noted(db: str | None, store: Any, invocation_id: str) -> dict[str, Any]:
    """`_replay_one` with the code `journal run` started the invocation with from here, if it may run."""
    from ._started_here import refusal

    noted = _started_here(db, store, invocation_id)
    refused = None if noted is None else refusal(noted)
    if noted is not None and refused is None:
        return _replay_one(store, invocation_id, noted)
    message = refused or ("on PostgreSQL the handler is not read from the database, and `journal run` did not "
                          "start it from this host: pass --handler TARGET")
    return {"id": invocation_id, "status": "error", "seq": None, "checked": 0, "finished": False, "message": message}


def _replay_line(r: dict[str, Any]) -> str:
    r = {k: render.safe(v) if isinstance(v, str) else v for k, v in r.items()}
    if r["status"] == "ok":
        how = ("the handler ran to its end" if r["finished"] else
               f"the journal ends at seq {r['seq']}; live execution would continue there")
        matched = "1 recorded operation matches" if r["checked"] == 1 else f"{r['checked']} recorded operations match"
        return render.Styled(f"{click.style('✓', fg='green')} {r['id']}: {matched} ({how})")
    if r["status"] == "diverged":
        return render.Styled(f"{click.style('✗', fg='red')} {r['id']}: diverged at seq {r['seq']}\n{r['message']}")
    if r["status"] == "skipped":
        return f"- {r['id']}: skipped, {r['message']}"
    return render.Styled(f"{click.style('!', fg='yellow')} {r['id']}: cannot replay: {r['message']}")


@click.command()
@click.argument("invocation_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Replay every invocation that has a journal.")
@handler_option("Check against this code (path/to/file.py:function or package.module:function) instead of "
                   "the handler the journal names; NAME=TARGET gives the code for invocations recorded as NAME "
                   "(repeatable), as for resume and worker. Required on PostgreSQL, unless `journal run` "
                   "started the invocation from this host.")
@db_option
@json_option
@edge
def replay(invocation_ids: tuple[str, ...], every: bool, handler_specs: tuple[Spec, ...], db: str | None,
           as_json: bool) -> None:
    """Check journals against the current code, calling no step function.

    The handler's code runs against its journal read-only: recorded results are
    handed back, nothing is appended, no step function is called, and the check stops
    where the journal ends. The handler the journal names is imported only if it is an
    ordinary handler of yours (a .py file you own that nobody else can write, or a
    module outside the standard library); --handler names the code yourself: one
    TARGET for every invocation, or NAME=TARGET for those recorded as NAME (repeat it
    for a store of several handlers). Exit status 4 if any invocation diverged (the
    report shows the seq, what the journal holds and what the code asked for), 2 if one
    could not be replayed, else 0. Run it before deploying a change to a handler.

    Example:

    \b
        journal replay --all
        journal replay --all --handler summarize=agents/summary.py:run --handler triage=agents.triage:run
    """
    if every == bool(invocation_ids):
        raise fail("name the invocations to replay, or pass --all (not both)")
    importable_cwd()
    target = lone_target(handler_specs)
    handlers = load_handlers(handler_specs) if handler_specs and target is None else None
    with open_store(db) as store:
        ids = [r.id for r in store.list()] if every else [require(store, i).id for i in invocation_ids]
        if handlers is not None:
            results = [_replay_named(store, i, handlers) for i in ids]
        elif target is None and not runs_recorded_handlers(db):
            # The handler is not read from the database: only one `journal run` started from
            # this host (and this user) is replayed without --handler, with the code it ran.
            results = [_replay_noted(db, store, i) for i in ids]
        else:
            results = [_replay_one(store, i, target) for i in ids]
    if as_json:
        click.echo(render.to_json(results))
    else:
        for r in results:
            out(_replay_line(r))
        counts = {s: sum(1 for r in results if r["status"] == s) for s in ("ok", "diverged", "error", "skipped")}
        echo_err(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "nothing to replay")
    if any(r["status"] == "diverged" for r in results):
        raise Exit(DIVERGED)
    if any(r["status"] == "error" for r in results):
        raise Exit(USAGE)
    raise Exit(OK)


# -- fork ---------------------------------------------------------------------------------------


def _parse_sets(sets: tuple[str, ...]) -> dict[int, Any]:
    values: dict[int, Any] = {}
    for item in sets:
        seq_text, sep, text = item.partition("=")
        try:
            seq = int(seq_text)
        except ValueError:
            seq = -1
        if not sep or seq < 0:
            raise fail(f"--set {item!r} is not SEQ=JSON (for example --set 3='{{\"approved\": true}}')")
        try:
            values[seq] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(f"--set {seq}: the value is not valid JSON: {exc.msg} at line {exc.lineno}, "
                       f"column {exc.colno}") from None
    return values


async def _checked_fork(store: Any, invocation_id: str, at: int, new_id: str | None,
                        values: dict[int, Any]) -> Any:
    from runtime import Engine

    async with Engine.open(store=store) as engine:
        return await engine.fork(invocation_id, at=at, values=values, new_id=new_id)


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--at", "at", type=int, required=True, metavar="SEQ",
              help="The fork point: entries 0 to SEQ-1 are copied; the fork runs live from SEQ.")
@click.option("--new-id", metavar="NEW", help="The new invocation's id (default: ID-fork-<6 hex digits>).")
@click.option("--set", "sets", multiple=True, metavar="SEQ=JSON",
              help="Replace the recorded value of the step (or promise) at SEQ in the copy; a value that does not fit "
                   "the type the handler reads it as is refused, when this host can import the handler. Repeatable.")
@db_option
@json_option
@edge
def fork(invocation_id: str, at: int, new_id: str | None, sets: tuple[str, ...], db: str | None,
         as_json: bool) -> None:
    """Copy a journal prefix into a new pending invocation.

    Entries 0 to SEQ-1 of ID are copied; ID itself is untouched.

    Resuming the fork replays the copied entries and runs live from SEQ: use it to
    retry from before a failure or a divergence, or, with --set, to edit a recorded
    result and go on from there.

    Example:

    \b
        journal fork 3f2a9c --at 3 --set 2='"a better plan"'
    """
    values = _parse_sets(sets)
    with open_store(db, readonly=False) as store:
        invocation_id = expand_id(store, invocation_id)
        if values:
            # Through the engine, which replays the copy against the recorded handler's code
            # (when this host can import it) and refuses a value that does not fit its type.
            record = anyio.run(_checked_fork, store, invocation_id, at, new_id, values)
        else:
            record = fork_invocation(store, invocation_id, at=at, new_id=new_id)
        store.sync()
        entries = store.entry_count(record.id)
    if as_json:
        click.echo(render.to_json({"id": record.id, "parent": invocation_id, "at": at, "entries": entries,
                                   "status": record.status.value}))
    else:
        out(record.id)
        echo_err(f"forked {invocation_id} at seq {at} into {record.id} ({entries} entries copied"
                 + (f", {len(values)} value{'s' if len(values) > 1 else ''} replaced" if values else "") + ")")
        echo_err(f"continue it with: {suggest(['resume', record.id], db)}")


# -- retry --------------------------------------------------------------------------------------


@click.command()
@click.argument("invocation_id", metavar="ID", required=False)
@click.option("--new-id", metavar="NEW", help="The new invocation's id (default: ID-retry-N, the first N free).")
@click.option("--force", is_flag=True, help="Retry it even though a retry of it is running or completed "
              "(without it, that is refused, naming the retry: a failed invocation is not retried twice by accident).")
@click.option("--no-run", is_flag=True, help="Only create it, pending: a worker that has its handler (or "
              "`journal resume NEW`) runs it.")
@click.option("--handler", "handler_specs", metavar="[NAME=]TARGET", multiple=True,
              help="The code to run it with, as for resume (after fixing the cause of the failure, the fixed code). "
                   "Required on PostgreSQL, unless `journal run` started the failed invocation from this host.")
@where_options(check=True)
@db_option
@json_option
@click.pass_context
@edge
def retry(ctx: click.Context, invocation_id: str | None, new_id: str | None, force: bool, no_run: bool,
          handler_specs: tuple[str, ...], where: bool, statuses: tuple[str, ...], where_key: str | None,
          tags: dict[str, str], text: str | None, since: str | None, until: str | None, dry_run: bool, check: bool,
          db: str | None, as_json: bool) -> None:
    """Run a failed invocation again from before its failing step, as a new one.

    The failed invocation ID is forked before the step whose error failed it (or before
    its `failed` entry, when the handler itself raised): the steps that succeeded are
    replayed, not run again, and the rest runs live with the current code. ID is
    untouched. The new invocation's id is printed, then it runs here as `journal resume`
    runs it (exit status as for `journal run`); with --no-run it is left pending. An
    invocation with a retry that is pending, running, suspended, diverged or completed is
    not retried again (exit 2, naming that retry) unless --force: the retry's steps keep
    the idempotency keys of the steps they retry, but a second retry would still run them.

    With --where and the filters of `journal ls`, every failed invocation they match is
    retried (left pending for the workers), as a batch kept in the store; --check first
    replays each one's journal against the code (the recorded handler, or --handler) and
    retries only those that replay cleanly, listing the others with their first
    difference; --dry-run changes nothing.

    Example:

    \b
        journal retry 3f2a9c
        journal retry 3f2a9c --no-run --new-id 3f2a9c-again
        journal retry --where --status failed --since 2026-12-03T14:00Z --check --dry-run
    """
    from journal import retry_fork

    if check_where(invocation_id, where, "retry", dry_run or check or bool(statuses or where_key or tags or text
                                                                              or since or until)):
        run_where("retry", db=db, handler_specs=tuple(handler_specs), statuses=statuses or ("failed",),
                  key=where_key, tags=tags, text=text, since=since, until=until, dry_run=dry_run, check=check,
                  as_json=as_json)
    assert invocation_id is not None

    with open_store(db, readonly=False) as store:
        invocation_id = expand_id(store, invocation_id)
        record = retry_fork(store, invocation_id, new_id=new_id, force=force)
        store.sync()
        at = store.entry_count(record.id)
    if not (as_json and not no_run):
        out(render.to_json({"id": record.id, "status": record.status.value, "retry_of": invocation_id, "at": at})
            if as_json else record.id)
    echo_err(f"retrying {invocation_id} as {record.id}: seqs 0 to {at - 1} copied, live from seq {at}")
    if no_run:
        raise Exit(OK, f"run it with: {suggest(['resume', record.id], db)}")
    if not handler_specs and not runs_recorded_handlers(db):
        from . import _started_here as here

        noted = here.handler_for(store_path(db), invocation_id)
        if noted is not None:
            handler_specs = (noted,)  # the code `journal run` started the failed one with here
    from ._run import resume

    ctx.invoke(resume, invocation_id=record.id, db=db, durability="sync", progress=None,
               handler_specs=handler_specs, as_json=as_json)
