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


def integrations() -> list[str]:
    """Every public sub-package of `runtime` but its testing helpers is an integration: found
    on disk, so a new one is checked without being listed here."""
    return sorted(f"runtime.{path.parent.name}" for path in (ROOT / "runtime").glob("*/__init__.py")
                  if not path.parent.name.startswith("_") and path.parent.name != "testing")


def test_integrations_are_found():
    assert {"runtime.langgraph", "runtime.otel", "runtime.http"} <= set(integrations())


@pytest.mark.parametrize("integration", integrations())
def test_integrations_use_only_the_runtimes_public_names(integration: str):
    """An integration is an observer and public names: it could live outside this repository."""
    folder = ROOT / integration.replace(".", "/")
    crossing = {
        str(path.relative_to(ROOT)): sorted(m for m in _imported_modules(path, integration)
                                            if m.split(".")[0] in {"journal", "runtime"} and _private(m, integration))
        for path in sorted(folder.rglob("*.py"))
    }
    assert {p: names for p, names in crossing.items() if names} == {}


# The rooms of runtime/ (ARCHITECTURE.md), in order: a room imports only the rooms before it.
ROOMS = ("_base", "_replay", "_flow", "_handler", "_messaging", "_engine")
# Public modules every room may import: they import nothing of the runtime.
_GROUND = {"runtime.errors", "runtime.hooks"}


def _run_time_imports(path: Path, module: str) -> set[str]:
    """The absolute names `path` (module `module`) imports when it runs: what an
    `if TYPE_CHECKING:` block imports names a type and runs nothing."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in node.body for n in ast.walk(sub)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found |= {f"{name}.{alias.name}" for alias in node.names}
    return found


def _runtime_modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _room(module: str) -> str:
    """The room of a runtime module: its sub-package, or the module itself at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "runtime"


def _room_edges() -> dict[tuple[str, str], set[str]]:
    """(importing room, imported room) -> the imports that make it, run-time imports only."""
    modules = _runtime_modules()
    edges: dict[tuple[str, str], set[str]] = {}
    for module, path in modules.items():
        for name in _run_time_imports(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != "runtime" and _room(name) != _room(module):
                edges.setdefault((_room(module), _room(name)), set()).add(f"{module} -> {name}")
    return edges


def test_every_private_module_of_the_runtime_is_in_a_room():
    rooms = sorted(p.parent.name for p in (ROOT / "runtime").glob("_*/__init__.py"))
    assert rooms == sorted(ROOMS), "a room on disk and the list in this test (and ARCHITECTURE.md) disagree"
    assert sorted(p.name for p in (ROOT / "runtime").glob("_*.py")) == ["__init__.py"]


def test_rooms_import_only_the_rooms_before_them():
    upward = {f"{a} -> {b}": sorted(why) for (a, b), why in _room_edges().items()
              if a in ROOMS and f"runtime.{b}" not in _GROUND and not (b in ROOMS and ROOMS.index(b) < ROOMS.index(a))}
    assert upward == {}


def test_no_two_rooms_import_each_other():
    """Of every part of the runtime (rooms, `testing/`, the integrations), by way of any others."""
    graph: dict[str, set[str]] = {}
    for a, b in _room_edges():
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    assert sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if reaches(b, a)) == []


def test_the_replay_room_does_no_io_and_runs_on_no_event_loop_library():
    modules = _runtime_modules()
    found = {module: sorted(n for n in _run_time_imports(path, module)
                            if n.split(".")[0] in {"anyio", "lmdb", "psycopg", "socket", "subprocess"})
             for module, path in modules.items() if _room(module) == "_replay"}
    assert {m: names for m, names in found.items() if names} == {}
    assert len(found) > 5
