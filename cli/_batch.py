"""`journal cancel|resume|retry --where FILTERS`: one action over every invocation the
filters of `journal ls` match, as a batch recorded in the store (`journal.batches`), so
that one interrupted (a crash, Ctrl-C) goes on when the next worker or server starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import click

from . import _render as render
from ._common import INTERRUPTED, OK, Exit, echo_err, fail, out, run_async, store_path, tag_option, warn_store
from ._handlers import HandlerSpec, Spec, importable_cwd, load_handlers

_STATUSES = ["pending", "running", "suspended", "diverged", "completed", "failed", "cancelled"]


def where_options(check: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--where` and the filters of `journal ls`, `--dry-run` (and `--check` for retry)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--where", is_flag=True, help="Act on every invocation the filters below match, instead of "
                         "one ID (a batch, kept in the store: an interrupted one goes on when a worker starts)."),
            click.option("--status", "statuses", multiple=True, type=click.Choice(_STATUSES),
                         help="With --where: only invocations with this status (repeatable)."),
            click.option("--key", "where_key", metavar="KEY", help="With --where: only those of this key."),
            tag_option("With --where: only those tagged KEY=VALUE (repeatable)."),
            click.option("--search", "text", metavar="TEXT",
                         help="With --where: only those with TEXT in the id, handler, key or error."),
            click.option("--since", metavar="TIME", help="With --where: only those created at TIME or later."),
            click.option("--until", metavar="TIME", help="With --where: only those created before TIME."),
            click.option("--dry-run", is_flag=True, help="With --where: list what it would act on, acting on nothing."),
        ]
        if check:
            options.append(click.option(
                "--check", is_flag=True, help="With --where: first replay each failed journal against the code the "
                "retry would run; retry those that replay cleanly, list the ones that would diverge."))
        for option in reversed(options):
            fn = option(fn)
        return fn

    return wrap


def check_where(invocation_id: str | None, where: bool, action: str, filtered: bool) -> bool:
    """Whether a command acts on one ID or, with --where, on what its filters match."""
    if where and invocation_id is not None:
        raise fail(f"give either an ID or --where with filters, not both (journal {action} --where --status ...)")
    if not where and invocation_id is None:
        raise fail(f"journal {action} needs an ID, or --where with the filters of `journal ls`")
    if not where and filtered:
        raise fail(f"the filters (--status, --tag, --dry-run, ...) go with --where: journal {action} --where ...")
    return where


def run_where(action: str, *, db: str | None, handler_specs: tuple[Any, ...], statuses: tuple[str, ...],
              key: str | None, tags: dict[str, str], text: str | None, since: str | None, until: str | None,
              dry_run: bool, check: bool, as_json: bool) -> NoReturn:
    """Make the batch, carry it out here, and say what it did."""
    from journal import batches
    from runtime import Engine

    specs = tuple(s if isinstance(s, Spec) else HandlerSpec().convert(s, None, None) for s in handler_specs)
    if len(specs) > 1:
        raise fail("--where takes one --handler: the handler whose invocations it acts on ([NAME=]TARGET, whose "
                   "code a --check replays against)")
    importable_cwd()
    handlers = load_handlers(specs) if specs else None
    filter: dict[str, Any] = {k: v for k, v in {
        "status": list(statuses) or None, "handler": next(iter(handlers)) if handlers else None, "key": key,
        "tag": [f"{k}:{v}" for k, v in tags.items()] or None, "q": text, "since": since, "until": until,
    }.items() if v}
    if not filter:
        raise fail(f"--where needs a filter (--status, --handler, --key, --tag, --search, --since, --until): "
                   f"`journal {action} --where` alone would {action} every invocation")
    path = store_path(db)
    warn_store(path)

    async def main() -> Any:
        async with Engine.open(path, handlers=handlers) as engine:
            try:
                batch = await engine.start_batch(action, filter, check=check, dry_run=dry_run)
            except Exception as exc:
                from journal.errors import JournalError

                if isinstance(exc, JournalError):
                    raise fail(str(exc)) from None
                raise
            if not as_json:
                echo_err(f"batch {batch.id}: {action} {batch.matched} invocation(s)"
                         + (" (dry run: nothing is changed)" if dry_run else ""))
            done = await engine.run_batch(batch.id)
            return await engine.committer.read(batches.batch_json, engine.store, done)

    doc, stopped = run_async(main)
    if stopped is not None or doc is None:
        raise Exit(INTERRUPTED, "interrupted: the batch goes on where it stopped when a worker or server starts")
    if as_json:
        click.echo(render.to_json(doc))
    else:
        verb = {"cancel": "cancelled", "resume": "made runnable", "retry": "retried"}[action]
        out(f"{'would be ' if dry_run else ''}{verb}: {doc['done']} of {doc['matched']}"
            + (f"; skipped ({'no longer failed, or retried already' if action == 'retry' else 'no longer applicable'}): "
               f"{doc['skipped']}"
               if doc["skipped"] else ""))
        if doc["diverging"]:
            out(f"would diverge, {'not retried' if not dry_run else 'left alone'}: {len(doc['diverging'])}")
            for invocation_id in doc["diverging"]:
                first = doc["first_differences"][invocation_id].strip().splitlines()
                out(render.safe(f"  {invocation_id}  {first[0] if first else ''}"))
        for error in doc["errors"]:
            echo_err(render.safe(f"error: {error}"))
    raise Exit(OK if not doc["errors"] else 1)
