"""How wide human output is: an error is never cut when stdout is not a terminal, and a
terminal's width (or `COLUMNS`) is what tables and header lines fit in."""

import json
import os
import pty
import subprocess

import pytest

from .conftest import target

MESSAGE = "the refund service answered 503 Service Unavailable " + " ".join(f"word{i}" for i in range(40))


@pytest.fixture
def failed(tmp_path, sh):
    """An invocation that failed with a message far longer than 80 columns."""
    (tmp_path / "fails.py").write_text(
        "from runtime import Context, TerminalError\n"
        "async def fails(ctx: Context) -> None:\n"
        "    await ctx.run('charge', lambda: 1)\n"
        f"    raise TerminalError({MESSAGE!r})\n")
    done = sh("run", f"{tmp_path / 'fails.py'}:fails", "--id", "fail-1")
    assert done.returncode == 1, done.stderr
    return "fail-1"


def _piped(sh, *args: str, columns: str | None) -> str:
    env = {k: v for k, v in sh.env.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(sh.argv(*args), capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", [None, "200", "60"])
def test_an_error_is_shown_whole_when_stdout_is_not_a_terminal(failed, sh, columns):
    shown = _piped(sh, "show", failed, columns=columns)
    error = next(line for line in shown.splitlines() if line.startswith("error "))
    assert error.endswith(MESSAGE) and "…" not in error
    failed_entry = next(line for line in shown.splitlines() if " failed " in line)
    assert failed_entry.endswith(MESSAGE)
    tailed = _piped(sh, "tail", failed, columns=columns)
    assert tailed.splitlines()[-1].endswith(MESSAGE)


def _on_a_terminal(sh, *args: str, columns: str) -> list[str]:
    """What `journal ARGS` prints with a pseudo-terminal as its stdout."""
    controller, terminal = pty.openpty()
    env = {**sh.env, "COLUMNS": columns}
    proc = subprocess.Popen(sh.argv(*args), stdout=terminal, stderr=subprocess.PIPE, env=env)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    import click

    return click.unstyle(b"".join(chunks).decode()).replace("\r\n", "\n").splitlines()


@pytest.mark.parametrize("columns", [100, 140])
def test_on_a_terminal_output_fits_the_width_columns_gives(failed, sh, columns):
    lines = _on_a_terminal(sh, "show", failed, columns=str(columns))
    # A command to copy (on a line of its own) is printed whole; everything else fits.
    fitted = [line for line in lines if not line.startswith("  journal ")]
    assert all(len(line) <= columns for line in fitted), [line for line in fitted if len(line) > columns]
    error = next(line for line in lines if line.startswith("error "))
    assert len(error) == columns and error.endswith("…")  # as wide as it was told, no wider


@pytest.mark.parametrize("columns, width", [(None, 80), ("120", 120)])
def test_a_long_value_is_cut_to_columns_when_piped(sh, columns, width):
    assert sh("run", target("greet"), "--input", json.dumps("x" * 500), "--id", "long").returncode == 0
    lines = _piped(sh, "show", "long", columns=columns).splitlines()
    step = next(line for line in lines if line.lstrip().startswith("1 "))
    assert len(step) == width and step.endswith("…")
