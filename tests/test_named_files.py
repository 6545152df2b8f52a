"""Every file of this repository that a docstring, a comment or a docs page names exists: after a
move, a stale name sends the next reader to a file that is not there."""

from __future__ import annotations

import ast
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


# Made-up names that code and docstrings give as examples of a user's file, not this repository's.
PLACEHOLDERS = {"NEWPATH.py", "file.py"}
_BARE = re.compile(r"(?<![\w/.-])([A-Za-z]\w*\.py)\b(?!:\w)")
# A dotted name into a private part of the three packages: `runtime._engine._engine.Engine`.
DOTTED = re.compile(r"(?<![\w.])((?:journal|runtime|cli)(?:\.\w+)*\._\w+(?:\.\w+)*)")


def _module_path(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.exists():
            return path
    return None


def stale_dotted(name: str) -> bool:
    """Whether `name` reaches into a module that is not there: its longest prefix that is a
    module must include its first private part, and a package's next part must be in it."""
    parts = name.split(".")
    known = max(k for k in range(1, len(parts) + 1) if _module_path(".".join(parts[:k])))
    private = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
    if not private:
        return False
    if known <= private[0]:
        return True
    path = _module_path(".".join(parts[:known]))
    return bool(path and path.name == "__init__.py" and known < len(parts)
                and parts[known] not in _names_in(path))


def _names_in(path: Path) -> set[str]:
    """What a package's `__init__.py` defines or imports (a room's defines nothing)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_every_bare_file_name_in_the_packages_is_one_of_theirs():
    basenames = {p.name for top in TOPS for p in (ROOT / top).rglob("*.py")}
    stale = {f"{path.relative_to(ROOT)}:{number}": name
             for top in ("journal", "runtime", "cli") for path in sorted((ROOT / top).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for name in _BARE.findall(line) if name not in basenames | PLACEHOLDERS}
    assert stale == {}


def test_the_dotted_check_sees_a_stale_name():
    # (spelled in two pieces, so that the check over this file does not find them)
    assert stale_dotted("runtime." + "_executor.Executor") and stale_dotted("runtime." + "_engine.Engine")
    assert not stale_dotted("runtime._engine._executor.Executor._drive") and not stale_dotted("runtime.__all__")


def test_every_dotted_private_name_the_code_and_docs_name_exists():
    stale = {f"{source.relative_to(ROOT)}:{number}": name
             for source in _sources()
             for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
             for name in DOTTED.findall(line) if stale_dotted(name.rstrip("."))}
    assert stale == {}
