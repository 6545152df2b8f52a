"""Real processes, real SIGKILLs: workers are killed at random moments over at least 200
runs on LMDB (15 on PostgreSQL, whose runs are slower and whose rules are the same code),
and afterwards no completed step ran again, no entry was lost, and every invocation
finished with the reference result.

Workers are started ahead of time (one waits, warm, while another works) so that the
runs cost the work and not Python's start-up; each is killed while it resumes a batch of
invocations on a real LMDB store or PostgreSQL database, at a random moment of its work:
after a random number of new lines in the side-effect log, plus a random few
milliseconds. Counting its work rather than the clock keeps the kills spread over the
work however loaded the machine is, and every killed run leaves progress behind, so a
batch always finishes. Batches alternate between `sync` and `async` durability (both
survive a killed process). The random seed is printed on failure.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from journal import Emitted, Status, Step, Store, decode_entry, decode_value, open_store
from runtime import Engine

from ..waiting import wait_until
from .crash_worker import STEPS, crash_agent, expected

ROOT = Path(__file__).resolve().parents[2]
KILLS = {"lmdb": 200, "postgres": 15}  # killed worker runs, at least (PostgreSQL: the same paths, fewer runs)
BATCH = {"lmdb": 40, "postgres": 8}  # invocations per batch
# A run is killed after 1 to this many new side-effect log lines (a batch writes 12 per invocation)...
MOST_LINES = {"lmdb": 120, "postgres": 24}
MOST_EXTRA = 0.01  # ... and then up to this many seconds more


class Workers:
    """Spawns workers ahead of time, so that warm ones are waiting for their turn."""

    def __init__(self, db: str, log: Path, tmp: Path, ahead: int = 2) -> None:
        self.db, self.log, self.tmp, self.ahead = db, log, tmp, ahead
        self.durability = "sync"
        self.warm: list[subprocess.Popen] = []
        self.killed: set[int] = set()
        self.exited = 0
        self.spawned = 0
        self._log_bytes = 0
        self._log_lines = 0

    def log_lines(self) -> int:
        """Lines in the side-effect log so far (read incrementally: it only grows)."""
        if self.log.exists():
            with open(self.log, "rb") as f:
                f.seek(self._log_bytes)
                more = f.read()
            self._log_bytes += len(more)
            self._log_lines += more.count(b"\n")
        return self._log_lines

    def _spawn(self) -> subprocess.Popen:
        env = {**os.environ, "CRASH_LOG": str(self.log), "PYTHONPATH": str(ROOT)}
        self.spawned += 1
        err_path = self.tmp / f"worker-{self.spawned}.err"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.property.crash_worker", str(self.db), self.durability],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=env,
            )
        proc.err_path = err_path  # type: ignore[attr-defined]
        return proc

    def run_one(self, rng: random.Random, most_lines: int) -> None:
        """Let the next worker go, and SIGKILL it at a random point of its work unless it finished first."""
        self.warm = [p for p in self.warm if p.args[-1] == self.durability or _discard(p)]
        while len(self.warm) <= self.ahead:
            self.warm.append(self._spawn())
        proc = self.warm.pop(0)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == b"ready", _stderr(proc)
        target = self.log_lines() + rng.randint(1, most_lines)
        extra = rng.uniform(0, MOST_EXTRA)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        wait_until(lambda: proc.poll() is not None or self.log_lines() >= target,
                   f"worker {proc.pid} to write its side effects")
        try:
            proc.wait(timeout=extra)  # a random moment after that side effect, if it is still running
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.killed.add(proc.pid)
        else:
            assert proc.returncode == 0, _stderr(proc)
            self.exited += 1
        proc.stdin.close()
        proc.stdout.close()

    def close(self) -> None:
        for proc in self.warm:
            _discard(proc)
        self.warm = []


def _discard(proc: subprocess.Popen) -> bool:
    proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    return False


def _stderr(proc: subprocess.Popen) -> str:
    return f"worker {proc.pid} failed:\n" + Path(proc.err_path).read_text(errors="replace")  # type: ignore[attr-defined]


async def _start_batch(db: str, first: int, size: int) -> list[tuple[str, int]]:
    started = []
    async with Engine.open(db) as engine:
        for n in range(first, first + size):
            record = await engine.start(crash_agent, n, id=f"inv-{n}")
            started.append((record.id, n))
    return started


def _unfinished(store: Store, ids: list[str]) -> int:
    return sum(1 for i in ids if not store.require(i).finished)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 545 s measured on two cores shared with seven other suites (the default is 600)
@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_sigkilled_workers_never_rerun_a_committed_step_nor_lose_an_entry(tmp_path, backend, request):
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    db = request.getfixturevalue("postgres_url") if backend == "postgres" else str(tmp_path / "journal")
    log = tmp_path / "effects.log"
    workers = Workers(db, log, tmp_path)
    max_runs = 4 * BATCH[backend] * len(STEPS) * 2  # a hang guard: each killed run adds at least one line
    invocations: dict[str, int] = {}
    batches = 0
    store = None
    try:
        while len(workers.killed) < KILLS[backend]:
            workers.durability = "sync" if batches % 2 == 0 else "async"
            batch = anyio.run(_start_batch, db, batches * BATCH[backend], BATCH[backend])
            batches += 1
            invocations.update(batch)
            store = store or open_store(db)
            ids = [i for i, _ in batch]
            runs = 0
            while _unfinished(store, ids):
                runs += 1
                assert runs <= max_runs, (
                    f"batch {batches} did not finish after {max_runs} runs: "
                    f"{[(i, store.require(i).status.value, store.require(i).divergence) for i in ids if not store.require(i).finished]}"
                    f" (seed {seed})"
                )
                workers.run_one(rng, MOST_LINES[backend])
    finally:
        workers.close()
    try:
        _check(store, invocations, log, workers.killed, seed)
    finally:
        store.close()
    print(f"\ncrash processes: {len(workers.killed)} workers killed, {workers.exited} finished on their own, "
          f"{len(invocations)} invocations in {batches} batches (seed {seed})")


def _records(text: str) -> tuple[list[list[str]], list[list[str]]]:
    """The log's records (`KIND INVOCATION SEQ NAME PID`), and the torn ones: a record starts
    at each `E` or `C` (no invocation id, seq, step name or pid is one of those)."""
    records: list[list[str]] = []
    for token in text.split():
        if token in ("E", "C"):
            records.append([token])
        else:
            records[-1].append(token)
    return [r for r in records if len(r) == 5], [r for r in records if len(r) != 5]


def _check(store: Store, invocations: dict[str, int], log: Path, killed: set[int], seed: int) -> None:
    where = f"(seed {seed}; rerun with CRASH_SEED={seed})"
    # Every invocation finished with the reference result, its journal holding each step once.
    for invocation_id, n in invocations.items():
        record = store.require(invocation_id)
        assert record.status == Status.COMPLETED, f"{invocation_id}: {record.status} {record.error} {where}"
        assert decode_value(record.result) == expected(n), f"{invocation_id}: wrong result {where}"
        steps = [e for _, e in (
            (s, decode_entry(d)) for s, d in store.entries(invocation_id)) if isinstance(e, Step)]
        assert sorted(s.name for s in steps) == sorted(STEPS), f"{invocation_id}: steps {steps} {where}"
        # The task group's two branches start with the same emit: each journaled once, on its own path.
        emits = [d for _, d in store.entries(invocation_id) if isinstance(decode_entry(d), Emitted)]
        assert len(emits) == 2, f"{invocation_id}: {len(emits)} emits {where}"
    # The side-effect log, in the order things happened. Steps are told apart by name (unique
    # in crash_agent): a step run again after a crash may get another seq than the killed run.
    events = collections.defaultdict(list)
    records, torn = _records(log.read_text())
    # A SIGKILL stops a write at a page boundary (Linux checks for a fatal signal between pages),
    # so a killed process may leave the start of its last record, with the next record after it.
    assert len(torn) <= len(killed), f"torn records {torn}, more than the {len(killed)} kills {where}"
    for kind, invocation_id, _seq, name, pid in records:
        events[(invocation_id, name)].append((kind, int(pid)))
    journaled = {}
    for invocation_id in invocations:
        for _, data in store.entries(invocation_id):
            entry = decode_entry(data)
            if isinstance(entry, Step):
                journaled[(invocation_id, entry.name)] = decode_value(entry.value)
    reruns = 0
    for key, seen in events.items():
        runs = [pid for kind, pid in seen if kind == "E"]
        assert runs, f"{key}: a commit was seen for a step that never ran {where}"
        first_commit = next((i for i, (kind, _) in enumerate(seen) if kind == "C"), None)
        if first_commit is not None:
            again = [pid for kind, pid in seen[first_commit:] if kind == "E"]
            assert not again, f"{key} ran again in process {again} after its commit was seen: {seen} {where}"
        # Only a run cut short by a kill may be followed by another, and the journal holds the last one.
        assert all(pid in killed for pid in runs[:-1]), f"{key} ran again after a run that was not killed: {seen} {where}"
        assert key in journaled, f"{key} ran but its outcome is not in the journal {where}"
        assert journaled[key]["pid"] == runs[-1], f"{key}: journaled by {journaled[key]['pid']}, runs {seen} {where}"
        reruns += len(runs) - 1
    assert set(journaled) == set(events), f"journaled steps without a recorded run {where}"
    print(f"\ncrash processes: {reruns} steps ran twice, each cut short by a kill before its commit")
