"""The physical limit: raw LMDB, driven the way the journal drives it, with nothing on top.

Every benchmark compares against these figures measured in the same run, on the same
disk, with the same entry bytes, so machine noise and disk speed cancel out of the ratios.
The environment is opened with the journal's own flags (sync off, metasync off): a raw
"fsynced commit" is a put, a commit and one `env.sync(True)` (one fdatasync), exactly the
flush the journal's `sync` mode makes.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from typing import Any

import lmdb

from journal import Step, encode_entry, encode_value

# The bytes one no-op step returning 100 bytes journals (what W1 writes per step).
STEP_BYTES = encode_entry(Step("step", 0x1234_5678_9ABC_DEF0, time.time_ns() // 1000, encode_value(b"x" * 100)))


def entry_key(prefix: bytes, seq: int) -> bytes:
    return prefix + b"\x00" + seq.to_bytes(4, "big")


class RawLmdb:
    """A bare LMDB environment in a fresh temporary directory (removed by `close`)."""

    def __init__(self, parent: str | None = None, *, sync: bool = False) -> None:
        self.path = tempfile.mkdtemp(prefix="raw-lmdb-", dir=parent)
        # sync=True, metasync=True is LMDB's own durable commit (two fdatasyncs); the
        # journal's flags are sync=False, metasync=False plus an explicit env.sync(True).
        self.env = lmdb.open(
            self.path, map_size=1 << 30, max_dbs=8, sync=sync, metasync=sync, readahead=False,
        )
        self.db = self.env.open_db(b"entries")
        self._next = 0

    def _keys(self, n: int) -> list[bytes]:
        start, self._next = self._next, self._next + n
        return [entry_key(b"raw-invocation", seq) for seq in range(start, start + n)]

    def commits(self, n: int, *, fsync: bool, value: bytes = STEP_BYTES) -> float:
        """`n` transactions of one put each; seconds taken."""
        keys = self._keys(n)
        env, db = self.env, self.db
        started = time.perf_counter()
        for key in keys:
            with env.begin(write=True) as txn:
                txn.put(key, value, db=db)
            if fsync:
                env.sync(True)
        return time.perf_counter() - started

    def group_commits(self, txns: int, per_txn: int, value: bytes = STEP_BYTES) -> float:
        """`txns` transactions of `per_txn` puts, each followed by one fsync; seconds taken."""
        keys = self._keys(txns * per_txn)
        env, db = self.env, self.db
        started = time.perf_counter()
        for t in range(txns):
            with env.begin(write=True) as txn:
                for key in keys[t * per_txn:(t + 1) * per_txn]:
                    txn.put(key, value, db=db)
            env.sync(True)
        return time.perf_counter() - started

    def fill_journal(self, n: int) -> bytes:
        """Write an `n`-entry journal of one invocation in one transaction; return its key prefix."""
        prefix = b"raw-journal-%d" % self._next
        self._next += 1
        with self.env.begin(write=True) as txn:
            for seq in range(n):
                txn.put(entry_key(prefix, seq), STEP_BYTES, db=self.db)
        return prefix

    def read_journal(self, prefix: bytes) -> int:
        """One ordered cursor scan over a journal, copying out every value; the count read."""
        count = 0
        with self.env.begin() as txn, txn.cursor(db=self.db) as cursor:
            cursor.set_range(prefix)
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                bytes(value)
                count += 1
        return count

    def scan(self, n: int) -> float:
        """Seconds for one cursor scan over a fresh `n`-entry journal."""
        prefix = self.fill_journal(n)
        started = time.perf_counter()
        count = self.read_journal(prefix)
        elapsed = time.perf_counter() - started
        assert count == n
        return elapsed

    def close(self) -> None:
        self.env.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> RawLmdb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def commit_us(n: int = 5000, *, parent: str | None = None) -> float:
    """Microseconds per raw put+commit without sync."""
    with RawLmdb(parent) as raw:
        raw.commits(200, fsync=False)  # warm the map and the page cache
        return raw.commits(n, fsync=False) / n * 1e6


def fsynced_commit_us(n: int = 200, *, parent: str | None = None) -> float:
    """Microseconds per raw put+commit followed by one fsync (the journal's `sync` flush)."""
    with RawLmdb(parent) as raw:
        raw.commits(10, fsync=True)
        return raw.commits(n, fsync=True) / n * 1e6


def native_sync_commit_us(n: int = 100, *, parent: str | None = None) -> float:
    """Microseconds per commit of an environment opened sync=True, metasync=True (LMDB's default)."""
    with RawLmdb(parent, sync=True) as raw:
        raw.commits(5, fsync=False)
        return raw.commits(n, fsync=False) / n * 1e6


def group_commit_per_s(per_txn: int, txns: int = 40, *, parent: str | None = None) -> float:
    """Puts per second at `per_txn` puts per fsynced transaction."""
    with RawLmdb(parent) as raw:
        raw.group_commits(3, per_txn)
        return txns * per_txn / raw.group_commits(txns, per_txn)


def asyncio_group_commit_per_s(tasks: int, rounds: int = 20, *, parent: str | None = None) -> float:
    """Puts per second when `tasks` asyncio tasks each put one entry, wait for the fsynced
    transaction holding everyone's puts, and go again: the least any Python event loop does
    per durable append from concurrent tasks (a task wake-up and a put). Optimistic on
    purpose: no journal code, no lease check, and the fsync runs on the loop's own thread,
    so no hand-off to another thread is paid."""

    async def run(raw: RawLmdb, rounds: int) -> float:
        keys = iter(raw._keys(tasks * rounds))
        env, db = raw.env, raw.db
        state: dict[str, Any] = {"batch": None}

        async def append() -> None:
            batch = state["batch"]
            if batch is not None:  # join the batch its leader is about to commit
                batch[0].append(next(keys))
                await batch[1].wait()
                return
            batch = state["batch"] = ([next(keys)], asyncio.Event())
            await asyncio.sleep(0)  # let the runnable tasks join
            state["batch"] = None
            with env.begin(write=True) as txn:
                for key in batch[0]:
                    txn.put(key, STEP_BYTES, db=db)
            env.sync(True)
            batch[1].set()

        async def task() -> None:
            for _ in range(rounds):
                await append()

        started = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(tasks)))
        return tasks * rounds / (time.perf_counter() - started)

    with RawLmdb(parent) as raw:
        asyncio.run(run(raw, 3))
        return asyncio.run(run(raw, rounds))


def scan_per_s(n: int = 5000, *, parent: str | None = None) -> float:
    """Entries per second read by one ordered cursor scan of an `n`-entry journal."""
    with RawLmdb(parent) as raw:
        raw.scan(n)
        return n / raw.scan(n)


if __name__ == "__main__":  # a quick look at this machine's limits
    print(f"commit (no sync)      {commit_us():8.2f} us")
    print(f"commit + fsync        {fsynced_commit_us():8.2f} us")
    print(f"LMDB sync=True commit {native_sync_commit_us():8.2f} us")
    print(f"100 puts/fsynced txn  {group_commit_per_s(100):10,.0f} puts/s")
    print(f"asyncio floor, 100 tasks {asyncio_group_commit_per_s(100):10,.0f} puts/s")
    print(f"scan of 5,000         {scan_per_s():10,.0f} entries/s")
