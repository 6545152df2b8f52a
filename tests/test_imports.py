"""Importing a package loads only what it uses: `import runtime` and `import runtime.langgraph`
import their exports on first use, so a process that only checkpoints a LangGraph graph never
loads the engine, and a handler module that imports `runtime` pays nothing until it runs.

The figures are module counts in a fresh interpreter, not times: a count does not move with
the machine's load, and it grows only when someone adds an eager import."""

import json
import subprocess
import sys

import pytest

# What a bare interpreter already holds is subtracted; these are the modules an import adds.
# `import runtime` (or `runtime.langgraph`) adds the package itself and `typing`.
_AT_MOST_FOR_A_PACKAGE = 8


def _new_modules(code: str) -> set[str]:
    """The modules that running `code` adds to a fresh interpreter's `sys.modules`."""
    script = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{code}\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize("package", ["runtime", "runtime.langgraph"])
def test_importing_the_package_loads_almost_nothing(package):
    added = _new_modules(f"import {package}")
    assert len(added) <= _AT_MOST_FOR_A_PACKAGE, sorted(added)
    assert not {m for m in added if m.split(".")[0] in ("journal", "anyio", "asyncio", "langgraph", "lmdb")}, \
        sorted(added)


def test_a_checkpointer_does_not_load_the_engine_or_anyio():
    added = _new_modules("from runtime.langgraph import JournalSaver")
    assert "runtime.langgraph._saver" in added
    assert not {m for m in added if m.startswith(("runtime._", "anyio", "runtime.langgraph._node"))}, \
        sorted(m for m in added if m.startswith(("runtime", "anyio")))


def test_an_export_is_the_same_object_however_it_is_reached():
    added = _new_modules(
        "import runtime, runtime._engine._engine, runtime.langgraph, runtime.langgraph._saver\n"
        "assert runtime.Engine is runtime._engine._engine.Engine\n"
        "from runtime import Engine\n"
        "assert Engine is runtime._engine._engine.Engine\n"
        "assert runtime.langgraph.JournalSaver is runtime.langgraph._saver.JournalSaver\n"
        "assert set(dir(runtime)) >= set(runtime.__all__)\n"
        "try:\n"
        "    runtime.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('runtime.NoSuchName did not raise')\n"
    )
    assert "runtime._engine._engine" in added


def test_an_lmdb_store_loads_no_postgresql_code(tmp_path):
    added = _new_modules(
        f"import journal\njournal.open_store({str(tmp_path / 'db')!r}).close()\n"
    )
    assert "journal.backends.lmdb._store" in added
    assert not {m for m in added if m.startswith(("psycopg", "journal.backends.postgres._"))
                and m not in ("journal.backends.postgres._backend", "journal.backends.postgres._urls",
                              "journal.backends.postgres._version")}, \
        sorted(m for m in added if "postgres" in m or "psycopg" in m)


def test_the_postgresql_exports_load_on_first_use():
    added = _new_modules(
        "from journal import PostgresStore, store_patience\n"
        "import journal.backends.postgres._connect as connect, journal.backends.postgres._store as store\n"
        "assert PostgresStore is store.PostgresStore and store_patience is connect.store_patience\n"
    )
    assert "journal.backends.postgres._store" in added


def test_an_engine_loads_no_plugin_until_the_application_imports_it():
    """OpenTelemetry's observer is registered by `import runtime.otel`, never by the core."""
    engine = (
        "import anyio, tempfile, opentelemetry.trace\n"
        "from runtime import Engine\n"
        "async def main():\n"
        "    with tempfile.TemporaryDirectory() as db:\n"
        "        async with Engine.open(db) as engine:\n"
        "            await engine.run(lambda ctx: ctx.run('s', lambda: 1), id='i')\n"
        "anyio.run(main)\n"
    )
    assert not {m for m in _new_modules(engine) if m.startswith("runtime.otel")}
    added = _new_modules("import runtime.otel\n" + engine)
    assert "runtime.otel._tracing" in added
