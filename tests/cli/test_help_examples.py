"""The examples the command's help and messages give name code that exists: a reader who
pastes `journal serve --handler refund=examples/approval.py:refund` gets a handler."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli._main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = re.compile(r"examples/(\w+\.py):(\w+)")


def _handlers(file: str) -> set[str]:
    tree = ast.parse((ROOT / "examples" / file).read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.AsyncFunctionDef)}


def _named(text: str) -> list[tuple[str, str]]:
    return EXAMPLE.findall(text)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_example_in_a_commands_help_names_a_handler_that_exists(command):
    shown = subprocess.run([sys.executable, "-m", "cli", command, "--help"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    for file, function in _named(shown.stdout):
        assert function in _handlers(file), f"`journal {command} --help` names examples/{file}:{function}"


def test_serve_help_names_the_refund_handler():
    shown = subprocess.run([sys.executable, "-m", "cli", "serve", "--help"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert ("approval.py", "refund") in _named(shown.stdout)


def test_every_example_in_the_commands_messages_names_a_handler_that_exists():
    for source in sorted((ROOT / "cli").glob("*.py")):
        for file, function in _named(source.read_text(encoding="utf-8")):
            assert function in _handlers(file), f"{source.name} names examples/{file}:{function}"
