"""`python -m bench.breakdown`: where the time of one live step goes, layer by layer.

Each line is measured in this process, in this run, as the median of several batches:
raw LMDB, then each layer the journal puts on top of it, then the pieces of Python
machinery a step pays for. Differences between consecutive layers are what each layer
costs. Not a workload: a map for whoever optimises the hot path.
"""

from __future__ import annotations

import argparse
import contextvars
import hashlib
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread

from journal import Append, Committer, LmdbStore, Step, decode_value, digest, encode_entry, encode_value
from journal.commit._flusher import Flusher
from journal.kv._store import KVStore

from . import _agents, _raw
from ._workloads import _open_invocations

_var: contextvars.ContextVar[Any] = contextvars.ContextVar("bench")


def _median_us(fn: Callable[[int], float], n: int, batches: int) -> float:
    return statistics.median(fn(n) / n * 1e6 for _ in range(batches))


def _timeit(stmt: Callable[[], Any]) -> Callable[[int], float]:
    def run(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            stmt()
        return time.perf_counter() - started
    return run


def _atimeit(make: Callable[[], Any]) -> Callable[[int], float]:
    async def body(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await make()
        return time.perf_counter() - started
    return lambda n: anyio.run(body, n)


async def _nothing() -> None:
    return None


def _noop() -> None:
    return None


async def _bare_steps(store: LmdbStore, invocation_id: str, epoch: int, seqs: Iterator[int], n: int) -> float:
    """What a live step cannot do without, written as one coroutine with nothing else: claim
    a seq, hash the branch position, publish the step, call the function, encode and decode
    its result, build the entry, and commit it with the lease read and the no-overwrite put.
    The gap to the `ctx.run` line is what the runtime's structure costs."""
    env, leases, entries = store.env, store._leases, store._entries
    id_bytes = invocation_id.encode()
    with store.env.begin() as txn:  # closed at once: an open reader would pin LMDB's pages
        lease_bytes = txn.get(id_bytes, db=leases)
    branch: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("branch", default=(0, 0))

    async def step(fn: Callable[[], bytes]) -> bytes:
        prev = branch.get()[1]
        seq = next(seqs)
        token = int.from_bytes(hashlib.blake2b(f"{prev}\x00step\x00step\x00None".encode(), digest_size=8).digest(), "big") >> 2
        branch.set((seq, token))
        published = _var.set((invocation_id, seq, token))
        try:
            value = fn()
        finally:
            _var.reset(published)
        raw_value = encode_value(value)
        result = decode_value(raw_value, bytes)
        data = encode_entry(Step("step", 0, time.time_ns() // 1000, raw_value, prev=prev))
        with env.begin(write=True) as txn:
            if txn.get(id_bytes, db=leases) != lease_bytes:
                raise RuntimeError("lease lost")
            if not txn.put(id_bytes + b"\x00" + seq.to_bytes(4, "big"), data, db=entries, overwrite=False):
                raise RuntimeError("seq already journaled")
        return result

    started = time.perf_counter()
    for _ in range(n):
        await step(_agents.noop)
    return time.perf_counter() - started


def _raw_fsync_us(parent: str, n: int) -> float:
    """Median µs of `env.sync(True)` alone, each after one raw put + commit."""
    took = []
    with _raw.RawLmdb(parent) as raw:
        raw.commits(10, fsync=True)
        for key in raw._keys(n):
            with raw.env.begin(write=True) as txn:
                txn.put(key, _raw.STEP_BYTES, db=raw.db)
            started = time.perf_counter()
            raw.env.sync(True)
            took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6


def _journal_fsync_us(parent: str, n: int) -> float:
    """Median µs of the store's fsyncs alone while W1 runs `n` steps in `sync` mode."""
    from runtime import Engine

    took = []
    store = LmdbStore(tempfile.mkdtemp(dir=parent))
    real_sync = store.sync

    def timed_sync() -> None:
        started = time.perf_counter()
        real_sync()
        took.append(time.perf_counter() - started)

    store.sync = timed_sync  # type: ignore[method-assign]
    try:
        anyio.run(Engine(store, durability="sync").run, _agents.steps, n)
    finally:
        store.close()
    return statistics.median(took) * 1e6


def measure(parent: str, batches: int) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []

    def add(section: str, what: str, us: float) -> None:
        rows.append((section, what, us))
        print(f"  {section:6s} {what:58s} {us:9.2f} us", flush=True)

    raw = _raw.RawLmdb(parent)
    store = LmdbStore(os.path.join(parent, "store"))
    try:
        ((invocation_id, epoch),) = _open_invocations(store, 1)
        seqs = itertools.count(1)

        def apply_one() -> None:
            store.apply_one(Append(invocation_id, epoch, [(next(seqs), _raw.STEP_BYTES)]))

        def apply_generic() -> None:
            KVStore.apply(store, [Append(invocation_id, epoch, [(next(seqs), _raw.STEP_BYTES)])])

        async def submit(mode: str, n: int) -> float:
            committer = Committer(store, mode)
            started = time.perf_counter()
            for _ in range(n):
                await committer.submit(Append(invocation_id, epoch, [(next(seqs), _raw.STEP_BYTES)]))
            return time.perf_counter() - started

        async def steps(mode: str, n: int) -> float:
            from runtime import Engine

            engine = Engine(store, durability=mode)
            outcome = await engine.run(_agents.steps, n)
            return _agents.loop_seconds.pop(outcome.id)

        # The async layers: what a step costs when nothing waits for the disk.
        add("async", "raw LMDB put + commit (no sync)", _median_us(lambda n: raw.commits(n, fsync=False), 2000, batches))
        add("async", "KVStore.apply([Append]): the path any operation can take", _median_us(_timeit(apply_generic), 2000, batches))
        add("async", "store.apply_one(Append) of one entry: a step's path", _median_us(_timeit(apply_one), 2000, batches))
        add("async", "Committer.submit(Append), async", _median_us(lambda n: anyio.run(submit, "async", n), 2000, batches))
        add("async", "ctx.run of a no-op step, async (W1)", _median_us(lambda n: anyio.run(steps, "async", n), 1000, batches))
        add("async", "the same step's indispensable work, in one function",
            _median_us(lambda n: anyio.run(_bare_steps, store, invocation_id, epoch, seqs, n), 1000, batches))

        # The pieces of Python machinery inside one live step.
        step = Step("step", 1, 1, encode_value(_agents.PAYLOAD))
        raw_value = encode_value(_agents.PAYLOAD)
        add("piece", "digest(name, args, kwargs)", _median_us(_timeit(lambda: digest("step", (), {})), 20000, batches))
        add("piece", "encode_value + decode_value of 100 bytes",
            _median_us(_timeit(lambda: decode_value(encode_value(_agents.PAYLOAD), bytes)), 20000, batches))
        add("piece", "encode_entry(Step)", _median_us(_timeit(lambda: encode_entry(step)), 20000, batches))
        add("piece", "decode_value(raw) untyped", _median_us(_timeit(lambda: decode_value(raw_value)), 20000, batches))

        def contextvar_pair() -> None:
            _var.reset(_var.set(1))

        add("piece", "ContextVar set + reset", _median_us(_timeit(contextvar_pair), 20000, batches))
        add("piece", "await of a coroutine that returns at once", _median_us(_atimeit(_nothing), 20000, batches))

        async def event_cost(n: int) -> float:
            started = time.perf_counter()
            for _ in range(n):
                anyio.Event()
            return time.perf_counter() - started

        add("piece", "anyio.Event()", _median_us(lambda n: anyio.run(event_cost, n), 20000, batches))

        # The sync layers: a step that waits for its fsync, alone (no group to share it with).
        add("sync", "raw LMDB put + commit + fsync", _median_us(lambda n: raw.commits(n, fsync=True), 100, batches))
        add("sync", "store.apply_one + LmdbStore.sync on the calling thread",
            _median_us(_timeit(lambda: (apply_one(), store.sync())), 100, batches))
        add("sync", "thread round trip, anyio.to_thread.run_sync(no-op)",
            _median_us(_atimeit(lambda: anyio.to_thread.run_sync(_noop)), 300, batches))
        flusher = Flusher(_noop)
        add("sync", "thread round trip, the committer's fsync thread (no-op)",
            _median_us(_atimeit(flusher.run), 300, batches))
        add("sync", "Committer.submit(Append), sync", _median_us(lambda n: anyio.run(submit, "sync", n), 100, batches))
        add("sync", "ctx.run of a no-op step, sync (W1)", _median_us(lambda n: anyio.run(steps, "sync", n), 100, batches))
        # The fsync alone: is the disk doing more work for the journal's store than for raw LMDB?
        add("sync", "raw: the fsync alone, after a put + commit", _raw_fsync_us(parent, 300))
        add("sync", "W1 sync in a fresh store: its fsyncs alone", _journal_fsync_us(parent, 300))
    finally:
        store.close()
        raw.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=7, help="batches per line; the median is shown")
    parser.add_argument("--dir", help="where to create the stores (default: a temporary directory)")
    args = parser.parse_args(argv)
    parent = tempfile.mkdtemp(prefix="journal-breakdown-", dir=args.dir)
    print(f"load average {os.getloadavg()[0]:.2f}")
    try:
        measure(parent, args.batches)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
