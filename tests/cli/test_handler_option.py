"""`--handler` is parsed by one rule on every command that takes it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli import cli

AGENTS = "tests/cli/serve_agents.py"


@pytest.mark.parametrize("command", [["worker"], ["resume", "x"], ["cancel", "x"], ["replay", "x"]])
def test_a_name_with_a_colon_is_refused_alike_everywhere(command, tmp_path):
    result = CliRunner().invoke(cli, [*command, "--db", str(tmp_path / "db"), "--handler", f"a:b={AGENTS}:echo"])
    assert result.exit_code == 2
    assert "Invalid value for '--handler'" in result.stderr and "a NAME has no ':' or '/'" in result.stderr
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("command", [["worker"], ["resume", "x"], ["cancel", "x"], ["replay", "x"], ["serve"]])
def test_one_name_for_two_functions_is_refused_alike_everywhere(command, tmp_path):
    given = ["--handler", f"a={AGENTS}:echo", "--handler", f"a={AGENTS}:quick"]
    result = CliRunner().invoke(cli, [*command, "--db", str(tmp_path / "db"), *given])
    assert result.exit_code == 2
    assert "'a' is given twice, for different functions" in result.stderr


def test_serve_requires_a_name_and_says_how_to_give_one(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "db"), "--handler", f"{AGENTS}:echo"])
    assert result.exit_code == 2
    assert "is not NAME=TARGET (for example refund=examples/approval.py:refund)" in result.stderr
