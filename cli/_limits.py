"""`journal limit set|ls|rm`: the limits every process sharing the store obeys."""

from __future__ import annotations

import click

from journal import iso_from_us
from journal.backends import backend_for
from journal.limits import LimitRule, LimitView, Window, parse_window

from . import _render as render
from ._common import db_option, echo_err, edge, fail, json_option, open_store, out, store_path, warn_store


@click.group(name="limit")
def limit() -> None:
    """Set, list and remove limits: concurrency, requests and tokens per period.

    A limit is kept in the store: every process sharing it (workers on any number of hosts
    for PostgreSQL) obeys it together, and a change takes effect within a second. Steps take
    units with `ctx.run(..., limit="NAME", tokens=ESTIMATE)`. A rule on `PREFIX:*` gives every
    `PREFIX:<anything>` a count of its own. A name with no rule limits nothing.

    Example:

    \b
        journal limit set openai --concurrency 8 --rate 500/m --tokens 200000/m
        journal limit set 'tenant:*' --concurrency 2
        journal limit ls
        journal limit rm openai
    """


def _window(text: str | None, what: str) -> Window | None:
    return None if text is None else parse_window(text, what)


@limit.command(name="set")
@click.argument("name")
@click.option("--concurrency", type=int, default=None, metavar="N", help="At most N units held at once.")
@click.option("--rate", metavar="N/PERIOD", help="At most N acquisitions in any PERIOD (500/m, 60/5s, 1000/h).")
@click.option("--tokens", metavar="N/PERIOD", help="At most N tokens (estimates, then what steps report) in any PERIOD.")
@db_option
@json_option
@edge
def set_(name: str, concurrency: int | None, rate: str | None, tokens: str | None, db: str | None,
         as_json: bool) -> None:
    """Set the rule of NAME (or of every PREFIX:<anything> for PREFIX:*), replacing the one it had.

    PERIOD is a number and a unit (s, m, h, d). The rule holds in every window of that length,
    wherever it starts (a sliding window). Makes the store if there is none yet.

    Example:

    \b
        journal limit set openai --rate 60/m --tokens 40000/m
        journal limit set 'tenant:*' --concurrency 2
    """
    rule = LimitRule(concurrency, _window(rate, "rate"), _window(tokens, "tokens"))
    path = store_path(db)
    warn_store(path)
    with backend_for(path).open(path) as store:
        store.limits().set(name, rule)
        view = next(v for v in store.limits().ls() if v.name == name)
    if as_json:
        click.echo(render.to_json(view.to_json()))
        return
    echo_err(f"limit {name}: {_rule_text(view)}")


@limit.command(name="ls")
@db_option
@json_option
@edge
def ls(db: str | None, as_json: bool) -> None:
    """List every limit: its rule, units in use, waiters, tokens used in the window, pauses.

    A name under a PREFIX:* rule that has been used is listed on its own line.

    Example:

    \b
        journal limit ls
        journal limit ls --json
    """
    with open_store(db, readonly=False) as store:
        views = store.limits().ls()
    if as_json:
        click.echo(render.to_json([v.to_json() for v in views]))
        return
    if not views:
        echo_err("no limits (journal limit set NAME --concurrency N | --rate N/PERIOD | --tokens N/PERIOD)")
        return
    rows = [[v.name, _opt(v.concurrency), _opt(v.rate), _opt(v.tokens), str(v.in_use), str(v.waiting),
             str(v.tokens_used), "" if v.paused_until is None else iso_from_us(v.paused_until)] for v in views]
    out(render.table(("NAME", "CONCURRENCY", "RATE", "TOKENS", "IN USE", "WAITING", "TOKENS USED", "PAUSED UNTIL"),
                     rows, flex=(0,), right=(1, 4, 5, 6)))


@limit.command(name="rm")
@click.argument("name")
@db_option
@edge
def rm(name: str, db: str | None) -> None:
    """Remove the rule of NAME: what waits on it goes on at once.

    Example:

    \b
        journal limit rm openai
    """
    with open_store(db, readonly=False) as store:
        if not store.limits().remove(name):
            known = sorted(store.limits().rules())
            raise fail(f"no limit named {name!r}" + (f" (limits: {', '.join(known)})" if known else " (there are none)"))
    echo_err(f"removed limit {name}")


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


def _rule_text(view: LimitView) -> str:
    parts = []
    if view.concurrency is not None:
        parts.append(f"concurrency {view.concurrency}")
    if view.rate is not None:
        parts.append(f"rate {view.rate}")
    if view.tokens is not None:
        parts.append(f"tokens {view.tokens}")
    return ", ".join(parts)
