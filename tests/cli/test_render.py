"""Human output: units, cutting, tables; and every command's --help."""

import datetime
import json
import shlex
from pathlib import Path

import click
import click.testing
import pytest

from cli import cli
from cli._render import Styled, cut, duration, size, table, to_json


@pytest.mark.parametrize("seconds, text", [
    (0.0004, "0ms"), (0.85, "850ms"), (1.25, "1.2s"), (59.9, "59.9s"), (185, "3m05s"),
    (7800, "2h10m"), (3 * 86400 + 4 * 3600, "3d04h"), (-1, "0ms"),
])
def test_durations_read_as_human_units(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * 1024 ** 2, "3.0 MiB"),
                                     (5 * 1024 ** 4, "5.0 TiB")])
def test_sizes_read_as_human_units(n, text):
    assert size(n) == text


def test_cut_keeps_short_text_and_ends_long_text_with_an_ellipsis():
    assert cut("short", 10) == "short"
    assert cut("exactly10!", 10) == "exactly10!"
    assert cut("a bit too long", 10) == "a bit too…"
    assert cut("two\nlines", 20) == "two lines"


def test_tables_fit_the_width_by_shrinking_flexible_columns():
    rows = [["x" * 60, "completed", "y" * 40, "3"], ["short", "failed", "z", "12"]]
    text = table(("ID", "STATUS", "HANDLER", "N"), rows, flex=(0, 2), right=(3,), width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].split()[0].endswith("…")
    assert lines[2].rstrip().endswith("12") and lines[1].rstrip().endswith(" 3")  # numbers right-aligned
    assert lines[0].index("STATUS") == lines[2].index("failed")


def test_table_widths_ignore_colour():
    rows = [[Styled(click.style("completed", fg="green")), "x"]]
    lines = table(("STATUS", "V"), rows, width=80).splitlines()
    assert click.unstyle(lines[1]).index("x") == lines[0].index("V")


def test_json_encodes_datetimes_bytes_and_anything_else():
    moment = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    out = json.loads(to_json({"at": moment, "raw": b"\x00\x01", "other": {1, 2} and object}))
    assert out["at"] == "2024-05-01T12:00:00Z"
    assert out["raw"] == "AAE="
    assert out["other"].startswith("<class")


COMMANDS = ["run", "start", "resume", "worker", "serve", "ls", "show", "tail", "state", "resolve", "cancel", "send", "request",
            "get", "fork", "retry", "replay", "trim", "compact", "check", "migrate", "export", "limit", "schedule", "budget"]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_a_real_example(name):
    result = click.testing.CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    text = result.stdout
    assert "Example:" in text
    example = text.split("Example:", 1)[1].strip().splitlines()[0]
    used = []
    for part in example.split("&&"):
        argv = shlex.split(part.split(">")[0])
        assert argv[0] == "journal" and argv[1] in COMMANDS
        used.append(argv[1])
        # The example parses: the options it uses exist and its arguments fit.
        cli.get_command(click.Context(cli), argv[1]).make_context(argv[1], argv[2:])
    assert name in used


def test_the_run_example_in_the_help_runs(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    text = click.testing.CliRunner().invoke(cli, ["run", "--help"]).stdout
    argv = shlex.split(text.split("Example:", 1)[1].strip().splitlines()[0])
    monkeypatch.chdir(root)
    result = click.testing.CliRunner().invoke(cli, argv[1:] + ["--db", str(tmp_path / "db")])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["answer"]


def test_the_group_lists_every_command():
    text = click.testing.CliRunner().invoke(cli, ["--help"]).stdout
    listed = [line.split()[0] for line in text.split("Commands:", 1)[1].strip().splitlines()]
    assert listed == COMMANDS


def test_every_command_has_a_section_in_docs_cli_md():
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = [line.split("`")[1].split()[1] for line in text.splitlines() if line.startswith("### `journal ")]
    assert sorted(sections) == sorted(COMMANDS)
