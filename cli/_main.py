"""The `journal` command group: every subcommand, registered in the order `--help` lists them."""

from __future__ import annotations

import click

from ._history import fork, replay
from ._inspect import export, ls, show, tail
from ._maintain import check, compact, trim
from ._run import cancel, resolve, resume, run
from ._state import state
from ._workers import start, worker


class _Ordered(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_Ordered, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="journal", prog_name="journal")
def cli() -> None:
    """Durable execution for LLM agents: run handlers whose every step is journaled,
    resume them after a crash without redoing work, and inspect their journals.

    The store is --db PATH, else $JOURNAL_DB, else ./.journal. Exit status: 0
    completed, 1 failed, 2 bad usage or input, 3 suspended, 4 nondeterminism,
    130 interrupted.

    Example:

    \b
        journal run examples/research.py:research --input '{"question": "Why LMDB?"}'
    """


for _command in (run, start, resume, worker, ls, show, tail, state, resolve, cancel, fork, replay, trim, compact, check, export):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point (`journal = "cli:main"`)."""
    cli(prog_name="journal")
