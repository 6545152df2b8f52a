"""The distribution's name is journal's own, and every install line the project prints or
documents names it: `journal` and `runtime` on the package index are other projects."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "journal-agents"

# `pip install 'DIST[extra,...]'` as the docs, the help texts and the error messages write it.
_INSTALL = re.compile(r"pip install (?:-e )?'?([A-Za-z0-9_.-]+)\[([a-z0-9_,-]+)\]")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _texts():
    for pattern in ("README.md", "docs/*.md", "journal/**/*.py", "runtime/**/*.py", "cli/**/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, path.read_text()


def test_the_distribution_has_a_name_of_its_own_and_keeps_the_command():
    project = _project()
    assert project["name"] == NAME
    assert project["scripts"] == {"journal": "cli:main"}
    # An extra that installs others of the project's extras names the distribution itself.
    for extra, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            if "[" in requirement and requirement.split("[")[0] in {"journal", "runtime", NAME}:
                assert requirement.startswith(NAME + "["), (extra, requirement)


def test_every_install_line_names_the_distribution_and_an_extra_it_has():
    extras = set(_project()["optional-dependencies"])
    lines = [(path.relative_to(ROOT), match) for path, text in _texts() for match in _INSTALL.finditer(text)
             if match.group(1) not in _OTHERS]  # (another project's own install line, as Pydantic AI's)
    assert len(lines) >= 10  # the docs' install lines, the integrations' docstrings, the errors
    wrong = [(str(path), m.group(0)) for path, m in lines
             if m.group(1) not in (NAME, ".") or not set(m.group(2).split(",")) <= extras]  # (".": a checkout)
    assert wrong == []


_OTHERS = {"pydantic-ai-slim", "openai-agents", "langgraph", "mcp"}
