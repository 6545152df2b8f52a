"""Each package's public surface is exactly its `__all__`: nothing public is left out of it,
and nothing in it is missing."""

import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def public_packages() -> list[str]:
    """`journal`, `runtime` and every package under them whose path has no private part: found
    on disk, so a new integration or backend is held to its `__all__` without being listed."""
    found = []
    for top in ("journal", "runtime"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT).parts
            if not any(part.startswith("_") for part in parts):
                found.append(".".join(parts))
    return found


def test_the_discovered_packages_include_the_integrations():
    assert {"journal", "runtime", "journal.backends.lmdb", "runtime.langgraph", "runtime.pydantic_ai",
            "runtime.openai_agents", "runtime.mcp"} <= set(public_packages())


@pytest.mark.parametrize("name", public_packages())
def test_all_lists_exactly_the_public_names(name):
    module = importlib.import_module(name)
    public = {
        attr for attr, value in vars(module).items()
        if not attr.startswith("_") and not isinstance(value, types.ModuleType) and attr not in {"annotations", "Any"}
    }
    lazy = set(getattr(module, "_STRATEGIES", ())) | set(getattr(module, "_LAZY", ()))  # resolved by __getattr__
    assert isinstance(module.__all__, tuple)
    assert sorted(public | lazy) == sorted(module.__all__)
    for attr in module.__all__:
        assert getattr(module, attr) is not None
