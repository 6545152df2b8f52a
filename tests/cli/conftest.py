import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.pgserver import PgServer
from cli import cli

from ..waiting import DEADLINE

HERE = Path(__file__).parent
AGENTS = HERE / "cli_agents.py"


def target(name: str) -> str:
    """`tests/cli/cli_agents.py:NAME` as an absolute handler path."""
    return f"{AGENTS}:{name}"


@pytest.fixture(autouse=True)
def _collector_restored():
    """`journal run`, `resume`, `worker` and `serve` tune the collector of the process they
    own; invoked in-process here, they must not change it for the rest of the session."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "db")


@pytest.fixture
def log(tmp_path):
    """The side-effect log handlers append to; `log.lines()` reads it."""

    class Log:
        path = str(tmp_path / "effects.log")

        def lines(self):
            try:
                return Path(self.path).read_text().splitlines()
            except FileNotFoundError:
                return []

    return Log()


@pytest.fixture
def journal(db, monkeypatch):
    """Invoke the `journal` command in-process (CliRunner) on the test's store.

    `journal("ls", "--json")` returns the click Result; stdout and stderr stay apart.
    """
    monkeypatch.delenv("JOURNAL_DB", raising=False)

    def invoke(*args: str, input: str | None = None, use_db: bool = True):
        argv = list(args) + (["--db", db] if use_db else [])
        return CliRunner().invoke(cli, argv, input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def sh(db, tmp_path):
    """Run `journal` as a real process (python -m cli) on the test's store."""
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_DB"}
    env["PYTHONUNBUFFERED"] = "1"

    def run(*args: str, input: str | None = None, timeout: float = 30, use_db: bool = True):
        argv = [sys.executable, "-m", "cli", *args] + (["--db", db] if use_db else [])
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path, env=env)

    run.argv = lambda *args: [sys.executable, "-m", "cli", *args, "--db", db]
    run.env = env
    started: list[subprocess.Popen[str]] = []

    def popen(*args: str, sigint: signal.Handlers = signal.SIG_DFL) -> subprocess.Popen[str]:
        """`journal ARGS` in the background, killed at the end of the test if still running.
        Started as from a terminal, where Ctrl-C reaches a command, whatever the test run was
        started as: a script's background job (`pytest &`) ignores SIGINT, and so would its
        children (`journal` keeps a SIGINT it was started with ignored, as other programs do)."""
        # Not `preexec_fn`: it makes Python fork and run code before exec, which can deadlock
        # beside this process's threads; a child stuck there keeps every descriptor of the test
        # process, the test runner's own channel among them, so even its timeout ends nothing.
        # A first Python sets SIGINT and execs `journal` in its place (same pid).
        setup = (f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{sigint.name}); "
                 "os.execv(sys.executable, sys.argv[1:])")
        proc = subprocess.Popen([sys.executable, "-c", setup, *run.argv(*args)], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    def stopped(proc: subprocess.Popen[str], signum: int = signal.SIGINT, timeout: float = 30) -> str:
        """Send `signum` to `proc`; its stderr once it has exited."""
        proc.send_signal(signum)
        return proc.communicate(timeout=timeout)[1]

    run.popen, run.stopped = popen, stopped
    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
    for proc in started:
        try:
            proc.communicate(timeout=DEADLINE)  # (bounded: a grandchild could hold its pipes open)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def servers(pg_server):  # (pg_server: the machine has PostgreSQL, or CI fails)
    """Servers of the test's own, stopped and removed when it ends."""
    made: list[PgServer] = []

    def make(**options) -> PgServer:
        made.append(PgServer(name="jpf-pg", **options).start())
        return made[-1]

    def standby_of(primary: PgServer, **options) -> PgServer:
        made.append(PgServer.standby_of(primary, name="jpf-pg", **options))
        return made[-1]

    make.standby_of = standby_of
    yield make
    for server in made:
        server.stop()


def loads(text: str):
    return json.loads(text)
