"""Every file of this repository that a docstring, a comment or a docs page names exists: after a
move, a stale name sends the next reader to a file that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("journal", "runtime", "cli", "tests", "bench", "examples", "docs")
# A path under one of the repository's own folders, or a private module's bare file name.
_TOPS = "|".join(TOPS)
# A `file.py:function` is a handler TARGET (a user's file in an example), not this repository's.
NAMED = re.compile(rf"(?<![\w/.-])((?:{_TOPS})/[\w/]*\w\.py|_\w+\.py)\b(?!:\w)")


def _sources() -> list[Path]:
    files = [p for top in TOPS for p in (ROOT / top).rglob("*.py")]
    files += sorted((ROOT / "docs").glob("*.md")) + [ROOT / "ARCHITECTURE.md", ROOT / "README.md"]
    return [p for p in files if "__pycache__" not in p.parts]


def stale_names() -> dict[str, list[str]]:
    basenames = {p.name for top in TOPS for p in (ROOT / top).rglob("*.py")}
    stale: dict[str, list[str]] = {}
    for source in _sources():
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            for name in NAMED.findall(line):
                exists = (ROOT / name).exists() if "/" in name else name in basenames
                if not exists:
                    stale.setdefault(f"{source.relative_to(ROOT)}:{number}", []).append(name)
    return stale


def test_the_check_sees_the_names_it_must():
    assert NAMED.findall("see runtime/_engine/_engine.py and _rules.py::f, not path/to/file.py or examples/ops.py:slow") == [
        "runtime/_engine/_engine.py", "_rules.py"]


def test_every_file_the_code_and_docs_name_exists():
    assert stale_names() == {}
