"""`python -m bench.http_load`: the HTTP API under load, on loopback only and bounded.

A `journal serve` process runs the approval handler of bench/_http_agents.py; CLIENTS
concurrent clients (asyncio tasks, each with its own keep-alive connection) take these
phases over INVOCATIONS invocations, each phase timed on its own:

1. start:   `POST /invocations` for every invocation (starts/s, latency);
2. status:  `GET /invocations/ID` for each while the server's workers run them (latency);
3. resolve: `POST /invocations/ID/promises/approval` for each (latency);
4. result:  `GET /invocations/ID/result?wait=...` until each has completed.

Then it checks, from the store and the handler's side-effect log, that every invocation
completed exactly once: none lost, none duplicated. Targets (issue 16): >= 1,000 starts/s
and p99 < 100 ms for `GET /invocations/ID`. Exits 1 if a check fails or the run overruns
its time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "bench" / "_http_agents.py"


class Client:
    """HTTP/1.1 with keep-alive over one asyncio stream: a thin client, so that the
    figures measure the server rather than the client library."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n"
                "Content-Type: application/json\r\n\r\n")
        self.writer.write(head.encode() + data)
        assert self.reader is not None
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length) if length else b""
        return status, (json.loads(payload) if payload else None)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(name: str, seconds: float, latencies: list[float]) -> dict:
    return {"phase": name, "requests": len(latencies), "seconds": round(seconds, 3),
            "requests_per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(_percentile(latencies, 0.50) * 1e3, 2),
            "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 2),
            "max_ms": round(max(latencies) * 1e3, 2)}


async def _phase(clients: list[Client], ids: list[str], call) -> tuple[float, list[float]]:
    """Run `call(client, id)` for every id, each client taking the next id when free."""
    queue = collections.deque(ids)
    latencies: list[float] = []

    async def worker(client: Client) -> None:
        while queue:
            invocation_id = queue.popleft()
            began = time.perf_counter()
            await call(client, invocation_id)
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients))
    return time.perf_counter() - began, latencies


async def _load(port: int, count: int, concurrency: int, log: str) -> tuple[list[dict], dict[str, str]]:
    clients = [Client(port) for _ in range(concurrency)]
    ids = [f"load-{n:05d}" for n in range(count)]
    statuses: dict[str, str] = {}

    async def start(client: Client, invocation_id: str) -> None:
        n = int(invocation_id.split("-")[1])
        status, body = await client.request("POST", "/invocations", {
            "handler": "approve", "id": invocation_id, "input": {"n": n, "log": log}})
        if status != 201:
            raise RuntimeError(f"POST /invocations {invocation_id} answered {status}: {body}")

    async def status(client: Client, invocation_id: str) -> None:
        code, body = await client.request("GET", f"/invocations/{invocation_id}")
        if code != 200:
            raise RuntimeError(f"GET /invocations/{invocation_id} answered {code}: {body}")

    async def resolve(client: Client, invocation_id: str) -> None:
        # `early`: the invocation may not have reached its wait yet, and a promise it has not asked
        # for is refused unless it is meant to be delivered ahead.
        code, body = await client.request("POST", f"/invocations/{invocation_id}/promises/approval",
                                          {"value": True, "early": True})
        if code != 200:
            raise RuntimeError(f"resolving {invocation_id} answered {code}: {body}")

    async def result(client: Client, invocation_id: str) -> None:
        while True:
            code, body = await client.request("GET", f"/invocations/{invocation_id}/result?wait=30")
            if code != 200:
                raise RuntimeError(f"the result of {invocation_id} answered {code}: {body}")
            statuses[invocation_id] = body["status"]
            if body["status"] in ("completed", "failed", "cancelled"):
                return

    phases = []
    try:
        for name, call in (("start", start), ("status", status), ("resolve", resolve), ("result", result)):
            seconds, latencies = await _phase(clients, ids, call)
            phases.append(_summary(name, seconds, latencies))
            print(json.dumps(phases[-1]), file=sys.stderr)
    finally:
        for c in clients:
            c.close()
    return phases, statuses


def _verify(db: str, log: str, ids_expected: int, statuses: dict[str, str]) -> dict:
    from journal import LmdbStore, Status, decode_entry, kind_of

    with LmdbStore(db, readonly=True) as store:
        records = store.list()
        completed = [r for r in records if r.status == Status.COMPLETED]
        finals = collections.Counter()
        for r in records:
            kinds = [kind_of(decode_entry(data)) for _, data in store.entries(r.id)]
            finals[kinds.count("completed")] += 1
    effects = collections.Counter(Path(log).read_text().split()) if os.path.exists(log) else collections.Counter()
    return {
        "invocations": len(records), "completed": len(completed),
        "completed_entries_exactly_once": finals.get(1, 0),
        "effects": sum(effects.values()), "distinct_effects": len(effects),
        "duplicated_effects": sum(1 for c in effects.values() if c > 1),
        "ok": (len(records) == len(completed) == ids_expected == finals.get(1, 0) == len(effects)
               == sum(effects.values()) and all(s == "completed" for s in statuses.values())),
    }


def _wait_until_healthy(port: int, server: subprocess.Popen, deadline: float) -> None:
    # "serving on" comes before the store is open; until then the API answers 503.
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("journal serve did not answer /healthz with 200")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--invocations", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--workers", type=int, default=64, help="journal serve --workers")
    parser.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    parser.add_argument("--time-limit", type=float, default=600.0, help="abort after this many seconds")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="http-load-")
    db, log, out = os.path.join(tmp, "db"), os.path.join(tmp, "effects.log"), os.path.join(tmp, "serve.log")
    command = [sys.executable, "-m", "cli", "serve", "--db", db, "--http", "127.0.0.1:0", "-q",
               "--workers", str(args.workers), "--durability", args.durability, "--handler", f"approve={AGENT}:approval"]
    with open(out, "wb") as f:
        server = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"serving on http://127\.0\.0\.1:(\d+)", Path(out).read_text())):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"journal serve did not start: {Path(out).read_text()}")
            time.sleep(0.05)
        port = int(found.group(1))
        _wait_until_healthy(port, server, deadline)
        began = time.perf_counter()
        try:
            phases, statuses = asyncio.run(asyncio.wait_for(
                _load(port, args.invocations, args.clients, log), args.time_limit))
        except TimeoutError:
            print(f"overran the time limit of {args.time_limit} s", file=sys.stderr)
            return 1
        total = time.perf_counter() - began
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    checks = _verify(db, log, args.invocations, statuses)
    report = {"command": "python -m bench.http_load " + " ".join(argv if argv is not None else sys.argv[1:]),
              "invocations": args.invocations, "clients": args.clients, "workers": args.workers,
              "durability": args.durability, "total_seconds": round(total, 2), "phases": phases, "checks": checks,
              "cpus": os.cpu_count(), "load_average_after": os.getloadavg()[0]}
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if checks["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
