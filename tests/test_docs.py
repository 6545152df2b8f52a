"""Every ```python block in docs/*.md and README.md runs as written, so the docs cannot rot.

Each block runs as a script of its own (`__main__`, a fresh namespace) in a temporary
working directory, with JOURNAL_DB pointing at a temporary store. A block that cannot run
on its own is marked by a `<!-- no-run -->` line just before its fence; use that sparingly.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [p for p in [ROOT / "README.md"] if p.exists()]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NO_RUN = "<!-- no-run -->"
# Languages a reader can tell apart at a glance; anything else is probably a typo that would
# silently skip a block this test should run (```py, ```Python).
KNOWN = {"python", "console", "sh", "bash", "text", "json", "ini", "toml", "yaml", "diff", "mermaid", ""}


def fences(page: Path) -> list[tuple[int, str, str, bool]]:
    text = page.read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append((line, match.group(1).strip(), match.group(2), before == NO_RUN))
    return out


def python_blocks():
    for page in PAGES:
        for line, lang, code, skip in fences(page):
            if lang == "python":
                marks = [pytest.mark.skip(reason="marked <!-- no-run -->")] if skip else []
                yield pytest.param(page, line, code, id=f"{page.name}:{line}", marks=marks)


@pytest.mark.parametrize(("page", "line", "code"), list(python_blocks()))
def test_python_block_runs(page: Path, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EXAMPLE_LATENCY", "EXAMPLE_CALL_LOG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JOURNAL_DB", str(tmp_path / "journal-db"))
    monkeypatch.chdir(tmp_path)
    # Blank lines keep the line numbers of tracebacks equal to the page's.
    script = tmp_path / f"{page.stem}_line{line}.py"
    script.write_text("\n" * line + code, encoding="utf-8")
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        _forget_tracer_provider()


def _forget_tracer_provider() -> None:
    """A block that installs an OpenTelemetry provider installs it for the whole process
    (the API sets it once); take it away, so that it traces only that block."""
    trace = sys.modules.get("opentelemetry.trace")
    provider = getattr(trace, "_TRACER_PROVIDER", None)
    if trace is None or provider is None:
        return
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    getattr(provider, "shutdown", lambda: None)()


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_fences_name_a_known_language(page: Path):
    unknown = [(line, lang) for line, lang, _, _ in fences(page) if lang not in KNOWN]
    assert not unknown, f"{page.name}: fences with an unexpected language (typo?): {unknown}"


def test_docs_have_python_blocks():
    assert any(True for _ in python_blocks()), "no ```python blocks found in docs/"
