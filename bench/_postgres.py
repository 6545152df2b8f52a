"""The PostgreSQL part of `python -m bench`: journal's workloads on a local server beside
the bare `INSERT ...; COMMIT` round trip and DBOS Transact doing the same work.

One throwaway server (fsync on, so `sync` pays a real WAL flush) serves every sample;
each sample gets a fresh database. W2 runs in one process, then with 1, 2 and 4 worker
processes; the takeover figure SIGKILLs one of two workers in the middle of their work.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import anyio

from journal import PostgresStore, Status
from runtime import Engine

from . import _agents, _workloads

W1_STEPS = 200
W2_INVOCATIONS, W2_STEPS = 50, 20
TAKEOVER_INVOCATIONS, TAKEOVER_STEPS = 8, 150
W4_STEPS = 1000  # fewer than LMDB's 5,000: each journaled step is a WAL-flushed commit here


def raw_commit_us(url: str, sync: bool, n: int = 200) -> float:
    """The bare round trip: one `INSERT` of a 100-byte row and its `COMMIT`, one at a time."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("SET synchronous_commit = " + ("on" if sync else "off"))
        conn.execute("CREATE TABLE IF NOT EXISTS bare (id bigserial PRIMARY KEY, v bytea)")
        conn.commit()
        started = time.perf_counter()
        for _ in range(n):
            conn.execute("INSERT INTO bare (v) VALUES (%s)", (_agents.PAYLOAD,))
            conn.commit()
        return (time.perf_counter() - started) / n * 1e6


def _spawn_workers(url: str, count: int, **options: Any) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=_workloads.ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-m", "bench._child", "pg-worker", json.dumps({"db": url, **options})],
                              cwd=_workloads.ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(count)]
    for proc in procs:
        _workloads._wait_readable(proc.stdout.fileno(), proc, "ready")
        assert json.loads(proc.stdout.readline())["ready"]
    return procs


async def _start(url: str, name: str, inputs: list[Any], prefix: str) -> list[str]:
    async with Engine.open(url) as engine:
        return [(await engine.start(name, value, id=f"{prefix}-{i}")).id for i, value in enumerate(inputs)]


def w2_processes(url: str, workers: int) -> dict:
    """W2's invocations started by name, then run by `workers` worker processes."""
    anyio.run(_start, url, "steps", [W2_STEPS] * W2_INVOCATIONS, "w2p")
    procs = _spawn_workers(url, workers, concurrency=W2_INVOCATIONS)  # as many at once as in one process
    with PostgresStore(url) as store:
        started = time.perf_counter()
        for proc in procs:
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        # Until the last invocation completes, not until the workers exit (process exit is
        # not part of the work).
        while len(store.list(Status.COMPLETED)) < W2_INVOCATIONS:
            assert time.perf_counter() - started < 600, "the workers never finished"
            time.sleep(0.005)  # sampling the store: the figure's resolution
        elapsed = time.perf_counter() - started
    for proc in procs:
        proc.communicate(timeout=600)
    return {"steps_per_s": W2_INVOCATIONS * W2_STEPS / elapsed, "seconds": elapsed}


def takeover(url: str, parent: str) -> dict:
    """Two workers share the invocations; one is SIGKILLed mid-step; how long until the
    other owns (and then finishes) each of its invocations, and how many steps ran twice."""
    log = os.path.join(tempfile.mkdtemp(dir=parent), "effects")
    inputs = [{"path": f"{log}-{i}", "n": TAKEOVER_STEPS} for i in range(TAKEOVER_INVOCATIONS)]
    ids = anyio.run(_start, url, "paced", inputs, "t")
    # The victim runs half the invocations at once and starts first; the survivor could run
    # them all, so it has room for the victim's when they are orphaned.
    victim = _spawn_workers(url, 1, idle_exit=False, concurrency=TAKEOVER_INVOCATIONS // 2)[0]
    survivor = _spawn_workers(url, 1, idle_exit=False, concurrency=TAKEOVER_INVOCATIONS)[0]
    procs = [victim, survivor]
    try:
        with PostgresStore(url) as store:

            def held_by(pid: int) -> list[str]:
                return [i for i in ids if (lease := store.lease(i)) is not None and lease.pid == pid]

            # The victim first, until it holds as many as it runs at once and has run steps
            # in them; then the survivor, which takes the rest (waiting, with a deadline).
            deadline = time.monotonic() + 60
            victim.stdin.write(b"go\n")
            victim.stdin.flush()
            while len(held := held_by(victim.pid)) < TAKEOVER_INVOCATIONS // 2 or not all(
                    os.path.exists(f"{log}-{ids.index(i)}") for i in held):
                assert time.monotonic() < deadline, "the victim never took work"
            survivor.stdin.write(b"go\n")
            survivor.stdin.flush()
            while len(held_by(survivor.pid)) < TAKEOVER_INVOCATIONS - len(held):
                assert time.monotonic() < deadline, "the survivor never took work"
            victim.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            victim.wait()
            owned_at = finished_at = None
            while finished_at is None:
                leases = {i: store.lease(i) for i in held}
                if owned_at is None and all(x is not None and x.pid == survivor.pid for x in leases.values()):
                    owned_at = time.perf_counter()
                if all(store.get(i).status == Status.COMPLETED for i in held):
                    finished_at = time.perf_counter()
                    owned_at = owned_at or finished_at
                assert time.perf_counter() - killed < 120, "the survivor never finished the victim's work"
                time.sleep(0.005)  # sampling the store: the figure's resolution
        repeated = 0
        for i in held:
            with open(f"{log}-{ids.index(i)}") as f:
                lines = f.read().split()
            repeated += len(lines) - len(set(lines))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return {"taken_over_s": owned_at - killed, "finished_s": finished_at - killed,
            "invocations": len(held), "steps_repeated": repeated}


def dbos(url: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench._dbos", url, str(W2_INVOCATIONS), str(W2_STEPS)],
                         capture_output=True, text=True, cwd=_workloads.ROOT, timeout=600)
    if out.returncode != 0:
        if "No module named 'dbos'" in out.stderr:
            raise RuntimeError("DBOS Transact is not installed here: pip install -e '.[bench]'")
        raise RuntimeError(f"DBOS failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _langgraph_sample(server: Any, add: Callable[[str, float], None]) -> None:
    """LG on this server: JournalSaver, PostgresSaver and InMemorySaver in `sync` durability,
    between two bare commits (skipped when LangGraph's extras are not installed)."""
    try:
        from . import _langgraph
    except ImportError:
        return
    before = raw_commit_us(server.new_database(), True)
    for saver in ("memory", "journal", "postgres"):
        try:
            add(f"LG/{saver}", _langgraph.loop_postgres(server.new_database(), saver)["us_per_step"])
        except ImportError:  # PostgresSaver: pip install langgraph-checkpoint-postgres
            continue
    add("LG/raw", (before + raw_commit_us(server.new_database(), True)) / 2)


def measure(reps: int, parent: str, log: Callable[[str], None]) -> dict[str, list[float]]:
    from .pgserver import PgServer  # the same throwaway server the tests use

    server = PgServer(fsync=True).start()
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    try:
        for rep in range(reps):
            log(f"repetition {rep + 1}: PostgreSQL")
            for mode in ("sync", "async"):
                # The bare round trip just before and just after each W1 sample: a shared disk's
                # fsync time drifts, and a ratio of figures a moment apart is steadier.
                before = raw_commit_us(server.new_database(), mode == "sync")
                add(f"W1/{mode}", anyio.run(_workloads._w1, server.new_database(), mode, W1_STEPS)["us_per_step"])
                after = raw_commit_us(server.new_database(), mode == "sync")
                add(f"raw/{mode}", (before + after) / 2)
                add(f"W1ratio/{mode}", samples[f"W1/{mode}"][-1] / samples[f"raw/{mode}"][-1])
                add(f"W2/{mode}", anyio.run(_workloads._w2, server.new_database(), mode, W2_INVOCATIONS,
                                            W2_STEPS)["steps_per_s"])
            _langgraph_sample(server, add)
            for mode in ("sync", "async"):
                w3 = _workloads.crash_recovery(parent, mode, db=server.new_database())
                add(f"W3/{mode}", w3["recover_s"])
                add(f"W3ran_twice/{mode}", w3["journaled_ran_twice"])
                w4 = _workloads.long_resume(parent, mode, steps=W4_STEPS, db=server.new_database())
                add(f"W4/{mode}", w4["entries_per_s"])
            for workers in (1, 2, 4):
                add(f"W2x{workers}", w2_processes(server.new_database(), workers)["steps_per_s"])
            out = dbos(server.new_database())
            add("dbos/W1", out["w1_us_per_step"])
            add("dbos/W2", out["w2_steps_per_s"])
            t = takeover(server.new_database(), parent)
            add("takeover/owned", t["taken_over_s"])
            add("takeover/finished", t["finished_s"])
            add("takeover/repeated", t["steps_repeated"])
            add("takeover/invocations", t["invocations"])
    finally:
        server.stop()
    return samples


def render(samples: dict[str, list[float]]) -> str:
    med = {k: statistics.median(v) for k, v in samples.items()}
    lines = ["", "PostgreSQL (local server, fsync on; medians):",
             f"  bare INSERT+COMMIT, synchronous_commit=on    {med['raw/sync']:9.1f} us",
             f"  bare INSERT+COMMIT, synchronous_commit=off   {med['raw/async']:9.1f} us"]
    for mode in ("sync", "async"):
        ratio = med[f"W1ratio/{mode}"]  # the median of the paired ratios
        target = "  target <= 1.5x: " + ("met" if ratio <= 1.5 else "MISSED") if mode == "sync" else ""
        lines.append(f"  W1 {mode:5} per step                          {med[f'W1/{mode}']:9.1f} us  "
                     f"{ratio:.2f}x the bare commit{target}")
    for mode in ("sync", "async"):
        lines.append(f"  W2 {mode:5} one process                       {med[f'W2/{mode}']:9.0f} steps/s")
    for mode in ("sync", "async"):
        lines.append(f"  W3 {mode:5} recover after SIGKILL              {med[f'W3/{mode}']:9.2f} s    "
                     f"journaled steps run again: {max(samples[f'W3ran_twice/{mode}']):.0f}")
    for mode in ("sync", "async"):
        lines.append(f"  W4 {mode:5} replay of {W4_STEPS} entries            {med[f'W4/{mode}']:9.0f} entries/s")
    for workers in (1, 2, 4):
        lines.append(f"  W2 sync, {workers} worker process{'es' if workers > 1 else '  '}             "
                     f"{med[f'W2x{workers}']:9.0f} steps/s")
    if "LG/journal" in samples:
        lines += _langgraph_lines(samples, med)
    ratio = med["W2/sync"] / med["dbos/W2"]
    lines += [
        f"  DBOS Transact W1 per step                      {med['dbos/W1']:9.1f} us",
        f"  DBOS Transact W2 (same work)                   {med['dbos/W2']:9.0f} steps/s   "
        f"journal W2 sync is {ratio:.1f}x  target >= 10x: {'met' if ratio >= 10 else 'MISSED'}",
        f"  takeover after SIGKILL of 1 of 2 workers       {med['takeover/owned']:9.2f} s to own its "
        f"{med['takeover/invocations']:.0f} invocations, {med['takeover/finished']:.2f} s to finish them; "
        f"{max(samples['takeover/repeated']):.0f} steps repeated at most  target <= 2 s: "
        + ("met" if med["takeover/owned"] <= 2 else "MISSED"),
    ]
    return "\n".join(lines)


def _langgraph_lines(samples: dict[str, list[float]], med: dict[str, float]) -> list[str]:
    """Per super-step of the LG graph, and JournalSaver's own cost against the bare commit,
    each ratio the median of the ratios within a repetition."""
    def paired(top: list[float], bottom: list[float]) -> float:
        return statistics.median(a / b for a, b in zip(top, bottom, strict=False))

    journal, memory, raw = samples["LG/journal"], samples["LG/memory"], samples["LG/raw"]
    own = [j - m for j, m in zip(journal, memory, strict=False)]
    lines = [f"  LG sync InMemorySaver per super-step           {med['LG/memory']:9.1f} us",
             f"  LG sync JournalSaver per super-step            {med['LG/journal']:9.1f} us  own cost (less "
             f"InMemorySaver) {statistics.median(own):.0f} us = {paired(own, raw):.2f}x the bare commit "
             f"({med['LG/raw']:.0f} us)  target <= 1.5x: {'met' if paired(own, raw) <= 1.5 else 'MISSED'}"]
    if "LG/postgres" in samples:
        ratio = paired(journal, samples["LG/postgres"])
        lines.append(f"  LG sync PostgresSaver per super-step           {med['LG/postgres']:9.1f} us  JournalSaver is "
                     f"{ratio:.2f}x  target <= 0.3x: {'met' if ratio <= 0.3 else 'MISSED'}")
    return lines
