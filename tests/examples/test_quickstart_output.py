"""The quickstart's crash demo of the research agent, run as the page shows it, prints what
the page shows: each line of `calls.log` as it is written (`r1:<16 hex digits> <step> <detail>`),
each key once but for the calls in flight at the kill."""

from __future__ import annotations

import re
import shlex
import sys
from collections import Counter
from pathlib import Path

import pytest

from runtime import idempotency_key

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"

pytestmark = pytest.mark.skipif(not Path(sys.executable).with_name("journal").exists(),
                                reason="the journal command is not installed beside this Python")


def _demo() -> tuple[list[str], list[str], dict[str, str]]:
    """The demo's `journal run` arguments, the `calls.log` lines the page shows, and its exports."""
    text = QUICKSTART.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```console\n(.*?)```", text, re.S) if "$ cat calls.log" in b)
    lines = block.splitlines()
    run = next(line for line in lines if line.startswith("$ journal run "))
    exports = next(line for line in lines if line.startswith("$ export "))
    shown = lines[lines.index("$ cat calls.log") + 1:]
    env = dict(item.split("=", 1) for item in shlex.split(exports)[2:])
    return shlex.split(run.removeprefix("$ ").removesuffix(" &"))[1:], shown, env


def test_the_quickstart_shows_call_log_lines_as_they_are_written(workspace):
    argv, shown, env = _demo()
    assert env["EXAMPLE_CALL_LOG"] == "calls.log" and argv[argv.index("--id") + 1] == "r1"
    assert shown and all(re.fullmatch(r"r1:[0-9a-f]{16} \S+ \S+", line) for line in shown), shown
    argv = [str(ROOT / a) if a.startswith("examples/") else a for a in argv]
    proc = workspace.journal(*argv, EXAMPLE_LATENCY=env["EXAMPLE_LATENCY"])
    # `sleep 2.5; kill -9 $!` on the page: killed once a step is journaled and the next is under way.
    workspace.kill_when(proc, lambda: len(workspace.calls()) >= 2 and len(workspace.journaled_steps("r1")) >= 1)
    journaled = {idempotency_key("r1", step) for step in workspace.journaled_steps("r1").values()}
    resumed = workspace.journal("resume", "r1", EXAMPLE_LATENCY="0")
    code, out, err = workspace.finish(resumed)
    assert code == 0, err
    written = workspace.log.read_text().splitlines()
    counts = Counter(written)
    # Each key once, but the calls in flight at the kill, which ran again on resume: at most
    # the two searches of one round, and never a step the journal held.
    again = {line.split()[0] for line, n in counts.items() if n > 1}
    assert sum(n - 1 for n in counts.values()) <= 2 and not again & journaled, (written, journaled)
    # The two searches of one round run at once and may be logged in either order.
    assert sorted(counts) == sorted(shown)
    assert [line for line in dict.fromkeys(written) if "think" in line] == [line for line in shown if "think" in line]
