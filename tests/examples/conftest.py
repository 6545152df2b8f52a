"""Shared fixtures for the example tests: a private store, a call log, and crash helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from journal import LmdbStore, Step, decode_entry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DRIVER = Path(__file__).with_name("driver.py")
JOURNAL_CLI = Path(sys.executable).with_name("journal")

if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))  # the examples import their neighbour llm.py this way too

# Variables that would send the examples to a real model endpoint, or a proxy.
_OUTSIDE = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "EXAMPLE_LLM", "EXAMPLE_LATENCY",
            "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")


@dataclass
class Workspace:
    dir: Path
    db: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def calls(self) -> list[str]:
        """Lines of the call log: one per paid call (model, tool, payment) that really ran."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def keys(self) -> Counter[str]:
        """How many times each step (by idempotency key) did its work."""
        return Counter(line.split()[0] for line in self.calls())

    def journaled_steps(self, invocation_id: str) -> dict[int, Step]:
        """The steps whose outcome the journal holds, by seq (read from another process's store)."""
        store = LmdbStore(self.db)
        try:
            entries = {seq: decode_entry(data) for seq, data in store.entries(invocation_id)}
        finally:
            store.close()
        return {seq: e for seq, e in entries.items() if isinstance(e, Step)}

    def popen(self, *argv: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(argv, cwd=self.dir, env={**self.env, **env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def journal(self, *args: str, **env: str) -> subprocess.Popen[str]:
        """The real `journal` command, on this workspace's store."""
        return self.popen(str(JOURNAL_CLI), *args, **env)

    def driver(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return self.popen(sys.executable, str(DRIVER), *args, **env)

    def finish(self, proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    def outcome(self, proc: subprocess.Popen[str], code: int = 0) -> dict:
        """The one JSON object the process printed (the driver, or the command with `--json`)."""
        returncode, out, err = self.finish(proc)
        assert returncode == code, f"exit {returncode}, expected {code}\nstdout:\n{out}\nstderr:\n{err}"
        return json.loads(out)

    def kill_when(self, proc: subprocess.Popen[str], ready, timeout: float = 60) -> None:
        """SIGKILL `proc` as soon as `ready()` is true: no cleanup, no lease given back."""
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"the process ended (exit {proc.returncode}) before it could be killed\n{out}\n{err}")
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("timed out waiting for the moment to kill the process")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)  # reap it and close its pipes
        assert proc.returncode == -signal.SIGKILL


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A store and a call log in a temporary directory, and no route to any real model."""
    for name in _OUTSIDE:
        monkeypatch.delenv(name, raising=False)
    db, log = tmp_path / "journal-db", tmp_path / "calls.log"
    monkeypatch.setenv("JOURNAL_DB", str(db))
    monkeypatch.setenv("EXAMPLE_CALL_LOG", str(log))
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in _OUTSIDE}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return Workspace(tmp_path, db, log, env)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
