"""`python -m bench.startup`: how long the `journal` command takes to start.

Runs `journal --help` and `journal ls` (over a store of 100 invocations) many times each,
beside a bare `python -c pass`, `import runtime` and `import runtime.langgraph`, and prints
the median wall time and the median CPU time (user + system, from the child's rusage). On
a shared machine the CPU time is the steadier figure: other processes lengthen the wall
time of a run, not the work it does. With `--langgraph` it also restarts a LangGraph
process on JournalSaver and on SqliteSaver (`bench/_lg_restart.py`), the two alternating.
For a look at what each import costs: `python -X importtime -c 'import runtime'`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _journal_script() -> list[str]:
    script = shutil.which("journal", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "cli"]


def _store(parent: str, count: int = 100) -> str:
    from journal import InvocationRecord, LmdbStore, Started, Status, encode_entry, encode_value

    path = os.path.join(parent, "db")
    with LmdbStore(path) as store:
        now = int(time.time() * 1e6)
        for i in range(count):
            record = InvocationRecord(f"inv-{i}", "agents:triage", Status.COMPLETED, now, now)
            store.create(record, encode_entry(Started("agents:triage", encode_value({"n": i}), now)))
    return path


def measure(argv: list[str], runs: int) -> dict:
    walls, cpus = [], []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - started)
        cpus.append(usage.ru_utime + usage.ru_stime)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}")
    return {"wall_ms": statistics.median(walls) * 1e3, "cpu_ms": statistics.median(cpus) * 1e3,
            "min_wall_ms": min(walls) * 1e3}


def _langgraph_restarts(parent: str, runs: int) -> dict[str, dict]:
    """A LangGraph process restarting on each saver, the savers alternating run by run so
    that a slow moment of the machine falls on both."""
    paths = {"journal": os.path.join(parent, "lg-journal"), "sqlite": os.path.join(parent, "lg.sqlite")}
    argv = {name: [sys.executable, "-m", "bench._lg_restart", name, path] for name, path in paths.items()}
    for command in argv.values():
        measure(command, 1)  # creates the thread
    results: dict[str, list[dict]] = {name: [] for name in argv}
    for _ in range(runs):
        for name, command in argv.items():
            results[name].append(measure(command, 1))
    return {f"LangGraph restart, {'JournalSaver' if name == 'journal' else 'SqliteSaver'}": {
        key: statistics.median(r[key] for r in rows) if key != "min_wall_ms" else min(r[key] for r in rows)
        for key in ("wall_ms", "cpu_ms", "min_wall_ms")} for name, rows in results.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    parser.add_argument("--langgraph", action="store_true", help="also restart a LangGraph process on each saver")
    args = parser.parse_args(argv)
    parent = tempfile.mkdtemp(prefix="journal-startup-")
    try:
        db = _store(parent)
        journal = _journal_script()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "journal --help": [*journal, "--help"],
            "journal ls (100 invocations)": [*journal, "ls", "--db", db],
            "import runtime": [sys.executable, "-c", "import runtime"],
            "import runtime.langgraph": [sys.executable, "-c", "import runtime.langgraph"],
        }
        print(f"{'command':32s} {'wall (median)':>14s} {'wall (min)':>11s} {'CPU (median)':>13s}")
        for name, command in commands.items():
            r = measure(command, args.runs)
            print(f"{name:32s} {r['wall_ms']:11.0f} ms {r['min_wall_ms']:8.0f} ms {r['cpu_ms']:10.0f} ms")
        if args.langgraph:
            for name, r in _langgraph_restarts(parent, args.runs).items():
                print(f"{name:32s} {r['wall_ms']:11.0f} ms {r['min_wall_ms']:8.0f} ms {r['cpu_ms']:10.0f} ms")
        print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs each")
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
