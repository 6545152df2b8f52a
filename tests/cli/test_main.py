"""The command group: its listing, and what starting a command imports."""

import importlib
import subprocess
import sys

import click
import pytest

from cli import cli
from cli._main import COMMANDS


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_line_help_lists_for_a_command_is_the_first_line_of_its_docstring(name):
    module, line = COMMANDS[name]
    command = getattr(importlib.import_module(f"cli.{module}"), name)
    assert isinstance(command, click.Command) and command.name == name
    assert cli.get_command(click.Context(cli), name) is command
    assert line == command.get_short_help_str(limit=1000)


def test_an_unknown_command_is_a_usage_error_that_names_it():
    result = subprocess.run([sys.executable, "-m", "cli", "rnu"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "No such command 'rnu'" in result.stderr


def _imported_by(*argv: str) -> set[str]:
    """The top-level packages a `journal` command imports (it runs in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from cli import main\n"
        f"sys.argv = ['journal', *{list(argv)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = next(line for line in result.stderr.splitlines() if line.startswith("MODULES "))
    return set(line.split()[1:])


def test_help_imports_neither_the_store_nor_the_runtime():
    assert not {"journal", "runtime", "anyio", "asyncio", "lmdb", "msgspec"} & _imported_by("--help")


def test_ls_reads_the_store_without_importing_the_runtime_or_an_event_loop(tmp_path):
    db = tmp_path / "db"
    from journal import LmdbStore

    LmdbStore(db).close()
    modules = _imported_by("ls", "--db", str(db), "--json")
    assert "journal" in modules
    assert not {"runtime", "anyio", "asyncio"} & modules
