"""The agent-framework part of `python -m bench` (`--only FW`): what journal adds to a Pydantic AI
agent's turn, against DBOS doing the same; how fast a step's chunks reach a follower in another
process and what emitting costs the step; how long a killed 200-turn run takes to be live again.

- Turn overhead: the `TURNS`-turn agent of `bench/_frameworks_agents.py` (a turn is one model
  request and two tool calls), run plain and then durably, back to back, in one process:
  journal on LMDB (`sync`) and on PostgreSQL (fsync on, `sync`), and Pydantic AI's
  `DBOSDurability` on SQLite and on PostgreSQL (in a process of its own: DBOS is a singleton,
  which runs its own plain baseline). "Added per durable operation" is the durable run's time
  less the plain run's, over its durable operations (`3 * TURNS + 1`). It is compared with one
  synced commit of the same store, measured in the same repetition: a raw LMDB put, commit and
  fsync, or a bare `INSERT ...; COMMIT` with `synchronous_commit=on`.
- Streaming: a process runs a step that emits a chunk every `GAP` s stamped with the time it
  was sent; this process follows with `Engine.stream` and notes when each arrives (the clock
  is the host's own). Then, in this process, a step emits `CPU_CHUNKS` chunks in a row: the CPU
  time its thread spent per chunk (`time.thread_time`), and the whole process's (the sender
  thread's writes included).
- Replay: the 200-turn run is SIGKILLed in its last model request; a new process resumes it.
  From the new process's start (its `Popen`) to the moment the last request runs live again,
  and, within that, from the handler's first line (the imports done) to it. Pydantic AI's own
  import time is measured beside it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any

import anyio

from . import _raw, _workloads
from ._frameworks_agents import LIMITS, TURNS, agent, journal_turns, stamped_chunks

OPERATIONS = 3 * TURNS + 1  # two tool calls and a model request per turn, and the answer
CHUNKS, GAP = 200, 0.005
CPU_CHUNKS = 20_000


# -- turn overhead -----------------------------------------------------------------------------------


async def _journal_run(db: str) -> dict[str, float]:
    """The plain run, the durable run and the plain run again, back to back (a shared machine
    drifts: the durable run is compared with the mean of its two neighbours); and, of the
    durable run, the time spent in journal's steps outside Pydantic AI's operation bodies."""
    from runtime import Engine
    from runtime.pydantic_ai import _backend

    plain = agent("plain")
    started = time.perf_counter()
    await plain.run("go", usage_limits=LIMITS)
    plain_before = time.perf_counter() - started
    inside = {"execute": 0.0, "body": 0.0}
    execute = _backend.StepBackend.execute

    async def measured(self: Any, *, body: Any, **kwargs: Any) -> object:
        async def timed_body() -> object:
            began = time.perf_counter()
            try:
                return await body()
            finally:
                inside["body"] += time.perf_counter() - began

        began = time.perf_counter()
        try:
            return await execute(self, body=timed_body, **kwargs)
        finally:
            inside["execute"] += time.perf_counter() - began

    _backend.StepBackend.execute = measured  # type: ignore[method-assign]
    try:
        async with Engine.open(db, durability="sync") as engine:
            started = time.perf_counter()
            out = await engine.run(journal_turns, "go", id="turns")
            durable_s = time.perf_counter() - started
    finally:
        _backend.StepBackend.execute = execute  # type: ignore[method-assign]
    assert out.status == "completed", out
    started = time.perf_counter()
    await plain.run("go", usage_limits=LIMITS)
    plain_after = time.perf_counter() - started
    return {"plain_s": (plain_before + plain_after) / 2, "durable_s": durable_s,
            "steps_us": (inside["execute"] - inside["body"]) / OPERATIONS * 1e6}


DBOS_RUN = textwrap.dedent("""
    import asyncio, json, sys, time
    from dbos import DBOS
    from bench._frameworks_agents import LIMITS, agent
    url = sys.argv[1]
    DBOS(config={"name": "journal-bench-frameworks", "system_database_url": url, "run_admin_server": False,
                 "log_level": "WARNING"})
    durable = agent("dbos")
    plain = agent("plain")

    @DBOS.workflow()
    async def turns(prompt: str) -> str:
        return (await durable.run(prompt, usage_limits=LIMITS)).output

    DBOS.launch()
    async def plain_run():
        started = time.perf_counter()
        await plain.run("go", usage_limits=LIMITS)
        return time.perf_counter() - started
    async def main():
        before = await plain_run()
        started = time.perf_counter()
        await turns("go")
        durable_s = time.perf_counter() - started
        return {"plain_s": (before + await plain_run()) / 2, "durable_s": durable_s}
    try:
        print(json.dumps(asyncio.run(main())))
    finally:
        DBOS.destroy()
""")


def _dbos_run(url: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", DBOS_RUN, url], capture_output=True, text=True,
                         cwd=_workloads.ROOT, env=_env(), timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"DBOS failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.splitlines()[-1])
    return result["plain_s"], result["durable_s"]


def _added_us(plain_s: float, durable_s: float) -> float:  # (of one durable run against its plain neighbours)
    return (durable_s - plain_s) / OPERATIONS * 1e6


# -- streaming ---------------------------------------------------------------------------------------

EMITTER = textwrap.dedent("""
    import json, sys, anyio
    from runtime import Engine
    from bench._frameworks_agents import stamped_chunks
    async def main():
        async with Engine.open(sys.argv[1]) as engine:
            print((await engine.resume(sys.argv[2], stamped_chunks)).status, flush=True)
    anyio.run(main)
""")


async def _latencies(db: str, inv: str) -> list[float]:
    """Seconds from each chunk's emit (in another process) to its arrival at `Engine.stream` here."""
    from runtime import Chunk, Engine

    arrivals: list[float] = []
    async with Engine.open(db) as engine:
        await engine.start(stamped_chunks, {"chunks": CHUNKS, "gap": GAP}, id=inv)

        async def follow() -> None:
            async for item in engine.stream(inv):
                if isinstance(item, Chunk):
                    arrivals.append(time.time() - float(item.data))  # type: ignore[arg-type]

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await _ready(db)
            proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
                [sys.executable, "-c", EMITTER, db, inv], cwd=_workloads.ROOT, env=_env(),
                stdout=subprocess.PIPE, text=True))
            out, _ = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=300))
            assert out.strip() == "completed", out
    return arrivals


async def _ready(db: str) -> None:
    """Until the follower listens (PostgreSQL; LMDB keeps a running step's chunks anyway)."""
    if not db.startswith("postgresql://"):
        return
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        with psycopg.connect(db, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN journal_live_%'").fetchone()
        if row and row[0]:
            return
        assert time.monotonic() < deadline, "the follower never listened"
        await anyio.sleep(0.01)


async def _emit_cpu(db: str) -> dict[str, float]:
    """CPU per emitted chunk, of the step's thread and of the whole process (sender thread included)."""
    from runtime import Engine, current_step

    measured: dict[str, float] = {}

    async def handler(ctx: Any) -> int:
        def step() -> int:
            emit = current_step().emit
            emit("warm-up ")  # (the first chunk opens the channel: not what a chunk costs)
            thread, process = time.thread_time(), time.process_time()
            for _ in range(CPU_CHUNKS):
                emit("token ")
            measured["thread_us"] = (time.thread_time() - thread) / CPU_CHUNKS * 1e6
            measured["process_us"] = (time.process_time() - process) / CPU_CHUNKS * 1e6
            return CPU_CHUNKS

        result: int = await ctx.run("emit", step)
        return result

    async with Engine.open(db) as engine:
        process = time.process_time()
        await engine.run(handler, id="cpu")
        measured["with_flush_us"] = (time.process_time() - process) / CPU_CHUNKS * 1e6
    return measured


# -- replay after a kill ---------------------------------------------------------------------------------

RESUME = textwrap.dedent("""
    import sys, time, json
    begun = time.time()
    import anyio
    from runtime import Engine
    from bench._frameworks_agents import journal_turns
    imported = time.time()
    async def main():
        async with Engine.open(sys.argv[1]) as engine:
            print(json.dumps({"begun": begun, "imported": imported,
                              "status": str((await engine.resume("turns", journal_turns)).status)}), flush=True)
    anyio.run(main)
""")

FIRST = textwrap.dedent("""
    import sys, anyio
    from runtime import Engine
    from bench._frameworks_agents import journal_turns
    async def main():
        async with Engine.open(sys.argv[1]) as engine:
            await engine.run(journal_turns, "go", id="turns")
    anyio.run(main)
""")


def _replay(parent: str) -> dict[str, float]:
    work = tempfile.mkdtemp(prefix="fw-replay-", dir=parent)
    db, mark, hold = os.path.join(work, "db"), os.path.join(work, "live"), os.path.join(work, "hold")
    first = subprocess.Popen([sys.executable, "-c", FIRST, db], cwd=_workloads.ROOT,
                             env=_env(BENCH_LIVE_MARK=mark, BENCH_HOLD=hold))
    _workloads_wait(lambda: os.path.exists(mark), first, "the first run's last model request")
    first.send_signal(signal.SIGKILL)
    first.wait()
    os.unlink(mark)
    spawned = time.time()
    resumed = subprocess.Popen([sys.executable, "-c", RESUME, db], cwd=_workloads.ROOT, stdout=subprocess.PIPE,
                               text=True, env=_env(BENCH_LIVE_MARK=mark, BENCH_HOLD=hold))
    _workloads_wait(lambda: os.path.exists(mark) and os.path.getsize(mark) > 0, resumed, "the resumed run to be live")
    with open(mark) as f:
        live = float(f.read())
    open(hold, "w").close()
    out, _ = resumed.communicate(timeout=300)
    done = json.loads(out.splitlines()[-1])
    assert done["status"] == "completed", done
    imports = subprocess.run([sys.executable, "-c", "import time; t = time.time(); import pydantic_ai; "
                              "print(time.time() - t)"], capture_output=True, text=True, env=_env(), timeout=120)
    return {"spawn_to_live_s": live - spawned, "begun_to_live_s": live - done["begun"],
            "imported_to_live_s": live - done["imported"], "pydantic_ai_import_s": float(imports.stdout)}


def _workloads_wait(done: Callable[[], bool], proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 600
    while not done():
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited ({proc.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)  # sampling a file: the figure's resolution


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=_workloads.ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)


# -- the run -------------------------------------------------------------------------------------------------


def measure(reps: int, parent: str, log: Callable[[str], None]) -> dict[str, list[float]]:
    from . import _postgres
    from .pgserver import PgServer

    server = PgServer(fsync=True).start()
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    try:
        for rep in range(reps):
            log(f"repetition {rep + 1}: agent turns (journal, DBOS; LMDB, SQLite, PostgreSQL)")
            before = _raw.fsynced_commit_us(parent=parent)
            run = anyio.run(_journal_run, tempfile.mkdtemp(prefix="fw-", dir=parent))
            after = _raw.fsynced_commit_us(parent=parent)
            add("lmdb/commit_us", (before + after) / 2)
            add("lmdb/plain_s", run["plain_s"])
            add("lmdb/added_us", _added_us(run["plain_s"], run["durable_s"]))
            add("lmdb/steps_us", run["steps_us"])
            add("lmdb/ratio", samples["lmdb/added_us"][-1] / samples["lmdb/commit_us"][-1])
            sqlite = os.path.join(tempfile.mkdtemp(prefix="fw-dbos-", dir=parent), "dbos.sqlite")
            add("sqlite/dbos_added_us", _added_us(*_dbos_run(f"sqlite:///{sqlite}")))
            add("lmdb/vs_dbos", samples["lmdb/added_us"][-1] / samples["sqlite/dbos_added_us"][-1])

            before = _postgres.raw_commit_us(server.new_database(), True)
            run = anyio.run(_journal_run, server.new_database())
            after = _postgres.raw_commit_us(server.new_database(), True)
            add("pg/commit_us", (before + after) / 2)
            add("pg/added_us", _added_us(run["plain_s"], run["durable_s"]))
            add("pg/steps_us", run["steps_us"])
            add("pg/ratio", samples["pg/added_us"][-1] / samples["pg/commit_us"][-1])
            add("pg/dbos_added_us", _added_us(*_dbos_run(server.new_database())))
            add("pg/vs_dbos", samples["pg/added_us"][-1] / samples["pg/dbos_added_us"][-1])

            log(f"repetition {rep + 1}: streaming (LMDB, PostgreSQL)")
            for kind, db in (("lmdb", os.path.join(tempfile.mkdtemp(prefix="fw-st-", dir=parent), "db")),
                             ("pg", server.new_database())):
                latencies = anyio.run(_latencies, db, "stream")
                add(f"{kind}/latency_p50_ms", statistics.median(latencies) * 1e3)
                add(f"{kind}/latency_p95_ms", statistics.quantiles(latencies, n=20)[-1] * 1e3)
                add(f"{kind}/chunks_received", len(latencies))
                cpu = anyio.run(_emit_cpu, db if kind == "pg" else db + "-cpu")
                add(f"{kind}/emit_thread_us", cpu["thread_us"])
                add(f"{kind}/emit_process_us", cpu["process_us"])
                add(f"{kind}/emit_with_flush_us", cpu["with_flush_us"])

            log(f"repetition {rep + 1}: replay of {TURNS} turns after a kill")
            for key, value in _replay(parent).items():
                add(f"replay/{key}", value)
    finally:
        server.stop()
    return samples


def rows(samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Each figure with its target, if it has one, for the summary and the exit code."""
    med = {k: statistics.median(v) for k, v in samples.items()}
    out = []

    def row(name: str, value: float, unit: str, target: str = "", met: bool | None = None, note: str = "") -> None:
        out.append({"workload": "FW", "metric": name, "median": value, "unit": unit, "target": target or None,
                    "met": met, "note": note})

    row(f"LMDB: added per durable operation ({TURNS} turns)", med["lmdb/added_us"], "us",
        "<= 1.5x a synced LMDB commit", med["lmdb/ratio"] <= 1.5,
        f"{med['lmdb/ratio']:.2f}x the synced commit ({med['lmdb/commit_us']:.0f} us); of it in journal's steps "
        f"{med['lmdb/steps_us']:.0f} us, the rest Pydantic AI's durable path; the plain run {med['lmdb/plain_s']:.2f} s")
    row("SQLite: DBOSDurability added per durable operation", med["sqlite/dbos_added_us"], "us")
    row("LMDB journal / SQLite DBOS, added per operation", med["lmdb/vs_dbos"], "x", "<= 0.2",
        med["lmdb/vs_dbos"] <= 0.2)
    row("PostgreSQL: added per durable operation", med["pg/added_us"], "us", note=(
        f"{med['pg/ratio']:.2f}x a bare synced INSERT+COMMIT ({med['pg/commit_us']:.0f} us); of it in journal's "
        f"steps {med['pg/steps_us']:.0f} us"))
    row("PostgreSQL: DBOSDurability added per durable operation", med["pg/dbos_added_us"], "us")
    row("PostgreSQL journal / DBOS, added per operation", med["pg/vs_dbos"], "x", "<= 0.2", med["pg/vs_dbos"] <= 0.2)
    for kind, name in (("lmdb", "LMDB"), ("pg", "PostgreSQL")):
        row(f"{name}: emit to follower in another process, p50", med[f"{kind}/latency_p50_ms"], "ms", "<= 20 ms",
            med[f"{kind}/latency_p50_ms"] <= 20,
            f"p95 {med[f'{kind}/latency_p95_ms']:.1f} ms; {med[f'{kind}/chunks_received']:.0f} of {CHUNKS} received")
        row(f"{name}: CPU in the step per emitted chunk", med[f"{kind}/emit_thread_us"], "us", "<= 5 us",
            med[f"{kind}/emit_thread_us"] <= 5,
            f"the process's, sender thread included: {med[f'{kind}/emit_with_flush_us']:.1f} us")
    row(f"replay of a {TURNS}-turn run after SIGKILL: process start to live", med["replay/spawn_to_live_s"], "s",
        "<= 0.5 s", med["replay/spawn_to_live_s"] <= 0.5,
        f"of which Python and imports {med['replay/spawn_to_live_s'] - med['replay/imported_to_live_s']:.2f} s "
        f"(importing pydantic_ai alone: {med['replay/pydantic_ai_import_s']:.2f} s); from the imports done to live: "
        f"{med['replay/imported_to_live_s'] * 1e3:.0f} ms")
    return out


def render(samples: dict[str, list[float]]) -> str:
    lines = ["", f"Agent frameworks (Pydantic AI {_version('pydantic-ai-slim')}, DBOS {_version('dbos')}; medians):"]
    for r in rows(samples):
        unit = r["unit"]
        value = (f"{r['median']:,.1f} us" if unit == "us" else f"{r['median']:.2f}x" if unit == "x"
                 else f"{r['median']:.1f} ms" if unit == "ms" else f"{r['median']:.2f} s")
        verdict = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        target = f"  target {r['target']}: {verdict}" if r["target"] else ""
        note = f"  ({r['note']})" if r["note"] else ""
        lines.append(f"  {r['metric']:62s} {value:>12s}{target}{note}")
    return "\n".join(lines)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"
