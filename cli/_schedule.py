"""`journal schedule add|ls|show|pause|resume|rm|trigger|backfill`: schedules kept in the
store and fired by every `journal worker` and `journal serve` (runtime/_flow/_schedules/)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from journal import UnencodableValue
from journal.views import schedule_json

from . import _render as render
from ._common import INTERRUPTED, Exit, db_option, edge, fail, json_option, out, run_async, store_path, warn_store
from ._run import read_input
from ._start_options import parse_duration, parse_instant

T = TypeVar("T")


def _with_engine(db: str | None, work: Callable[[Any], Awaitable[T]]) -> T:
    from runtime import Engine

    path = store_path(db)
    warn_store(path)

    async def main() -> T:
        async with Engine.open(path) as engine:
            try:
                return await work(engine)
            except LookupError as exc:
                raise fail(str(exc).strip("'\"")) from None
            except (ValueError, UnencodableValue) as exc:
                raise fail(str(exc)) from None

    result, interrupted = run_async(main)
    if interrupted:
        raise Exit(INTERRUPTED, "interrupted")
    return result  # type: ignore[return-value]


@click.group()
def schedule() -> None:
    """Schedules kept in the store: each tick starts one invocation, NAME@<tick>.

    Every `journal worker` and `journal serve` fires the ticks that are due, on any
    number of hosts: each tick starts exactly one invocation, tagged schedule=NAME.

    Example:

    \b
        journal schedule add nightly examples/research.py:research --cron '0 2 * * *' --tz Europe/Paris
    """


@schedule.command("add")
@click.argument("name")
@click.argument("target", metavar="TARGET|HANDLER")
@click.option("--cron", metavar="EXPR", help="Five cron fields, or @hourly, @daily, @weekly, @monthly, @yearly.")
@click.option("--every", "every_text", metavar="DURATION", help="A fixed interval instead: 30s, 15m, 1h, 1d.")
@click.option("--input", "input_json", metavar="JSON", help="The input each tick's invocation starts with.")
@click.option("--key", metavar="KEY", help="Each tick is a turn of this keyed thread.")
@click.option("--tz", default="UTC", show_default=True, help="The time zone the cron expression is read in.")
@click.option("--overlap", type=click.Choice(["skip", "buffer-one", "buffer-all", "cancel-other", "allow-all"]),
              default="skip", show_default=True, help="What a tick does while the previous tick's run is unfinished.")
@click.option("--catch-up", "catch_up_text", metavar="DURATION", default="1m", show_default=True,
              help="Ticks missed while no worker ran start if this recent; older ones are skipped and counted.")
@click.option("--jitter", "jitter_text", metavar="DURATION", help="Fire each tick up to this late (spreads load).")
@click.option("--start-at", "start_text", metavar="ISO", help="No tick before this time.")
@click.option("--end-at", "end_text", metavar="ISO", help="No tick from this time on.")
@click.option("--priority", type=int, default=0, show_default=True, help="Each tick's invocation's priority.")
@click.option("--limit", "limits", metavar="NAME", multiple=True, help="A limit each tick's invocation holds.")
@click.option("--replace", is_flag=True, help="Change the schedule of this name if it exists (keeps its history).")
@db_option
@json_option
@edge
def add(name: str, target: str, cron: str | None, every_text: str | None, input_json: str | None, key: str | None,
        tz: str, overlap: str, catch_up_text: str, jitter_text: str | None, start_text: str | None,
        end_text: str | None, priority: int, limits: tuple[str, ...], replace: bool, db: str | None,
        as_json: bool) -> None:
    """Add a schedule: TARGET (path/to/file.py:function) or a HANDLER name workers were given.

    Example:

    \b
        journal schedule add digest examples/research.py:research --every 1h --input '"news"'
        journal schedule add nightly summarize --cron '30 2 * * *' --tz Europe/Paris --overlap buffer-one
    """
    if (cron is None) == (every_text is None):
        raise fail("give --cron EXPR or --every DURATION (one of them)")
    value, _ = read_input(input_json, None)
    options = {
        "cron": cron, "every": parse_duration(every_text, "--every") if every_text else None, "input": value,
        "key": key, "tz": tz, "overlap": overlap, "catch_up": parse_duration(catch_up_text, "--catch-up"),
        "jitter": parse_duration(jitter_text, "--jitter") if jitter_text else 0.0,
        "start_at": parse_instant(start_text, "--start-at") if start_text else None,
        "end_at": parse_instant(end_text, "--end-at") if end_text else None,
        "priority": priority, "limit": list(limits), "replace": replace,
    }
    record = _with_engine(db, lambda engine: engine.schedules.add(name, target, **options))
    if as_json:
        click.echo(render.to_json(_shown(db, record.name)))
    else:
        out(f"schedule {name}: next run {_next(record)}")


@schedule.command("ls")
@db_option
@json_option
@edge
def ls(db: str | None, as_json: bool) -> None:
    """List the schedules: rule, next run, last run, skipped ticks.

    Example:

    \b
        journal schedule ls --json
    """
    docs = _with_engine(db, _all_json)
    if as_json:
        click.echo(render.to_json(docs))
        return
    if not docs:
        out("no schedules; add one with: journal schedule add NAME TARGET --cron EXPR")
        return
    for doc in docs:
        rule = doc["cron"] if doc["cron"] is not None else f"every {doc['every']:g}s"
        last = doc["last_run"]
        state = "paused" + (f" ({doc['note']})" if doc["note"] else "") if doc["paused"] else (
            f"next {doc['next_run'] or '-'}")
        out(render.safe(f"{doc['name']:<20} {rule:<16} {doc['tz']:<14} {state}  last "
                        f"{(last['id'] + ' ' + str(last['status'])) if last else '-'}  skipped {doc['skipped']}"))


@schedule.command("show")
@click.argument("name")
@db_option
@json_option
@edge
def show(name: str, db: str | None, as_json: bool) -> None:
    """Show a schedule: its rule, next run, last runs with their status, ticks skipped.

    Example:

    \b
        journal schedule show nightly --json
    """
    doc = _shown(db, name)
    if as_json:
        click.echo(render.to_json(doc))
        return
    for field in ("name", "target", "cron", "every", "tz", "overlap", "catch_up", "key", "paused", "note",
                  "next_run", "skipped"):
        if doc[field] is not None:
            out(render.safe(f"{field:<10} {doc[field]}"))
    for run in doc["recent"]:
        out(render.safe(f"  {run['at']}  {run['id']}  {run['status']}"))


@schedule.command("pause")
@click.argument("name")
@click.option("--note", metavar="TEXT", help="Why it is paused (shown by ls, show and the console).")
@db_option
@edge
def pause(name: str, note: str | None, db: str | None) -> None:
    """Stop firing a schedule until `journal schedule resume`.

    Example:

    \b
        journal schedule pause nightly --note "provider outage"
    """
    _with_engine(db, lambda engine: engine.schedules.pause(name, note))
    out(f"schedule {name} paused")


@schedule.command("resume")
@click.argument("name")
@db_option
@edge
def resume(name: str, db: str | None) -> None:
    """Fire a paused schedule again (missed ticks follow --catch-up).

    Example:

    \b
        journal schedule resume nightly
    """
    record = _with_engine(db, lambda engine: engine.schedules.resume(name))
    out(f"schedule {name} resumed: next run {_next(record)}")


@schedule.command("rm")
@click.argument("name")
@db_option
@edge
def rm(name: str, db: str | None) -> None:
    """Remove a schedule (the invocations it started stay).

    Example:

    \b
        journal schedule rm nightly
    """
    _with_engine(db, lambda engine: engine.schedules.remove(name))
    out(f"schedule {name} removed")


@schedule.command("trigger")
@click.argument("name")
@db_option
@edge
def trigger(name: str, db: str | None) -> None:
    """Start one run of a schedule now; prints its id.

    Example:

    \b
        journal schedule trigger nightly
    """
    out(_with_engine(db, lambda engine: engine.schedules.trigger(name)))


@schedule.command("backfill")
@click.argument("name")
@click.option("--from", "from_text", metavar="ISO", required=True, help="The first instant of the range.")
@click.option("--to", "to_text", metavar="ISO", required=True, help="The end of the range (excluded).")
@db_option
@json_option
@edge
def backfill(name: str, from_text: str, to_text: str, db: str | None, as_json: bool) -> None:
    """Start the ticks of a past range [--from, --to); a tick already started is not started again.

    Example:

    \b
        journal schedule backfill nightly --from 2026-05-01T00:00:00Z --to 2026-05-08T00:00:00Z
    """
    start, end = parse_instant(from_text, "--from"), parse_instant(to_text, "--to")
    ticks = _with_engine(db, lambda engine: engine.schedules.backfill(name, start, end))
    if as_json:
        click.echo(render.to_json([{"id": i, "started": started} for i, started in ticks]))
        return
    for invocation_id, started in ticks:
        out(f"{invocation_id}  {'started' if started else 'already started'}")


async def _all_json(engine: Any) -> list[dict[str, Any]]:
    return [await engine.committer.read(schedule_json, engine.store, s) for s in await engine.schedules.list()]


def _shown(db: str | None, name: str) -> dict[str, Any]:
    async def work(engine: Any) -> dict[str, Any]:
        return await engine.committer.read(schedule_json, engine.store, await engine.schedules.get(name))

    return _with_engine(db, work)


def _next(record: Any) -> str:
    from journal import iso_from_us

    return "none (paused)" if record.paused else iso_from_us(record.next_tick) or "none (ended)"
