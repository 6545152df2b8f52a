"""The workloads. Each function takes a parent directory and returns one sample (a dict).

A1/A2 measure the storage layer alone (`Committer.submit` of one `Append`), W1-W4 the whole
runtime through `Engine` and `ctx.run`. Every sample uses a fresh store directory.
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import anyio

from journal import (
    Acquire, Append, Committer, InvocationRecord, LmdbStore, Started, Status, encode_entry, encode_value, open_store,
)
from runtime import Engine

from . import _agents
from ._raw import STEP_BYTES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("sync", "async", "exit")


def fresh_dir(parent: str, name: str) -> str:
    return tempfile.mkdtemp(prefix=f"{name}-", dir=parent)


# -- A1/A2: the append path of the store ---------------------------------------------------------


def _open_invocations(store: LmdbStore, count: int) -> list[tuple[str, int]]:
    owned = []
    for i in range(count):
        invocation_id = f"appender-{i}"
        record = InvocationRecord(invocation_id, "bench:appender", Status.PENDING, 1, 1)
        store.create(record, encode_entry(Started("bench:appender", encode_value(None), 1)))
        epoch, _ = store.apply_one(Acquire(invocation_id, "bench", "host", os.getpid(), 3_600_000_000, 1))
        owned.append((invocation_id, epoch))
    return owned


async def _appends(path: str, mode: str, appenders: int, per_appender: int) -> dict:
    store = LmdbStore(path)
    try:
        committer = Committer(store, mode)
        owned = _open_invocations(store, appenders)

        async def append(invocation_id: str, epoch: int) -> None:
            for seq in range(1, per_appender + 1):
                await committer.submit(Append(invocation_id, epoch, [(seq, STEP_BYTES)]))

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for invocation_id, epoch in owned:
                tg.start_soon(append, invocation_id, epoch)
        elapsed = time.perf_counter() - started
        total = appenders * per_appender
        return {
            "us_per_append": elapsed / total * 1e6,
            "appends_per_s": total / elapsed,
            "appends": total,
            "fsyncs": committer.batches,
        }
    finally:
        store.close()


def append_path(parent: str, mode: str, appends: int) -> dict:
    """A1: one appender, `appends` sequential `Committer.submit(Append)` calls."""
    return anyio.run(_appends, fresh_dir(parent, "a1"), mode, 1, appends)


def group_commit(parent: str, appenders: int, per_appender: int) -> dict:
    """A2: `appenders` concurrent tasks appending in `sync` mode."""
    return anyio.run(_appends, fresh_dir(parent, "a2"), "sync", appenders, per_appender)


# -- W1/W2: steps through the Engine ------------------------------------------------------------------


async def _w1(path: str, mode: str, steps: int) -> dict:
    async with Engine.open(path, durability=mode) as engine:
        started = time.perf_counter()
        outcome = await engine.run(_agents.steps, steps)
        total = time.perf_counter() - started
    assert outcome.status == Status.COMPLETED, outcome
    loop = _agents.loop_seconds.pop(outcome.id)
    return {"us_per_step": loop / steps * 1e6, "invocation_seconds": total}


def step_overhead(parent: str, mode: str, steps: int = 1000) -> dict:
    """W1: one invocation of `steps` sequential no-op steps returning 100 bytes."""
    return anyio.run(_w1, fresh_dir(parent, "w1"), mode, steps)


async def _w2(path: str, mode: str, invocations: int, steps: int) -> dict:
    async with Engine.open(path, durability=mode) as engine:
        statuses = []

        async def one(i: int) -> None:
            statuses.append((await engine.run(_agents.steps, steps, id=f"w2-{i}")).status)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(invocations):
                tg.start_soon(one, i)
        elapsed = time.perf_counter() - started
        fsyncs = engine.committer.batches
    assert statuses == [Status.COMPLETED] * invocations, statuses
    return {"steps_per_s": invocations * steps / elapsed, "seconds": elapsed, "group_commits": fsyncs}


def throughput(parent: str, mode: str, invocations: int = 50, steps: int = 20) -> dict:
    """W2: `invocations` concurrent invocations of `steps` steps each, start to finish."""
    return anyio.run(_w2, fresh_dir(parent, "w2"), mode, invocations, steps)


# -- W3/W4: real processes, SIGKILL, restart -------------------------------------------------------------


def _child(command: str, args: dict, **env: str) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "bench._child", command, json.dumps(args)],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        pass_fds=tuple(int(v) for k, v in env.items() if k.endswith("_FD")),
    )


def _wait_readable(fd: int, proc: subprocess.Popen, what: str, timeout: float = 120.0) -> None:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        proc.kill()
        _, err = proc.communicate()
        raise RuntimeError(f"the child never reached {what}:\n{err.decode(errors='replace')}")


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, proc.returncode


def _restart(command: str, args: dict) -> tuple[dict, float]:
    started = time.perf_counter()
    proc = _child(command, args)
    out, err = proc.communicate(timeout=300)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"restarted child failed ({proc.returncode}):\n{err.decode(errors='replace')}")
    return json.loads(out.decode().splitlines()[-1]), wall


def _journaled_steps(db: str, invocation_id: str) -> int:
    store = open_store(db)
    try:
        return store.entry_count(invocation_id) - 1  # entry 0 is the start
    finally:
        store.close()


def crash_recovery(parent: str, mode: str, steps: int = 200, kill_after: int = 100, db: str | None = None) -> dict:
    """W3: `steps` steps each appending a line; SIGKILL once line `kill_after` is written; restart.
    `db`: the store (default: a fresh LMDB directory)."""
    work = fresh_dir(parent, "w3")
    db = db or work
    path = os.path.join(work, "side-effects.txt")
    args = {"db": db, "mode": mode, "id": "w3", "path": path, "n": steps}
    read_fd, write_fd = os.pipe()
    try:
        proc = _child("run-lines", args, BENCH_HOLD_AT=str(kill_after - 1), BENCH_SIGNAL_FD=str(write_fd))
        os.close(write_fd)
        _wait_readable(read_fd, proc, f"line {kill_after}")
        _kill(proc)
    finally:
        os.close(read_fd)
    with open(path) as f:
        before = len(f.read().splitlines())
    journaled = _journaled_steps(db, "w3")
    report, wall = _restart("recover", {"db": db, "mode": mode})
    assert report["statuses"] == ["completed"], report
    with open(path) as f:
        counts = collections.Counter(int(line) for line in f.read().splitlines())
    return {
        "restart_to_done_s": wall,
        "recover_s": report["seconds"],
        "lines_before_kill": before,
        "journaled_before_kill": journaled,
        "ran_twice": sum(c - 1 for c in counts.values() if c > 1),
        "journaled_ran_twice": sum(1 for i, c in counts.items() if c > 1 and i < journaled),
        "missing": steps - len(counts),
    }


def long_resume(parent: str, mode: str, steps: int = 5000, db: str | None = None) -> dict:
    """W4: `steps` journaled steps then a promise; SIGKILL; restart, resolve, run to completion."""
    db = db or fresh_dir(parent, "w4")
    args = {"db": db, "mode": mode, "id": "w4", "n": steps}
    proc = _child("run-long", args)
    _wait_readable(proc.stdout.fileno(), proc, "its promise")
    first = json.loads(proc.stdout.readline())
    assert first["status"] == "suspended", first
    _kill(proc)
    report, wall = _restart("resolve-and-resume", args)
    assert report["completed"], report
    entries = steps + 1  # the start entry and every step are replayed
    return {
        "restart_to_done_s": wall,
        "in_process_s": report["seconds"],
        "resume_s": report["resume_seconds"],
        "replay_s": report["replay_seconds"],
        "entries": entries,
        "entries_per_s": entries / report["replay_seconds"],
        "first_life_s": first["seconds"],
    }
