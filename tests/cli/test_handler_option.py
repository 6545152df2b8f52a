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


@pytest.mark.parametrize("command", [["worker"], ["serve"]])
def test_serve_takes_a_bare_target_as_worker_does_and_refuses_a_bad_one_alike(command, tmp_path):
    result = CliRunner().invoke(cli, [*command, "--db", str(tmp_path / "db"), "--handler", f"{AGENTS}:nothing"])
    assert result.exit_code == 2
    assert "has no attribute" in result.stderr or "no function" in result.stderr, result.stderr
