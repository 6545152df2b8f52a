"""Failover, restart and lost-commit figures for journal on PostgreSQL: `python -m bench.failover`.

Scenarios (`--only` picks some, comma-separated):

- `patroni-sync`, `patroni-async`: a three-node Patroni cluster with etcd, on loopback
  (`bench/patroni.py`), with synchronous replication (`synchronous_mode` and
  `synchronous_mode_strict`) or without. Two `journal worker` processes on the three-host
  URL run a steady stream of invocations (a starter keeps a backlog pending) while the
  leader's Patroni and PostgreSQL are SIGKILLed, `--failovers` times; each time the old
  leader is started again and rejoins (pg_rewind) before the next.
- `restart`: one server, stopped with `-m immediate` and started again after an outage of
  0.5 s or 5 s (alternately), `--restarts` times, under the same load.
- `in-doubt`: one server behind a proxy that drops the answer of every seventh commit or
  so (`bench/pgproxy.py`) until `--cuts` answers were lost, with workers that count each
  `LeaseLost` and "already journaled" their store reports (`bench/_failover_worker.py`).

What it reports, from the workers' log (`bench/_failover_agents.py`) and the journal:

- acknowledged steps lost: steps whose commit `ctx.run` returned (an `ack` line with the
  step's token) that the journal does not hold at the end;
- repeated step executions (`start` lines beyond one per step), against the steps that were
  in flight at the faults (started, not acknowledged, when the fault came);
- invocations completed, failed and diverged;
- per fault: the server side's time to accept writes again (Patroni's leader change: from
  the SIGKILL to a node that answers `pg_is_in_recovery() = false`; for `restart`, from
  the start to the first accepted connection), and journal's time from then to its first
  commit there (the first acknowledgement of a step not acknowledged before);
- lines on the workers' stderr (tracebacks, the store's lines about reaching its server).

Prints a summary and writes every figure as JSON (`--json PATH`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = str(Path(__file__).resolve().parent.parent)
HANDLER = f"steady={Path(__file__).resolve().parent / '_failover_agents.py'}:steady"
SCENARIOS = ("patroni-sync", "patroni-async", "restart", "in-doubt")


class Load:
    """The steady load: a starter keeping `backlog` invocations pending, and worker processes."""

    def __init__(self, url: str, work_dir: str, *, steps: int = 10, work: float = 0.05, backlog: int = 16) -> None:
        self.url = url
        self.dir = work_dir
        self.log = os.path.join(work_dir, "steps.log")
        open(self.log, "w").close()
        self.job = {"log": self.log, "steps": steps, "work": work}
        self.backlog = backlog
        self.started: list[str] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._starter = threading.Thread(target=lambda: anyio.run(self._start_forever), daemon=True)

    async def _start_forever(self) -> None:
        from journal import PostgresStore, Status
        from runtime import Engine

        store = PostgresStore(self.url, reconnect_for=None)
        try:
            async with Engine.open(store=store) as engine:
                while not self._stop.is_set():
                    pending = len(await engine.committer.read(store.list, Status.PENDING))
                    for _ in range(max(0, self.backlog - pending)):
                        invocation_id = f"b{len(self.started):06}"
                        await engine.start("steady", self.job, id=invocation_id)
                        self.started.append(invocation_id)
                    await anyio.sleep(0.05)
        finally:
            store.close()

    def start(self, *, workers: int = 2, concurrency: int = 4, url: str | None = None,
              counting: bool = False) -> None:
        self._starter.start()
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for i in range(workers):
            err = open(os.path.join(self.dir, f"worker{i}.err"), "wb")
            if counting:
                args = {"db": url or self.url, "concurrency": concurrency, "out": os.path.join(self.dir, f"counts{i}")}
                argv = [sys.executable, "-m", "bench._failover_worker", json.dumps(args)]
            else:
                argv = [sys.executable, "-m", "cli", "worker", "--db", url or self.url, "--handler", HANDLER,
                        "--concurrency", str(concurrency), "-q"]
            self.workers.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err))

    def stop_starting(self) -> None:
        self._stop.set()
        self._starter.join(timeout=120)

    def drain(self, statuses: Any, timeout: float = 600) -> dict[str, int]:
        """Wait until every invocation started has finished; their statuses, counted."""
        deadline = time.monotonic() + timeout
        while True:
            seen = statuses()
            done = {i: s for i, s in seen.items() if s in ("completed", "failed", "diverged", "cancelled")}
            if len(done) >= len(self.started) or time.monotonic() > deadline:
                return dict(collections.Counter(seen.values()))
            time.sleep(0.2)

    def stop(self) -> list[str]:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [Path(self.dir, f"worker{i}.err").read_text(errors="replace") for i in range(len(self.workers))]

    def lines(self) -> list[tuple[float, str, str, int, str]]:
        out = []
        for text in Path(self.log).read_text().splitlines():
            at, kind, invocation_id, step, token, _ = text.split()
            out.append((float(at), kind, invocation_id, int(step), token))
        return out

    def acks_since(self, since: float) -> int:
        return sum(1 for at, kind, *_ in self.lines() if kind == "ack" and at >= since)


def _statuses(url: str) -> dict[str, str]:
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            return {bytes(i).decode(): s for i, s in conn.execute("SELECT invocation_id, status FROM journal.status")}
    except psycopg.Error:
        return {}


def _journal_tokens(url: str) -> set[str]:
    import psycopg

    from journal import Step, decode_entry, decode_value

    tokens = set()
    with psycopg.connect(url, autocommit=True) as conn:
        for (raw,) in conn.execute("SELECT v FROM journal.entries"):
            entry = decode_entry(bytes(raw))
            if isinstance(entry, Step) and entry.value is not None:
                value = decode_value(entry.value)
                if isinstance(value, str):
                    tokens.add(value)
    return tokens


def analyse(load: Load, faults: list[dict[str, float]], url: str, statuses: dict[str, int],
            stderr: list[str]) -> dict[str, Any]:
    """The figures of one scenario (see the module's docstring)."""
    lines = load.lines()
    first_ack: dict[str, float] = {}
    acked_at: dict[tuple[str, int], float] = {}
    starts: collections.Counter[tuple[str, int]] = collections.Counter()
    start_times: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    for at, kind, invocation_id, step, token in lines:
        key = (invocation_id, step)
        if kind == "start":
            starts[key] += 1
            start_times[key].append(at)
        else:
            first_ack.setdefault(token, at)
            acked_at[key] = min(at, acked_at.get(key, at))
    held = _journal_tokens(url)
    checked = _check(url)
    lost = [t for t in first_ack if t not in held]
    in_flight = 0
    for fault in faults:
        at = fault["fault"]
        in_flight += sum(1 for key, times in start_times.items()
                         if min(times) < at and acked_at.get(key, float("inf")) >= at)
        back = fault.get("writes")
        if back is not None:
            after = [t for t in first_ack.values() if t >= back]
            fault["first_commit"] = min(after) - back if after else float("nan")
        if fault.get("promoted") is not None:
            after = [t for t in first_ack.values() if t >= fault["promoted"]]
            fault["first_commit_after_promotion"] = min(after) - fault["promoted"] if after else float("nan")
    server = [f["writes"] - f["fault"] for f in faults if f.get("writes") is not None]
    promoted = [f["promoted"] - f["fault"] for f in faults if f.get("promoted") is not None]
    ours = [f["first_commit"] for f in faults if f.get("first_commit") is not None]
    after_promotion = [f["first_commit_after_promotion"] for f in faults if "first_commit_after_promotion" in f]
    return {
        "journal_first_commit_after_promotion_seconds": _spread(after_promotion),
        "promoted_seconds": _spread(promoted),
        "faults": len(faults),
        "steps_acknowledged": len(first_ack),
        "acknowledged_steps_lost": len(lost),
        "step_executions": sum(starts.values()),
        "repeated_executions": sum(starts.values()) - len(starts),
        "in_flight_at_faults": in_flight,
        "invocations_started": len(load.started),
        "statuses": statuses,
        "server_seconds": _spread(server),
        "journal_first_commit_seconds": _spread(ours),
        "check_ok": checked.get("ok"),
        "check_problems": len(checked.get("problems", [])),
        "tracebacks": sum(text.count("Traceback") for text in stderr),
        "store_lines": sum(text.count("cannot be reached") + text.count("reachable again") for text in stderr),
        "per_fault": faults,
    }


def _check(url: str) -> dict[str, Any]:
    """`journal check --json` on the store, once every invocation has finished."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "cli", "check", "--db", url, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {"ok": False, "problems": [done.stderr.strip() or f"exit status {done.returncode}"]}


def _spread(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v == v]
    if not values:
        return None
    return {"median": statistics.median(values), "max": max(values), "min": min(values), "n": len(values)}


# -- the scenarios -------------------------------------------------------------------------


def patroni(synchronous: bool, failovers: int) -> dict[str, Any]:
    import psycopg

    from journal import PostgresStore

    from .patroni import PatroniCluster

    cluster = PatroniCluster(synchronous=synchronous).start()
    work = tempfile.mkdtemp(prefix="jpf-failover-")
    try:
        with psycopg.connect(cluster.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        url = cluster.url("bench")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE probe (at timestamptz)")  # what `_commits` writes
        PostgresStore(url).close()  # the schema, before the workers race to create it
        load = Load(url, work)
        load.start()
        faults: list[dict[str, float]] = []
        for n in range(failovers):
            cluster.wait_healthy(timeout=300)
            _wait_for_acks(load, 40)
            leader = cluster.leader()
            assert leader is not None
            at = time.time()
            leader.kill()
            promoted, node = _promoted(cluster, leader)
            writes = _commits(node)
            faults.append({"fault": at, "promoted": promoted, "writes": writes})
            print(f"  failover {n + 1}/{failovers}: {leader.name} killed, {node.name} promoted after "
                  f"{promoted - at:.2f} s, commits after {writes - at:.2f} s", file=sys.stderr, flush=True)
            leader.start()  # rejoins as a replica, rewound
        cluster.wait_healthy(timeout=300)
        load.stop_starting()
        statuses = load.drain(lambda: _statuses(url))
        stderr = load.stop()
        report = analyse(load, faults, url, statuses, stderr)
        logs = [Path(node.dir, f).read_text(errors="replace") for node in cluster.nodes for f in os.listdir(node.dir)
                if f.startswith("patroni.log")]
        report["rewinds"] = {"run": sum(t.count("pg_rewind exit code=") for t in logs),  # (one per rewind: "in progress" repeats)
                             "succeeded": sum(t.count("pg_rewind exit code=0") for t in logs)}
        return report
    finally:
        cluster.stop()


def _wait_for_acks(load: Load, n: int) -> None:
    """Until the load has acknowledged `n` more steps: the workers are at work again."""
    since, deadline = time.time(), time.monotonic() + 300
    while load.acks_since(since) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("the workers stopped acknowledging steps")
        time.sleep(0.05)


def _promoted(cluster: Any, dead: Any) -> tuple[float, Any]:
    """When a node other than `dead` first answers as a primary (polled every 10 ms), and which."""
    import psycopg

    others = [node for node in cluster.nodes if node is not dead]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for node in others:
            try:
                with psycopg.connect(node.url("bench"), autocommit=True, connect_timeout=1) as conn:
                    if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                        return time.time(), node
            except psycopg.Error:
                pass
        time.sleep(0.01)
    raise RuntimeError("no node became a primary within 300 s")


def _commits(node: Any) -> float:
    """When a commit on `node` first returns (with synchronous replication, once a standby
    streams from it again): the moment the cluster accepts writes."""
    import psycopg

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(node.url("bench"), autocommit=True, connect_timeout=1) as conn:
                conn.execute("INSERT INTO probe VALUES (now())")
                return time.time()
        except psycopg.Error:
            time.sleep(0.01)
    raise RuntimeError(f"{node.name} took no commit within 300 s")


def restart(restarts: int) -> dict[str, Any]:
    import psycopg

    from journal import PostgresStore

    from .pgserver import PgServer

    server = PgServer(name="jpf-restart").start()
    work = tempfile.mkdtemp(prefix="jpf-restart-")
    try:
        url = server.new_database()
        PostgresStore(url).close()
        load = Load(url, work)
        load.start()
        faults: list[dict[str, float]] = []
        for n in range(restarts):
            _wait_for_acks(load, 40)
            outage = 0.5 if n % 2 == 0 else 5.0
            at = time.time()
            server.stop_server("immediate")
            time.sleep(outage)  # the outage itself: the server is down this long
            server.start_again()
            while True:
                try:
                    psycopg.connect(url, connect_timeout=1).close()
                    break
                except psycopg.Error:
                    time.sleep(0.01)
            faults.append({"fault": at, "writes": time.time(), "outage": outage})
            print(f"  restart {n + 1}/{restarts} after {outage} s down", file=sys.stderr, flush=True)
        load.stop_starting()
        statuses = load.drain(lambda: _statuses(url))
        stderr = load.stop()
        report = analyse(load, faults, url, statuses, stderr)
        for outage in (0.5, 5.0):
            report[f"first_commit_after_{outage:g}s_down"] = _spread(
                [f["first_commit"] for f in faults if f["outage"] == outage])
        return report
    finally:
        server.stop()


def in_doubt(cuts: int) -> dict[str, Any]:
    from journal import PostgresStore

    from .pgproxy import CommitCutter
    from .pgserver import PgServer

    server = PgServer(name="jpf-indoubt").start()
    proxy = CommitCutter(str(server.dir), server.port).start()
    work = tempfile.mkdtemp(prefix="jpf-indoubt-")
    try:
        name = server.create_database()
        url = server.url(name)
        PostgresStore(url).close()
        load = Load(url, work)
        load.start(url=proxy.url(name), counting=True)
        while proxy.cuts < cuts:
            proxy.cut_after(7)
            before, deadline = proxy.cuts, time.monotonic() + 120
            while proxy.cuts == before:
                if time.monotonic() > deadline:
                    raise RuntimeError("no commit went through the proxy for 120 s")
                time.sleep(0.01)
        load.stop_starting()
        statuses = load.drain(lambda: _statuses(url))
        stderr = load.stop()
        report = analyse(load, [], url, statuses, stderr)
        counts: collections.Counter[str] = collections.Counter()
        for i in range(len(load.workers)):
            counts.update(json.loads(Path(work, f"counts{i}").read_text()))
        report["cuts"] = proxy.cuts
        report["cut_statements"] = dict(collections.Counter(
            "steps' INSERT" if sql.lstrip().upper().startswith(b"INSERT") else sql.decode()[:20]
            for sql in proxy.cut))
        report["false_lease_lost"] = counts.get("LeaseLost", 0)
        report["false_already_journaled"] = counts.get("already journaled", 0)
        return report
    finally:
        proxy.stop()
        server.stop()


def _summary(name: str, r: dict[str, Any]) -> str:
    lines = [f"{name}: {r['faults'] or r.get('cuts', 0)} faults, {r['invocations_started']} invocations "
             f"({', '.join(f'{k} {v}' for k, v in sorted(r['statuses'].items()))})",
             f"  acknowledged steps lost: {r['acknowledged_steps_lost']} of {r['steps_acknowledged']}",
             f"  repeated step executions: {r['repeated_executions']} (steps in flight at the faults: "
             f"{r['in_flight_at_faults']}), of {r['step_executions']} executions"]
    for key, title in (("promoted_seconds", "a replica promoted (pg_is_in_recovery false)"),
                       ("server_seconds", "server side accepting writes again"),
                       ("journal_first_commit_seconds", "journal's first commit after that"),
                       ("journal_first_commit_after_promotion_seconds", "journal's first commit after the promotion")):
        s = r.get(key)
        if s:
            lines.append(f"  {title}: median {s['median']:.2f} s, max {s['max']:.2f} s (n={s['n']})")
    for key in ("rewinds", "cuts", "cut_statements", "false_lease_lost", "false_already_journaled",
                "first_commit_after_0.5s_down", "first_commit_after_5s_down"):
        if key in r:
            lines.append(f"  {key}: {r[key]}")
    lines.append(f"  journal check: {'clean' if r.get('check_ok') else 'PROBLEMS'} "
                 f"({r.get('check_problems', 0)} problems)")
    lines.append(f"  worker stderr: {r['tracebacks']} tracebacks, {r['store_lines']} lines about the store")
    return "\n".join(lines)


def main() -> None:
    import logging

    logging.getLogger("journal").addHandler(logging.NullHandler())  # the starter's store: the workers tell it
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--failovers", type=int, default=50)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--cuts", type=int, default=100)
    parser.add_argument("--json", metavar="PATH", help="write every figure there")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name in args.only.split(","):
        print(f"{name} ...", file=sys.stderr, flush=True)
        if name in ("patroni-sync", "patroni-async"):
            results[name] = patroni(name == "patroni-sync", args.failovers)
        elif name == "restart":
            results[name] = restart(args.restarts)
        elif name == "in-doubt":
            results[name] = in_doubt(args.cuts)
        else:
            parser.error(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        print(_summary(name, results[name]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
