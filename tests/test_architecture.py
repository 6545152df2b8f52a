"""ARCHITECTURE.md stays true: every file and function it names exists, and the three
packages import only downwards (journal <- runtime <- cli)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "ARCHITECTURE.md"
# `path/to/file.py`, `path/to/file.py::Name`, `path/to/file.py::Class.method`, `path/dir/`
REFERENCE = re.compile(r"`((?:[\w.]+/)+[\w.]*?)(?:::([\w.]+))?`")


def references() -> list[tuple[str, str | None]]:
    return sorted(set(REFERENCE.findall(PAGE.read_text(encoding="utf-8"))), key=str)


def _defined(tree: ast.Module, dotted: str) -> bool:
    """Whether `Name` (a def, class or assignment at module level) or `Class.attr` exists."""
    body: list[ast.stmt] = tree.body
    for part in dotted.split("."):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    found = node
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_the_page_names_files_and_functions():
    refs = references()
    assert len([r for r in refs if r[1]]) >= 40, "the page should point at the code it describes"


@pytest.mark.parametrize(("path", "name"), references(), ids=lambda v: v or "")
def test_every_file_and_function_the_page_names_exists(path: str, name: str):
    target = ROOT / path
    assert target.exists(), f"ARCHITECTURE.md names {path}, which does not exist"
    if name:
        tree = ast.parse(target.read_text(encoding="utf-8"))
        assert _defined(tree, name), f"ARCHITECTURE.md names {path}::{name}, which {path} does not define"


def _imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports (relative imports stay in its own package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(("package", "forbidden"), [("journal", {"runtime", "cli"}), ("runtime", {"cli"}),
                                                   ("bench", {"tests"})])
def test_packages_import_only_downwards(package: str, forbidden: set[str]):
    upward = {
        str(path.relative_to(ROOT)): sorted(_imported_packages(path) & forbidden)
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {p: names for p, names in upward.items() if names} == {}


def _imported_modules(path: Path, package: str) -> set[str]:
    """The absolute names of the modules `path` (a module of `package`) imports from."""
    module = package + "." + ".".join(path.relative_to(ROOT / package.replace(".", "/")).with_suffix("").parts)
    parts = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.add(name)
            found |= {f"{name}.{alias.name}" for alias in node.names if alias.name.startswith("_")}
    return found


def _private(module: str, outside: str) -> bool:
    """Whether `module` is a private part of a package other than `outside`."""
    return not (module == outside or module.startswith(outside + ".")) and any(
        part.startswith("_") and part != "__future__" for part in module.split(".")[1:])


@pytest.mark.parametrize("package", ["journal", "runtime", "cli"])
def test_no_package_imports_another_ones_private_modules(package: str):
    """The three packages meet only at each other's public names."""
    crossing = {
        str(path.relative_to(ROOT)): sorted(m for m in _imported_modules(path, package)
                                            if m.split(".")[0] in {"journal", "runtime", "cli"} and _private(m, package))
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {p: names for p, names in crossing.items() if names} == {}


@pytest.mark.parametrize("integration", ["runtime.langgraph", "runtime.otel", "runtime.http", "runtime.pydantic_ai",
                                         "runtime.openai_agents", "runtime.mcp", "runtime.langchain", "runtime.adk"])
def test_integrations_use_only_the_runtimes_public_names(integration: str):
    """An integration is an observer and public names: it could live outside this repository."""
    folder = ROOT / integration.replace(".", "/")
    crossing = {
        str(path.relative_to(ROOT)): sorted(m for m in _imported_modules(path, integration)
                                            if m.split(".")[0] in {"journal", "runtime"} and _private(m, integration))
        for path in sorted(folder.rglob("*.py"))
    }
    assert {p: names for p, names in crossing.items() if names} == {}
