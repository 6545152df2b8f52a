"""A plain `pip install journal` (no extras) runs an agent: the core imports nothing that only
an extra, the test tools or a dependency's optional requirement happens to install."""

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter: every third-party module outside `allowed` is refused at
# import, whether or not this test environment has it.
_GUARD = """
import importlib.abc, importlib.machinery, json, runpy, sys
allowed, argv = json.loads(sys.argv[1]), sys.argv[2:]
own = {"journal", "runtime", "cli"}

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in own or top in allowed or "." in name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = (spec and (spec.origin or next(iter(spec.submodule_search_locations or []), ""))) or ""
        if "-packages" not in origin:
            return None  # the user's own code beside the handler, or not installed at all
        raise ModuleNotFoundError(f"{name} is imported, but no core dependency installs it", name=name)

sys.meta_path.insert(0, Refuse())
import runtime.testing  # the documented testing helpers need nothing more either
sys.argv = ["journal", *argv]
runpy.run_module("cli", run_name="__main__")
"""


def _core_modules() -> set[str]:
    """The top-level modules that the core dependencies and their own requirements install."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in declared]
    dists: set[str] = set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in dists:
            continue
        dists.add(name)
        for req in importlib.metadata.requires(name) or []:
            requirement, _, marker = req.partition(";")
            if "extra ==" in marker:
                continue  # an optional part of that dependency: not installed by ours
            if marker.strip() and not _applies(marker):
                continue
            todo.append(re.split(r"[<>=!~\[ (]", requirement.strip(), maxsplit=1)[0])
    return {module for module, owners in importlib.metadata.packages_distributions().items()
            if any(owner.lower().replace("_", "-") in dists for owner in owners)}


def _applies(marker: str) -> bool:
    """Whether an environment marker (python_version, platform, ...) holds here."""
    from packaging.markers import Marker

    return Marker(marker).evaluate()


def test_journal_run_needs_only_the_core_dependencies(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _GUARD, json.dumps(sorted(_core_modules())),
         "run", "examples/research.py:research", "--db", str(tmp_path / "db"),
         "--input", '{"question": "Why does LMDB need only one writer?"}'],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])  # the handler's result, as `journal run` prints it
    assert result["question"] == "Why does LMDB need only one writer?" and result["answer"]
