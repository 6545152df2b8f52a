"""The processes W3 and W4 kill and restart: `python -m bench._child COMMAND JSON`.

Each prints one JSON line on stdout with its own timings (seconds, measured after the
interpreter and the imports are up, so the parent can tell start-up time from work).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import anyio

from journal import Status
from runtime import Engine

from . import _agents


async def _run_lines(args: dict) -> dict:
    # W3, first life: runs until the parent kills it while step `hold` is in flight.
    async with Engine.open(args["db"], durability=args["mode"]) as engine:
        await engine.run(_agents.lines, _agents.LinesInput(args["path"], args["n"]), id=args["id"])
    return {"error": "the process should have been killed"}


async def _recover(args: dict) -> dict:
    # W3, second life: what a restarted worker does first.
    started = time.perf_counter()
    async with Engine.open(args["db"], durability=args["mode"]) as engine:
        outcomes = await engine.recover()
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "statuses": [str(o.status) for o in outcomes]}


async def _run_long(args: dict) -> dict:
    # W4, first life: journal `n` steps, reach the promise, report, then wait to be killed.
    started = time.perf_counter()
    async with Engine.open(args["db"], durability=args["mode"]) as engine:
        outcome = await engine.run(_agents.long_then_promise, args["n"], id=args["id"])
        _emit({"seconds": time.perf_counter() - started, "status": str(outcome.status)})
        await anyio.sleep(120)
    return {"error": "the process should have been killed"}


async def _resolve_and_resume(args: dict) -> dict:
    # W4, second life: deliver the promise and finish the invocation.
    started = time.perf_counter()
    async with Engine.open(args["db"], durability=args["mode"]) as engine:
        opened = time.perf_counter()
        await engine.resolve(args["id"], "go", "approved")
        resolved = time.perf_counter()
        outcome = await engine.resume(args["id"])
        done = time.perf_counter()
    return {
        "seconds": done - started,
        "open_seconds": opened - started,
        "resolve_seconds": resolved - opened,
        "resume_seconds": done - resolved,
        # From the resume call to the handler asking for the promise: reading, decoding and
        # replaying every journaled entry.
        "replay_seconds": _agents.reached_promise[args["id"]] - resolved,
        "status": str(outcome.status),
        "completed": outcome.status == Status.COMPLETED,
    }


def _memory_kib(field: str) -> int:
    """A line of /proc/self/status, in KiB: VmRSS (resident now) or VmHWM (its peak)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


async def _fleet(args: dict) -> dict:
    # W5: `n` invocations in flight at once in this process, from a fresh interpreter so that
    # its peak memory is theirs. The collector is tuned as `journal worker` tunes it (the
    # process is the engine's); "collector": "default" keeps CPython's thresholds, as a
    # program embedding the library without tuning them would.
    if args.get("collector", "worker") == "worker":
        from cli._common import own_the_collector  # here: the other workloads' start-up is measured

        own_the_collector()
    async with Engine.open(args["db"], durability=args["mode"]) as engine:
        await engine.run(_agents.agent_turns, 1, id="warm-up")  # imports, caches, the first fsync
        try:  # restart the peak from here (Linux): the peak should be the fleet's, not start-up's
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        before, before_anon = _memory_kib("VmRSS"), _memory_kib("RssAnon")
        # The kernel keeps no peak of anonymous memory alone (the heap, without the pages of
        # the journal's memory-mapped file): sample it beside the run.
        peak_anon, done = [before_anon], threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                peak_anon[0] = max(peak_anon[0], _memory_kib("RssAnon"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        statuses: list[str] = []

        async def one(i: int) -> None:
            statuses.append(str((await engine.run(_agents.agent_turns, args["steps"], id=f"w5-{i}")).status))

        started, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for i in range(args["n"]):
                tg.start_soon(one, i)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        peak = _memory_kib("VmHWM")
        done.set()
        sampler.join()
        commits = engine.committer.batches
    return {"seconds": wall, "cpu_seconds": cpu, "rss_before_kib": before, "peak_rss_kib": peak,
            "anon_before_kib": before_anon, "peak_anon_kib": peak_anon[0],
            "group_commits": commits, "completed": statuses.count("completed")}


async def _pg_worker(args: dict) -> dict:
    # A worker on PostgreSQL given the benchmark's handlers: "ready", wait for a line, serve.
    handlers = {"steps": _agents.steps, "paced": _agents.paced}
    async with Engine.open(args["db"], durability=args.get("mode", "sync"), handlers=handlers) as engine:
        _emit({"ready": True})
        await anyio.to_thread.run_sync(sys.stdin.readline)
        started = time.perf_counter()
        await engine.serve(concurrency=args.get("concurrency", 16), idle_exit=args.get("idle_exit", True))
    return {"seconds": time.perf_counter() - started}


_COMMANDS = {
    "pg-worker": _pg_worker,
    "run-lines": _run_lines,
    "recover": _recover,
    "run-long": _run_long,
    "resolve-and-resume": _resolve_and_resume,
    "fleet": _fleet,
}


def _emit(report: dict) -> None:
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def main() -> None:
    command, args = sys.argv[1], json.loads(sys.argv[2])
    _emit(anyio.run(_COMMANDS[command], args))


if __name__ == "__main__":
    main()
