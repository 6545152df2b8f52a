"""`journal budget set|ls|rm`: allowances of tokens and cost that pause an invocation and ask."""

from __future__ import annotations

import time

import click

from journal.backends import backend_for
from journal.limits import BudgetBook, BudgetRule, BudgetView, check_budget, check_scope, wake_budget_waiters

from . import _render as render
from ._common import db_option, echo_err, edge, fail, json_option, open_store, out, store_path, warn_store


@click.group(name="budget")
def budget() -> None:
    """Set, list and remove budgets: tokens and cost a scope may use.

    SCOPE is handler:NAME, key:KEY, tag:K=V or a limit name. What steps report
    (`current_step().used(tokens=, cost=)`) is charged, durably, to every budget covering the
    invocation. Once one is spent, the next step charged to it does not run: the invocation
    suspends on the promise `budget:SCOPE`; `journal resolve ID budget:SCOPE '{"tokens": N}'`
    lets it go on with that much more, `--reject` fails it.

    Example:

    \b
        journal budget set handler:agent --tokens 10000 --per run
        journal budget set key:acme --cost 50 --per month
        journal budget ls
        journal budget rm key:acme
    """


@budget.command(name="set")
@click.argument("scope")
@click.option("--tokens", type=int, default=None, metavar="N", help="At most N tokens.")
@click.option("--cost", type=float, default=None, metavar="USD", help="At most USD of cost.")
@click.option("--per", type=click.Choice(["run", "hour", "day", "month"]), default=None,
              help="Each invocation's own allowance (run), or per UTC hour, day or month; a total without it.")
@db_option
@json_option
@edge
def set_(scope: str, tokens: int | None, cost: float | None, per: str | None, db: str | None, as_json: bool) -> None:
    """Set the budget of SCOPE, replacing the one it had; invocations waiting on it are woken.

    Makes the store if there is none yet.

    Example:

    \b
        journal budget set handler:agent --tokens 10000 --per run
        journal budget set openai --cost 200 --per day
    """
    rule = check_budget(BudgetRule(tokens, cost, per))
    check_scope(scope)
    path = store_path(db)
    warn_store(path)
    with backend_for(path).open(path) as store:
        BudgetBook(store).set(scope, rule)
        woken = wake_budget_waiters(store, scope)
        view = next(v for v in BudgetBook(store).views(int(time.time() * 1_000_000)) if v.scope == scope)
    if as_json:
        click.echo(render.to_json(view.to_json()))
        return
    echo_err(f"budget {render.safe(scope)}: {_allowance(view)}" + (f"; woke {len(woken)} waiting" if woken else ""))


@budget.command(name="ls")
@db_option
@json_option
@edge
def ls(db: str | None, as_json: bool) -> None:
    """List every budget: its allowance and what was used in its current window.

    For `--per run` the usage shown is every run's together.

    Example:

    \b
        journal budget ls
        journal budget ls --json
    """
    with open_store(db, readonly=False) as store:
        views = BudgetBook(store).views(int(time.time() * 1_000_000))
    if as_json:
        click.echo(render.to_json([v.to_json() for v in views]))
        return
    if not views:
        echo_err("no budgets (journal budget set SCOPE --tokens N | --cost USD [--per run|hour|day|month])")
        return
    rows = [[v.scope, _opt(v.tokens), _opt(v.cost), v.per or "total", str(v.used_tokens), f"{v.used_cost:g}",
             _start(v.window_start)] for v in views]
    out(render.table(("SCOPE", "TOKENS", "COST", "PER", "USED TOKENS", "USED COST", "WINDOW START"),
                     rows, flex=(6, 0), right=(1, 2, 4, 5)))


@budget.command(name="rm")
@click.argument("scope")
@db_option
@edge
def rm(scope: str, db: str | None) -> None:
    """Remove the budget of SCOPE and its usage: what waits on it goes on.

    Example:

    \b
        journal budget rm key:acme
    """
    with open_store(db, readonly=False) as store:
        if not BudgetBook(store).remove(scope):
            known = sorted(BudgetBook(store).rules())
            raise fail(f"no budget for {scope!r}" + (f" (budgets: {', '.join(known)})" if known else " (there are none)"))
        wake_budget_waiters(store, scope)
    echo_err(f"removed budget {render.safe(scope)}")


def _opt(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _start(us: int | None) -> str:
    return "" if us is None else time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(us / 1e6))


def _allowance(view: BudgetView) -> str:
    parts = []
    if view.tokens is not None:
        parts.append(f"{view.tokens} tokens")
    if view.cost is not None:
        parts.append(f"{view.cost:g} USD")
    return " and ".join(parts) + (f" per {view.per}" if view.per else " in total")
