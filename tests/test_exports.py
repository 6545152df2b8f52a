"""Each package's public surface is exactly its `__all__`: nothing public is left out of it,
and nothing in it is missing."""

import importlib
import types

import pytest


@pytest.mark.parametrize("name", ["journal", "journal.backends", "journal.backends.lmdb", "journal.backends.postgres",
                                  "journal.kv", "journal.commit", "journal.testing", "runtime", "runtime.testing",
                                  "runtime.otel", "runtime.http",
                                  "runtime.langgraph"])
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
