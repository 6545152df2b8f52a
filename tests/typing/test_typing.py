"""The public API's annotations, checked the way a user's type checker reads them.

`user_program.py` uses the documented API and pins each result with `assert_type`;
`misuse.py` holds mistakes marked `# error: CODE`. One `mypy --strict` run checks both:
the program must be clean, and each mistake must be reported with its codes and nothing
else, so an annotation that decays to `Any` (and lets the mistakes through) fails too.
The program also runs, so the types it pins are the ones the runtime delivers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.typing import user_program

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROGRAM, MISUSE = HERE / "user_program.py", HERE / "misuse.py"
_REPORT = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*?)  \[(?P<code>[a-z-]+)\]$")
_MARK = re.compile(r"#\s*error:\s*(?P<codes>[a-z-]+(?:\s*,\s*[a-z-]+)*)\s*$")


@pytest.fixture(scope="module")
def reported() -> dict[str, set[tuple[int, str]]]:
    """`{file name: {(line, error code)}}` from one mypy run over both files."""
    # The cache in the repository keeps a rerun to a few seconds; a cold run takes longer.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(ROOT / ".mypy_cache"),
         "--no-error-summary", "--show-error-codes", str(PROGRAM.relative_to(ROOT)), str(MISUSE.relative_to(ROOT))],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode in (0, 1), f"mypy did not run:\n{done.stdout}\n{done.stderr}"
    found: dict[str, set[tuple[int, str]]] = {PROGRAM.name: set(), MISUSE.name: set()}
    for line in done.stdout.splitlines():
        match = _REPORT.match(line)
        if match:
            found.setdefault(Path(match["path"]).name, set()).add((int(match["line"]), match["code"]))
        elif ": error:" in line:
            raise AssertionError(f"an error report this test cannot read: {line}")
    return found


def expected_errors(path: Path) -> set[tuple[int, str]]:
    marks = set()
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _MARK.search(text)
        if match:
            marks |= {(number, code.strip()) for code in match["codes"].split(",")}
    return marks


def test_a_program_written_against_the_documented_api_type_checks_cleanly(reported):
    assert reported[PROGRAM.name] == set()
    assert set(reported) == {PROGRAM.name, MISUSE.name}  # nothing reported inside journal or runtime


def test_the_checker_reports_each_misuse_of_the_api_with_its_error_code(reported):
    expected = expected_errors(MISUSE)
    assert len(expected) >= 10
    assert reported[MISUSE.name] == expected


def test_the_program_runs_and_returns_what_its_annotations_say():
    result = anyio.run(user_program.main)
    assert isinstance(result, str)
    assert result == "PARIS: 7 DAYS, 21.5 C, Paris, bring an umbrella, 2 Lima"
