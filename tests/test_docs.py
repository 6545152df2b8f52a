"""Every ```python block in docs/*.md and README.md runs as written, so the docs cannot rot.

Each block runs as a script of its own (`__main__`, a fresh namespace) in a temporary
working directory, with JOURNAL_DB pointing at a temporary store. A block that cannot run
on its own is marked by a `<!-- no-run -->` line just before its fence; use that sparingly.
"""

from __future__ import annotations

import os
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


# -- following a page top to bottom -------------------------------------------------------------
#
# The tutorials are followed as a reader follows them: in one fresh directory (holding a copy of
# the repository's `examples/`, as a checkout does, and its `.venv` once the README's set-up
# has made it), every ```python, ```console and ```sh
# block in page order, with the installed `journal` on PATH. A ```python block is saved under
# the name the page gives it ("Save this as `agent.py`:", or a `<!-- save-as: NAME -->` line
# before its fence) and otherwise run as a script; console lines (`$ ...`, with `\`
# continuations) and sh lines run in one shell, so `export`, `&` and `%1` carry over as they do
# in a terminal (`%1` is the first command the page put in the background). What the page shows as output is not compared; a command must not print a
# traceback or an `error:`, and ends 0 (3 for a `journal` command that suspends, as the page
# says). Installing is the test environment's own: `pip install` and venv lines are not run.
#
# The reader's "halfway" is a moment as well as a duration: `& sleep N; kill -9 $!` (on one
# line or two) kills no earlier than the page says, and not before the backgrounded
# invocation has journaled a step, so a loaded machine cannot kill it before it starts;
# `kill -9 %1  # once ...` waits for that step. Either fails if the invocation has finished
# by then: the page promised a kill halfway. A command "in another terminal" runs in the background, and must have ended when
# the page does.

WALKED = ["README.md", "docs/quickstart.md", "docs/pydantic-ai.md", "docs/openai-agents.md", "docs/langgraph.md",
          "docs/mcp.md"]
SAVE_AS = re.compile(r"(?:[Ss]ave (?:this|it) as `([\w./-]+)`|<!-- save-as: ([\w./-]+) -->)")
NOT_RUN = re.compile(r"\bpip3? install\b|-m venv\b|\.venv/bin/activate")
HALFWAY = re.compile(r"\s*&\s*sleep ([\d.]+);\s*kill -9 \$!\s*$")


def _steps(page: Path) -> list[tuple[int, str, str]]:
    """(line, what, text): `file NAME` with its content, `python` code, or a `shell` command."""
    steps: list[tuple[int, str, str]] = []
    for line, lang, code, skip in fences(page):
        if skip:
            continue
        if lang == "python":
            text = page.read_text(encoding="utf-8").splitlines()
            before = next((t for t in reversed(text[: line - 1]) if t.strip()), "")
            named = SAVE_AS.search(before)
            if named:
                steps.append((line, "file " + (named.group(1) or named.group(2)), code))
            else:
                steps.append((line, "python", code))
        elif lang in ("console", "sh"):
            command = ""
            for raw in code.splitlines():
                if lang == "console" and not command and not raw.startswith("$ "):
                    continue  # output the page shows
                part = raw[2:] if not command and lang == "console" else raw
                command += part.rstrip("\\").rstrip() + " " if part.rstrip().endswith("\\") else part
                if not part.rstrip().endswith("\\"):
                    if command.strip() and not command.lstrip().startswith("#") and not NOT_RUN.search(command):
                        steps.append((line, "shell", command.strip()))
                    command = ""
    return steps


class _Shell:
    """One bash, fed a command at a time, as a terminal is."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        import subprocess

        self.cwd, self.n, self.said = cwd, 0, ""
        (cwd / ".walk").mkdir()
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def send(self, command: str, timeout: float = 180) -> tuple[int, str, str]:
        """Run `command` in the shell; its exit status, stdout and stderr."""
        import select
        import time

        self.n += 1
        out, err = self.cwd / ".walk" / f"{self.n}.out", self.cwd / ".walk" / f"{self.n}.err"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{{ {command}\n}} > {out} 2> {err}\necho __walked__ $?\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        # Read the pipe unbuffered: a line the shell printed by itself (`Killed`, for a job
        # killed in the background) may come in one read with the one awaited.
        while "__walked__ " not in self.said:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"`{command}` did not end within {timeout:g} s:\n{out.read_text()}\n{err.read_text()}")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"the shell ended during `{command}`")
            self.said += chunk.decode(errors="replace")
        status, _, self.said = self.said.split("__walked__ ", 1)[1].partition("\n")
        return int(status), out.read_text(), err.read_text()

    def start(self, command: str) -> str:
        """`command &`: its pid. (`%1` is told apart by the walk: this shell has no job control,
        so a background job reads nothing of the commands meant for the shell.)"""
        code, _, err = self.send(f"{command} < /dev/null &")
        assert code == 0, err
        return self.value("$!")

    def value(self, expression: str) -> str:
        return self.send(f"printf '%s' {expression}")[1]

    def close(self) -> None:
        import os
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.communicate()


def _journaled(shell: _Shell, invocation_id: str) -> tuple[int, bool]:
    """How many step entries the store (the shell's $JOURNAL_DB, or ./.journal) holds for the
    invocation, and whether it has finished."""
    from journal import decode_entry, kind_of, open_store
    from journal.errors import JournalError

    db = shell.value('"${JOURNAL_DB:-.journal}"')
    path = db if os.path.isabs(db) else str(shell.cwd / db)
    if not os.path.isfile(os.path.join(path, "data.mdb")):
        return 0, False
    try:
        with open_store(path, readonly=True) as store:
            record = store.get(invocation_id)
            steps = sum(1 for _, data in store.entries(invocation_id) if kind_of(decode_entry(data)) == "step")
            return steps, record is not None and record.finished
    except JournalError:
        return 0, False


def _kill_halfway(shell: _Shell, background: str, job: str, invocation_id: str | None,
                  not_before: float = 0.0) -> None:
    """Wait until the job's invocation has journaled a step and `time.monotonic()` has reached
    `not_before` (the reader's `sleep`), then SIGKILL it."""
    import time

    assert invocation_id is not None, f"`{background}`: the walk kills an invocation it knows by --id"
    deadline = time.monotonic() + 120
    while _journaled(shell, invocation_id)[0] < 1 or time.monotonic() < not_before:
        running = shell.send(f"kill -0 {job} 2>/dev/null")[0] == 0
        assert running, f"`{background}` ended before it could be killed halfway"
        assert time.monotonic() < deadline, f"`{background}` journaled no step in 120 s"
        time.sleep(0.05)
    code, _, err = shell.send(f"kill -9 {job}")
    assert code == 0, err
    assert not _journaled(shell, invocation_id)[1], f"`{background}` had finished before it was killed"


def _walk_checks(page: str, where: Path) -> None:
    """What the page says the reader will see, once it is followed to its end."""
    if page == "docs/quickstart.md":
        from collections import Counter

        counts = Counter((where / "side-effects.log").read_text().splitlines())
        # "Every `squared N` line appears once ... The only exception is a step that had done
        # its work but was killed before its result was journaled: that one step runs again."
        assert set(counts) == {f"squared {n}" for n in range(10)}, counts
        assert sum(n - 1 for n in counts.values()) <= 1, counts


@pytest.mark.slow
@pytest.mark.parametrize("page", WALKED)
def test_a_reader_can_follow_the_page_top_to_bottom(page: str, tmp_path: Path):
    import shutil
    import time

    where = tmp_path / "reader"
    shutil.copytree(ROOT / "examples", where / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (where / ".venv").symlink_to(sys.prefix)  # what the README's set-up makes
    env = {k: v for k, v in os.environ.items()
           if k not in ("JOURNAL_DB", "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "EXAMPLE_LLM",
                        "EXAMPLE_LATENCY", "EXAMPLE_CALL_LOG", "PYTHONPATH", "COLUMNS")
           and not k.lower().endswith("_proxy")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    shell = _Shell(where, env)
    # (command, pid, when) started with `&`, in order: `%1` is the first
    background: list[tuple[str, str, float]] = []
    try:
        for line, what, text in _steps(ROOT / page):
            here = f"{page}:{line}: "
            if what.startswith("file "):
                (where / what[5:]).write_text(text, encoding="utf-8")
                continue
            if what == "python":
                script = where / f".walk/{Path(page).stem}_line{line}.py"
                script.write_text("\n" * line + text, encoding="utf-8")
                code, out, err = shell.send(f"python {script}")
                assert code == 0 and "Traceback" not in err, here + f"the block exits {code}\n{out}\n{err}"
                continue
            command = text.split("  #")[0].strip()
            named = re.search(r"--id (\S+)", command)
            halfway = HALFWAY.search(command)
            if halfway:  # `journal run ... & sleep N; kill -9 $!`
                started_at, pid = time.monotonic(), shell.start(command[: halfway.start()])
                _kill_halfway(shell, command, pid, named.group(1) if named else None,
                              started_at + float(halfway.group(1)))
                continue
            killing = re.fullmatch(r"kill -9 %(\d+)|sleep ([\d.]+);\s*kill -9 \$!", command)
            if killing:  # "once the lookups are journaled", or the last job after a pause
                started, pid, started_at = background.pop(int(killing.group(1)) - 1 if killing.group(1) else -1)
                found = re.search(r"--id (\S+)", started)
                pause = float(killing.group(2)) if killing.group(2) else 0.0
                _kill_halfway(shell, started, pid, found.group(1) if found else None, started_at + pause)
                continue
            if "in another terminal" in text and not command.endswith("&"):
                command += " &"
            if command.endswith("&"):
                background.append((command, shell.start(command.rstrip("&").strip()), time.monotonic()))
                continue
            code, out, err = shell.send(command)
            said = out + err
            assert "Traceback" not in said, here + f"`{command}` printed a traceback:\n{said}"
            assert "error:" not in err, here + f"`{command}` failed:\n{said}"
            allowed = (0, 3) if re.match(r"(\S*/)?journal ", command) else (0,)
            assert code in allowed, here + f"`{command}` exited {code}:\n{said}"
        for command, pid, _ in background:  # e.g. a `journal tail -f` "in another terminal"
            code, _, _ = shell.send(f"wait {pid}", timeout=120)
            output = "\n".join(p.read_text() for p in sorted((where / ".walk").glob("*.err")))
            assert code == 0, f"{page}: `{command}` ended with {code}\n{output}"
        _walk_checks(page, where)
    finally:
        shell.close()
