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
    Acquire,
    Append,
    Committer,
    InvocationRecord,
    LmdbStore,
    Started,
    Status,
    encode_entry,
    encode_value,
    open_store,
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


_W1_HANDLERS = {"inline": _agents.steps, "thread": _agents.threaded_steps, "async": _agents.async_steps}


async def _w1(path: str, mode: str, steps: int, fn: str = "inline") -> dict:
    async with Engine.open(path, durability=mode) as engine:
        started = time.perf_counter()
        outcome = await engine.run(_W1_HANDLERS[fn], steps)
        total = time.perf_counter() - started
    assert outcome.status == Status.COMPLETED, outcome
    loop = _agents.loop_seconds.pop(outcome.id)
    return {"us_per_step": loop / steps * 1e6, "invocation_seconds": total}


def step_overhead(parent: str, mode: str, steps: int = 1000, fn: str = "inline") -> dict:
    """W1: one invocation of `steps` sequential no-op steps returning 100 bytes; `fn` says
    how the step function runs: a plain one on the loop ("inline", W1 itself), a plain one
    on a step thread ("thread"), or an `async def` ("async")."""
    return anyio.run(_w1, fresh_dir(parent, "w1"), mode, steps, fn)


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


# -- W5: agents -------------------------------------------------------------------------------------


def agent_fleet(parent: str, mode: str = "sync", invocations: int = 10_000, steps: int = 5) -> dict:
    """W5: `invocations` concurrent agents in one process, each of `steps` steps awaiting a 20 ms model call."""
    db = fresh_dir(parent, "w5")
    report, _ = _restart("fleet", {"db": db, "mode": mode, "n": invocations, "steps": steps})
    assert report["completed"] == invocations, report
    total = invocations * steps
    ideal = steps * _agents.LLM_SECONDS  # every model call overlapping every other one's
    return {
        "seconds": report["seconds"],
        "ideal_seconds": ideal,
        "steps_per_s": total / report["seconds"],
        # What the runtime adds to each step: the wall time beyond the ideal, spread over the
        # steps (one core does all the bookkeeping), and the CPU time it spent per step.
        "overhead_us_per_step": (report["seconds"] - ideal) / total * 1e6,
        "cpu_us_per_step": report["cpu_seconds"] / total * 1e6,
        "kib_per_invocation": (report["peak_rss_kib"] - report["rss_before_kib"]) / invocations,
        # The same without the journal file's pages that LMDB's memory map made resident
        # (page cache the kernel can reclaim, not memory the invocations hold).
        "anon_kib_per_invocation": (report["peak_anon_kib"] - report["anon_before_kib"]) / invocations,
        "peak_rss_mib": report["peak_rss_kib"] / 1024,
        "group_commits": report["group_commits"],
    }


def _suspended_store(path: str, count: int) -> None:
    """`count` suspended invocations: half wait on a promise, half on a timer a day away."""
    store = LmdbStore(path)
    try:
        now = int(time.time() * 1e6)
        started = encode_entry(Started("bench._agents:agent_turns", encode_value(5), now))
        for i in range(count):
            record = InvocationRecord(f"s-{i}", "bench._agents:agent_turns", Status.SUSPENDED, now, now)
            if i % 2:
                record.wake_at = now + 86_400_000_000
            else:
                record.waiting = "approval"
            store.create(record, started)
    finally:
        store.close()


def _proc_status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _maps_store(pid: int, db: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return os.path.join(db, "data.mdb") in f.read()


def idle_worker(parent: str, suspended: int, watch_s: float = 5.0) -> dict:
    """W5: the memory of an idle `journal worker` over a store of `suspended` suspended invocations."""
    db = fresh_dir(parent, "w5-idle")
    _suspended_store(db, suspended)
    environment = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--quiet"], cwd=ROOT,
                            env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Once it has mapped the store it is in its loop, polling every 0.25 s: let it poll
        # once, then watch it for a number of polls.
        mapped = time.monotonic() + 60
        while not _maps_store(proc.pid, db):
            if proc.poll() is not None or time.monotonic() > mapped:
                err = proc.communicate()[1].decode(errors="replace") if proc.poll() is not None else ""
                raise RuntimeError(f"the worker never opened its store:\n{err}")
            time.sleep(0.01)
        time.sleep(0.25)
        cpu_before = _proc_cpu_s(proc.pid)
        samples = []
        for _ in range(int(watch_s / 0.25)):
            time.sleep(0.25)
            samples.append(_proc_status_kib(proc.pid, "VmRSS"))
        cpu = _proc_cpu_s(proc.pid) - cpu_before
        peak = _proc_status_kib(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)  # (SIGINT is ignored when the benchmark runs as a background job)
        _, err = proc.communicate(timeout=60)
    if proc.returncode not in (0, 130):
        raise RuntimeError(f"the worker failed ({proc.returncode}):\n{err.decode(errors='replace')}")
    return {
        "suspended": suspended,
        "rss_mib": samples[-1] / 1024,
        "rss_growth_kib": samples[-1] - samples[0],  # over the watch: a leak would show here
        "peak_rss_mib": peak / 1024,
        "cpu_ms_per_s": cpu / watch_s * 1e3,  # what being idle costs
    }
