"""`python -m bench.messages [--postgres] [--rounds N] [--n N] [--processes 2,4] [--only-rate]`:
talking to a running invocation.

- send -> receive: the time from `Engine.send_message` returning to the handler's
  `ctx.receive` returning, with a worker running in this process (which a send wakes at
  once) and in another process (woken by the database's `NOTIFY` on PostgreSQL, by the
  store's bell on LMDB: `journal/backends/lmdb/_wake.py`); on LMDB also, as the baseline
  measured in the same run, a worker in another process that has no bell and finds the
  message at its next poll (every `poll_interval`, 0.25 s), as before the bell;
- request round trip: `Engine.request(..., wait=)` until the handler's reply is read;
- messages per second into one store: 10,000 `Engine.send_message` calls to one invocation
  from 100 concurrent senders (the engine's group commit puts many sends in one
  transaction), beside one sender sending 1,000 one after another (each its own commit),
  the baseline of the same run; the median of three runs each; and 20,000 sends to one
  invocation from several processes (`--processes`, 2 and 4 by default) of 100 concurrent
  senders each, started together (`--only-rate`: these alone);
- `get_value` on a journal of N entries (default 100,000), from the store's index, beside
  a scan of the journal for the latest `published` entry (what reading it without the
  index costs), measured in the same run.
Prints medians (and p90 for latencies), in ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import anyio

from journal import Append, Published, Step, Store, Talk, decode_entry, digest, encode_entry, encode_value, open_store
from runtime import Context, Engine

_ROUNDS = 200


_STAMPED: set[object] = set()


async def echo(ctx: Context, log: str | None) -> None:
    """Receives on `m` for ever; stamps each receive in `log` once per process (a replay
    receives every earlier message again; stamping those too made the log, and the reading of
    it, grow with the square of the rounds), answers requests."""
    while True:
        message = await ctx.receive("m")
        if log is not None and message.id not in _STAMPED:
            _STAMPED.add(message.id)
            with open(log, "a") as f:
                f.write(f"{message.value} {time.time()}\n")
        if message.wants_reply:
            await message.reply(message.value)


def _percentiles(values: list[float]) -> str:
    values = sorted(values)
    return f"p50 {statistics.median(values):.1f} ms, p90 {values[int(len(values) * 0.9)]:.1f} ms"


async def _latency(engine: Engine, invocation_id: str, log: str, rounds: int) -> list[float]:
    out = []
    for i in range(rounds):
        sent = time.time()
        await engine.send_message(invocation_id, "m", i)
        deadline = time.monotonic() + 30
        while True:
            stamp = _stamp(log, i)
            if stamp is not None:
                out.append((stamp - sent) * 1000)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"message {i} was not received within 30 s")
            await anyio.sleep(0.0005)
    return out


def _stamp(log: str, i: int) -> float | None:
    try:
        with open(log) as f:
            text = f.read()
        # The handler may be writing its line as we read: a line without its newline is not whole yet.
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            value, at = line.split()
            if value == str(i):
                return float(at)
    except FileNotFoundError:
        pass
    return None


WORKER = textwrap.dedent("""
    import sys, anyio
    sys.path.insert(0, sys.argv[2])
    from journal import Capability, LmdbStore
    from runtime import Engine
    if sys.argv[3] == "poll":  # the baseline: a worker with no bell, which only polls
        LmdbStore.capabilities = LmdbStore.capabilities - {Capability.WORK_BELL}
    async def main():
        async with Engine.open(sys.argv[1]) as engine:
            await engine.serve()
    anyio.run(main)
""")


async def _send_receive(db: str, rounds: int, where: str) -> None:
    log = tempfile.mktemp(suffix=".log")
    async with Engine.open(db) as engine:
        invocation_id = "echo-" + where.replace(" ", "-").replace(",", "")
        await engine.start(echo, log, id=invocation_id)
        if where == "this process":
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.serve)
                latencies = await _latency(engine, invocation_id, log, rounds)
                round_trips = await _round_trips(engine, invocation_id, rounds)
                tg.cancel_scope.cancel()
        else:
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            mode = "poll" if where.endswith("polling only") else "bell"
            worker = subprocess.Popen([sys.executable, "-c", WORKER, db, root, mode],
                                      env=dict(os.environ, PYTHONPATH=root))
            try:
                # Once the worker has started (imports, opening the store): its start is not a latency.
                await engine.request(invocation_id, "m", "ready", wait=60)
                latencies = await _latency(engine, invocation_id, log, rounds)
                round_trips = await _round_trips(engine, invocation_id, rounds)
            finally:
                worker.kill()
                worker.wait()
    print(f"  send -> receive, worker in {where}: {_percentiles(latencies)}")
    print(f"  request round trip, worker in {where}: {_percentiles(round_trips)}")


async def _round_trips(engine: Engine, invocation_id: str, rounds: int) -> list[float]:
    out = []
    for i in range(rounds):
        t = time.perf_counter()
        reply = await engine.request(invocation_id, "m", -i - 1, wait=30)
        assert reply.replied and reply.value == -i - 1
        out.append((time.perf_counter() - t) * 1000)
    return out


async def _throughput(db: str, total: int, senders: int) -> float:
    """Messages per second: `total` sends to one invocation from `senders` concurrent tasks."""
    async with Engine.open(db) as engine:
        invocation_id = f"sink-{time.monotonic_ns()}"
        await engine.start(echo, None, id=invocation_id)  # never run: the messages wait in its inbox
        each = total // senders

        async def send(k: int) -> None:
            for i in range(each):
                await engine.send_message(invocation_id, "m", i, message_id=f"{k}-{i}")

        t = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(senders):
                tg.start_soon(send, k)
        return each * senders / (time.perf_counter() - t)


SENDER = textwrap.dedent("""
    import sys, time, anyio
    sys.path.insert(0, sys.argv[2])
    from runtime import Engine
    async def main(db, invocation_id, tag, total, senders):
        async with Engine.open(db) as engine:
            async def send(k):
                for i in range(total // senders):
                    await engine.send_message(invocation_id, "m", i, message_id=f"{tag}-{k}-{i}")
            print("ready", flush=True)
            sys.stdin.readline()  # go
            began = time.time()
            async with anyio.create_task_group() as tg:
                for k in range(senders):
                    tg.start_soon(send, k)
            print(began, time.time(), flush=True)
    anyio.run(main, sys.argv[1], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
""")


def _throughput_processes(db: str, total: int, processes: int, senders: int) -> float:
    """Messages per second: `total` sends to one invocation from `processes` processes of
    `senders` concurrent tasks each, all started at once once every one has opened the store;
    from the first one's start to the last one's end."""
    invocation_id = f"sink-{time.monotonic_ns()}"

    async def start() -> None:
        async with Engine.open(db) as engine:
            await engine.start(echo, None, id=invocation_id)

    anyio.run(start)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    children = [subprocess.Popen([sys.executable, "-c", SENDER, db, root, invocation_id, f"p{p}",
                                  str(total // processes), str(senders)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, PYTHONPATH=root)) for p in range(processes)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        spans = []
        for child in children:
            assert child.stdout is not None
            began, ended = child.stdout.readline().split()
            spans.append((float(began), float(ended)))
            child.wait()
    finally:
        for child in children:
            child.kill()
    return total // processes * processes / (max(e for _, e in spans) - min(b for b, _ in spans))


def _throughputs(db: str, processes: list[int]) -> None:
    many = statistics.median(anyio.run(_throughput, db, 10_000, 100) for _ in range(3))
    one = statistics.median(anyio.run(_throughput, db, 1_000, 1) for _ in range(3))
    print(f"  messages into one store: {many:,.0f}/s from 100 concurrent senders, {one:,.0f}/s from one sender "
          f"({many / one:.1f}x)")
    for count in processes:
        rate = statistics.median(_throughput_processes(db, 20_000, count, 100) for _ in range(3))
        print(f"  messages into one store: {rate:,.0f}/s from {count} processes of 100 concurrent senders each")


def _get_value(store: Store, n: int) -> None:
    from journal.testing import acquire, create

    create(store, "long")
    epoch, _ = acquire(store, "long", now=time.time_ns() // 1000)
    batch = 5000
    for start in range(1, n, batch):
        entries = []
        talk = Talk()
        for seq in range(start, min(n, start + batch)):
            if seq % 100 == 0:
                raw = encode_value({"done": seq})
                entries.append((seq, encode_entry(Published("progress", seq, raw))))
                talk.published.append(("progress", seq, seq, bytes(raw)))
            else:
                entries.append((seq, encode_entry(Step("s", digest("s"), seq, encode_value(seq)))))
        store.apply_one(Append("long", epoch, entries, talk=talk))

    def indexed() -> object:
        return store.published("long", "progress")["progress"]

    def scanned() -> object:
        found = None
        for _, data in store.entries("long"):
            entry = decode_entry(data)
            if isinstance(entry, Published) and entry.name == "progress":
                found = entry
        return found

    fast = _median_ms(indexed, 200)
    slow = _median_ms(scanned, 5)
    print(f"  get_value on a journal of {store.entry_count('long'):,} entries: {fast:.3f} ms from the index, "
          f"{slow:.0f} ms scanning the journal ({slow / fast:,.0f}x)")


def _median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _rates(postgres: bool, processes: list[int]) -> None:
    if postgres:
        from .pgserver import PgServer

        server = PgServer().start()
        try:
            print("PostgreSQL:")
            _throughputs(server.new_database(), processes)
        finally:
            server.stop()
        return
    with tempfile.TemporaryDirectory() as tmp:
        print("LMDB:")
        _throughputs(os.path.join(tmp, "db"), processes)


def main() -> None:
    args = sys.argv[1:]
    n = int(args[args.index("--n") + 1]) if "--n" in args else 100_000
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else _ROUNDS
    processes = [int(p) for p in args[args.index("--processes") + 1].split(",")] if "--processes" in args else [2, 4]
    if "--only-rate" in args:  # the messages per second alone
        _rates("--postgres" in args, processes)
        return
    if "--postgres" in args:
        from .pgserver import PgServer

        server = PgServer().start()
        try:
            db = server.new_database()
            print(f"PostgreSQL ({rounds} rounds):")
            for where in ("this process", "another process"):
                anyio.run(_send_receive, db, rounds, where)
            _throughputs(server.new_database(), processes)
            store = open_store(server.new_database())
            try:
                _get_value(store, n)
            finally:
                store.close()
        finally:
            server.stop()
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"LMDB ({rounds} rounds):")
        for where in ("this process", "another process", "another process, polling only"):
            anyio.run(_send_receive, os.path.join(tmp, "db"), rounds, where)
        _throughputs(os.path.join(tmp, "db-many"), processes)
        store = open_store(os.path.join(tmp, "db-long"))
        try:
            _get_value(store, n)
        finally:
            store.close()


if __name__ == "__main__":
    main()
