"""The workload of the PostgreSQL fault tests: invocations of many steps, run by real
`journal worker` processes while the database fails under them, and what the test
checks afterwards (every step done, repeats bounded, a clean journal, no traceback).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from ..waiting import DEADLINE, Lines, wait_until

HERE = Path(__file__).parent
HANDLER = f"chain={HERE / 'fault_agents.py'}:chain"


class Workload:
    """`invocations` x `steps` steps of `fault_agents.chain`, started in the store at `url`
    (the test's own way in: a Unix socket, which no partition cuts)."""

    def __init__(self, url: str, tmp_path: Path, *, invocations: int = 20, steps: int = 30,
                 work: float = 0.01) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.log = tmp_path / "effects.log"
        self.log.touch()
        self.invocations, self.steps = invocations, steps
        self.ids = [f"f{i:02}" for i in range(invocations)]
        self.workers: list[subprocess.Popen[str]] = []
        self.stderr: list[Lines] = []
        self._conn = None
        job = {"log": str(self.log), "steps": steps, "work": work}

        async def start() -> None:
            from runtime import Engine

            async with Engine.open(url) as engine:
                for invocation_id in self.ids:
                    await engine.start("chain", job, id=invocation_id)

        anyio.run(start)

    def worker(self, url: str, *, concurrency: int = 4, lease_ttl: float | None = None,
               wrap: list[str] | None = None) -> subprocess.Popen[str]:
        """A `journal worker` process on `url` (through `wrap`, e.g. `ip netns exec NS`)."""
        argv = [sys.executable, "-m", "cli", "worker", "--db", url, "--handler", HANDLER,
                "--concurrency", str(concurrency), "-q"]
        if lease_ttl is not None:
            argv += ["--lease-ttl", str(lease_ttl)]
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_DB"} | {"PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen((wrap or []) + argv, cwd=self.tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        self.workers.append(proc)
        self.stderr.append(Lines(proc.stderr))
        return proc

    # -- what happened ----------------------------------------------------------------------

    def effects(self) -> list[tuple[str, int, int]]:
        """Every step execution so far: `(invocation id, step, pid)`."""
        out = []
        for line in self.log.read_text().splitlines():
            invocation_id, step, pid = line.split()
            out.append((invocation_id, int(step), int(pid)))
        return out

    def wait_for_effects(self, n: int) -> None:
        self._alive_while(lambda: len(self.effects()) >= n, f"{n} steps to have run")

    def statuses(self) -> dict[str, str]:
        """Each invocation's status, read over a connection of the test's own (opened again
        whenever the server dropped it)."""
        import psycopg

        for _ in range(2):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                rows = self._conn.execute("SELECT invocation_id, status FROM journal.status").fetchall()
                return {bytes(i).decode(): s for i, s in rows}
            except psycopg.OperationalError:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
        return {}

    def wait_until_done(self, timeout: float = DEADLINE) -> None:
        self._alive_while(lambda: self._finished(), "every invocation to finish", timeout)

    def _finished(self) -> bool:
        statuses = self.statuses()
        return len(statuses) == self.invocations and all(
            s in ("completed", "failed", "diverged", "cancelled") for s in statuses.values())

    def _alive_while(self, predicate, what: str, timeout: float = DEADLINE) -> None:
        last = [0.0]

        def reached() -> bool:
            for proc, err in zip(self.workers, self.stderr, strict=True):
                if proc.poll() is not None:
                    raise AssertionError(f"a worker exited with {proc.returncode} before {what}: "
                                         f"{err.text(timeout=5)}")
            if time.monotonic() - last[0] < 0.05:  # a few looks a second: each is a query or a file read
                return False
            last[0] = time.monotonic()
            return bool(predicate())

        wait_until(reached, what, timeout=timeout)

    def stop_workers(self) -> list[str]:
        """SIGTERM every worker still running (each must still be); their stderr."""
        for proc in self.workers:
            assert proc.poll() is None, f"a worker exited by itself with {proc.returncode}"
            proc.send_signal(signal.SIGTERM)
        texts = []
        for proc, err in zip(self.workers, self.stderr, strict=True):
            proc.wait(timeout=60)
            texts.append(err.text())
        return texts

    def kill_workers(self) -> None:
        """The test's end: every worker gone, its pipe read to the end and closed."""
        for proc, err in zip(self.workers, self.stderr, strict=True):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.text(timeout=30)
            proc.stderr.close()
        if self._conn is not None:
            self._conn.close()

    # -- the checks ---------------------------------------------------------------------------

    def check(self, *, in_flight: int) -> collections.Counter[tuple[str, int]]:
        """What every fault test asserts once its invocations are done: each completed, every
        step ran, at most `in_flight` step executions were repeats, the journal checks
        clean, and no worker printed a traceback. The executions, counted by step."""
        statuses = self.statuses()
        assert statuses == {i: "completed" for i in self.ids}, statuses
        ran = collections.Counter((i, step) for i, step, _ in self.effects())
        assert set(ran) == {(i, step) for i in self.ids for step in range(self.steps)}, "a step never ran"
        repeats = sum(ran.values()) - len(ran)
        assert repeats <= in_flight, f"{repeats} step executions repeated, more than the {in_flight} in flight"
        checked = subprocess.run([sys.executable, "-m", "cli", "check", "--db", self.url, "--json"],
                                 capture_output=True, text=True, timeout=120)
        assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked.stdout + checked.stderr
        texts = self.stop_workers()
        for text in texts:
            assert "Traceback" not in text and "Error" not in text.replace("PostgreSQL error", ""), text
        return ran
