"""The `journal` command group: every subcommand, registered in the order `--help` lists them.

Each command's module is imported only when that command runs: `journal --help` and
`journal ls` need neither the runtime nor the event loop, and start in a fraction of the
time it takes to import everything (docs/performance.md, "Start-up").
"""

from __future__ import annotations

import importlib

import click

# name -> (module, the line `journal --help` shows): the line is the first line of the
# command's docstring, kept here so that listing the commands imports none of them
# (tests/cli/test_main.py checks that they agree).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("_run", "Run a handler as a new durable invocation (or attach to --id)."),
    "start": ("_workers", "Record a pending invocation and print its id, without running it."),
    "resume": ("_run", "Continue an invocation: replay, then run the rest live."),
    "worker": ("_workers", "Run invocations as they become runnable, until Ctrl-C or SIGTERM."),
    "serve": ("_serve", "Serve the HTTP API and web UI, and run invocations (until SIGTERM or Ctrl-C)."),
    "ls": ("_inspect", "List invocations, oldest first."),
    "show": ("_inspect", "Show an invocation: status, input, result and every entry."),
    "tail": ("_inspect", "Print an invocation's entries; -f follows new ones live."),
    "state": ("_thread_view", "Show a key's durable state and its queue of unfinished invocations."),
    "resolve": ("_run", "Resolve (or --reject) a promise an invocation waits for."),
    "cancel": ("_run", "Cancel an invocation: its handler gets `Cancelled`."),
    "send": ("_talk", "Send a message to an invocation on a topic."),
    "request": ("_talk", "Send a message that asks for a reply, and print the reply."),
    "get": ("_talk", "Print a value an invocation published (`ctx.publish`), or all of them."),
    "fork": ("_history", "Copy a journal prefix into a new pending invocation."),
    "retry": ("_history", "Run a failed invocation again from before its failing step, as a new one."),
    "replay": ("_history", "Check journals against the current code, calling no step function."),
    "trim": ("_maintain", "Remove the journals of finished invocations."),
    "compact": ("_maintain", "Shrink the store file by dropping its free pages."),
    "check": ("_maintain", "Verify the integrity of the store."),
    "migrate": ("_migrate", "Convert a store of an older format to the one this release writes."),
    "export": ("_inspect", "Write an invocation and its decoded entries as JSON."),
    "limit": ("_limits", "Set, list and remove limits: concurrency, requests and tokens per period."),
    "schedule": ("_schedule", "Schedules kept in the store: each tick starts one invocation, NAME@<tick>."),
    "budget": ("_budgets", "Set, list and remove budgets: tokens and cost a scope may use."),
}


class _Lazy(click.Group):
    """The commands of COMMANDS, in that order, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"{__package__}.{COMMANDS[cmd_name][0]}")
        return getattr(module, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        # Shortened as click shortens a command's own help (a stand-in command does it).
        rows = [(name, click.Command(name, help=line).get_short_help_str(limit))
                for name, (_, line) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="journal", prog_name="journal")
def cli() -> None:
    """Durable execution for LLM agents: run handlers whose every step is journaled,
    resume them after a crash without redoing work, and inspect their journals.

    The store is --db PATH (or a postgresql:// URL), else $JOURNAL_DB, else
    ./.journal. Exit status: 0 completed, 1 failed, 2 bad usage or input, 3
    suspended, 4 nondeterminism, 130 interrupted.

    Example:

    \b
        journal run examples/research.py:research --input '{"question": "Why LMDB?"}'
    """


def main() -> None:
    """Console-script entry point (`journal = "cli:main"`)."""
    cli(prog_name="journal")
