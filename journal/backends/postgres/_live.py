"""Live output on PostgreSQL: `NOTIFY` with the chunks as payload, and the chunks of running
steps kept in an unlogged table for a follower that comes late or back.

Each invocation has a channel of its own (`journal_live_` and a hash of its id), so a
follower is told only about the invocation it follows. The sender's thread sends a batch
as one `SELECT pg_notify(...), ...` in autocommit with `synchronous_commit = off`: the
commit never waits for a WAL flush, and no row is written. A payload holds as many chunks
as fit under PostgreSQL's limit of 8000 bytes (each chunk base64, comma-separated).

Followers in one process share one listening connection, driven by a thread that waits on
its socket and a wake-up pipe (for `LISTEN` and `UNLISTEN` as followers come and go), reads
the notifications libpq has received and hands each follower its chunks. A follower begins
after its `LISTEN` is in force, then reads what the table keeps of the invocation's running
steps (`journal.live_chunks`: UNLOGGED, so never written to the WAL nor synced, as LMDB's
live environment is never synced), ahead of what the notifications bring; `LiveFeed`
drops what it receives twice. Each step keeps at least its last `MAX_STEP_BYTES`, and its
chunks go once it commits (`end_step`). A lost connection is opened again with backoff and
every channel listened to again; what was sent meanwhile reaches a follower only through
the table, when it follows again.
"""

from __future__ import annotations

import base64
import hashlib
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..._live import MAX_STEP_BYTES, Bell, Ended, LiveFollower, Sender, Sent, drain, pack, unpack

_PAYLOAD_LIMIT = 7900  # PostgreSQL's is 8000 bytes
_TABLE = "journal.live_chunks"
_CREATE = (f"CREATE UNLOGGED TABLE IF NOT EXISTS {_TABLE} (invocation_id bytea NOT NULL, seq integer NOT NULL, "
           "epoch integer NOT NULL, attempt integer NOT NULL, number integer NOT NULL, v bytea NOT NULL, "
           "PRIMARY KEY (invocation_id, seq, epoch, attempt, number))")
# A step's oldest chunks beyond MAX_STEP_BYTES go, looked at every this many chunks it sends.
_TRIM_EVERY = 64
_TRIM = (f"DELETE FROM {_TABLE} c USING (SELECT epoch, attempt, number, sum(length(v)) OVER (ORDER BY epoch DESC, "
         f"attempt DESC, number DESC) AS kept FROM {_TABLE} WHERE invocation_id = %s AND seq = %s) t "
         "WHERE c.invocation_id = %s AND c.seq = %s AND c.epoch = t.epoch AND c.attempt = t.attempt "
         "AND c.number = t.number AND t.kept > %s")


def ensure_table(conn: Any) -> None:
    """Create the table of kept chunks if it is not there (two processes may race: one wins)."""
    try:
        conn.execute(_CREATE)
    except Exception:  # noqa: BLE001 - a concurrent creation: it exists now
        conn.execute(_CREATE)


def channel_name(invocation_id: str) -> str:
    return "journal_live_" + hashlib.blake2b(invocation_id.encode(), digest_size=8).hexdigest()


class PostgresChannel:
    """`LiveChannel` of a PostgreSQL store; `connect` opens a connection in autocommit mode."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._conn: Any = None  # the sender's (used under the sender's lock only)
        self._sender = Sender(self._write, "journal-live-pg")
        self._listener: _Listener | None = None
        self._lock = threading.Lock()
        self._sent: dict[tuple[str, int], int] = {}  # chunks sent per running step, for trimming

    def publish(self, chunk: Sent) -> None:
        self._sender.put(chunk)

    def flush(self) -> None:
        self._sender.flush()

    def end_step(self, invocation_id: str, seq: int) -> None:
        self._sender.put(Ended(invocation_id, seq))

    def _write(self, batch: list[Sent | Ended]) -> None:
        by_channel: dict[str, list[str]] = {}
        rows: list[Any] = []
        ended: list[Ended] = []
        trim: list[tuple[str, int]] = []
        for item in batch:
            if isinstance(item, Sent):
                packed = pack(item)
                by_channel.setdefault(channel_name(item.invocation_id), []).append(base64.b64encode(packed).decode())
                rows += (item.invocation_id.encode(), item.seq, item.epoch, item.attempt, item.number, packed)
                key = (item.invocation_id, item.seq)
                self._sent[key] = self._sent.get(key, 0) + 1
                if self._sent[key] % _TRIM_EVERY == 0:
                    trim.append(key)
            else:
                ended.append(item)
                self._sent.pop((item.invocation_id, item.seq), None)
        if not by_channel and not ended:
            return
        params: list[str] = []
        for channel, encoded in by_channel.items():
            payload: list[str] = []
            size = 0
            for one in encoded:
                if payload and size + len(one) + 1 > _PAYLOAD_LIMIT:
                    params += (channel, ",".join(payload))
                    payload, size = [], 0
                payload.append(one)
                size += len(one) + 1
            params += (channel, ",".join(payload))
        sql = "SELECT " + ", ".join(["pg_notify(%s, %s)"] * (len(params) // 2))
        try:
            if self._conn is None:
                self._conn = self._connect()
                self._conn.execute("SET synchronous_commit = off")
                ensure_table(self._conn)
            if rows:  # kept first, then told: a follower that reads the table after a notice finds it
                values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * (len(rows) // 6))
                self._conn.execute(f"INSERT INTO {_TABLE} (invocation_id, seq, epoch, attempt, number, v) "
                                   f"VALUES {values} ON CONFLICT DO NOTHING", rows)
            for invocation_id, seq in trim:
                raw = invocation_id.encode()
                self._conn.execute(_TRIM, (raw, seq, raw, seq, MAX_STEP_BYTES))
            for end in ended:
                self._conn.execute(f"DELETE FROM {_TABLE} WHERE invocation_id = %s AND seq = %s",
                                   (end.invocation_id.encode(), end.seq))
            if params:
                self._conn.execute(sql, params)
        except Exception:
            conn, self._conn = self._conn, None  # opened again for the next batch
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - a broken connection: nothing to save
                    pass
            raise

    def follow(self, invocation_id: str) -> LiveFollower:
        with self._lock:
            if self._listener is None:
                self._listener = _Listener(self._connect)
            listener = self._listener
        follower = listener.add(invocation_id)
        try:  # what is kept of its running steps, ahead of what notifications brought meanwhile
            conn = self._connect()
            try:
                ensure_table(conn)
                kept = conn.execute(f"SELECT v FROM {_TABLE} WHERE invocation_id = %s ORDER BY seq, epoch, attempt, "
                                    "number", (invocation_id.encode(),)).fetchall()
            finally:
                conn.close()
        except Exception:  # noqa: BLE001 - the server is away: the follower gets what is notified from now on
            kept = []
        if kept:
            follower.queue.extendleft(reversed([unpack(bytes(row[0]), invocation_id) for row in kept]))
            follower.bells.ring()
        return follower

    def close(self) -> None:
        self._sender.close()
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass


class _PgFollower:
    def __init__(self, listener: _Listener, invocation_id: str) -> None:
        self._listener = listener
        self.invocation_id = invocation_id
        self.channel = channel_name(invocation_id)
        self.queue: deque[Sent] = deque()
        self.bells = Bell()
        self.bell = self.bells.bell

    def read(self) -> list[Sent]:
        out = []
        while self.queue:
            out.append(self.queue.popleft())
        return out

    def close(self) -> None:
        self._listener.remove(self)
        self.bells.close()


class _Listener:
    """One listening connection for every follower of this process, driven by a thread."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._followers: dict[str, set[_PgFollower]] = {}
        self._listening: set[str] = set()
        self._requests: deque[tuple[str, bool, threading.Event]] = deque()  # (channel, listen?, done)
        self._lock = threading.Lock()
        self._wake = Bell()
        self._closed = False
        self._conn: Any = None
        self._thread = threading.Thread(target=self._run, name="journal-live-listen", daemon=True)
        self._thread.start()

    def add(self, invocation_id: str) -> _PgFollower:
        follower = _PgFollower(self, invocation_id)
        done = threading.Event()
        with self._lock:
            self._followers.setdefault(follower.channel, set()).add(follower)
            self._requests.append((follower.channel, True, done))
        self._wake.ring()
        done.wait(30)  # in force before the follower reads (or the server is unreachable: it reads nothing)
        return follower

    def remove(self, follower: _PgFollower) -> None:
        with self._lock:
            followers = self._followers.get(follower.channel)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._followers[follower.channel]
                    self._requests.append((follower.channel, False, threading.Event()))
        self._wake.ring()

    def _deliver(self, channel: str, payload: str) -> None:
        with self._lock:
            followers = list(self._followers.get(channel, ()))
        if not followers:
            return
        try:
            raws = [base64.b64decode(part) for part in payload.split(",") if part]
            chunks = [unpack(raw, followers[0].invocation_id) for raw in raws]
        except Exception:  # noqa: BLE001 - not ours (someone else notified the channel): ignored
            return
        for follower in followers:
            follower.queue.extend(chunks)
            follower.bells.ring()

    def _on_notify(self, notify: Any) -> None:
        self._deliver(notify.channel, notify.payload)

    def _run(self) -> None:
        backoff = 0.1
        while not self._closed:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                    self._conn.add_notify_handler(self._on_notify)  # those read while a command runs
                    for channel in list(self._listening):
                        self._conn.execute(f"LISTEN {channel}")
                    backoff = 0.1
                self._serve_requests()
                pg = self._conn.pgconn
                ready, _, _ = select.select([pg.socket, self._wake.bell], [], [], 1.0)
                if self._wake.bell in ready:
                    drain(self._wake.bell)
                if pg.socket in ready:
                    pg.consume_input()
                    while (notify := pg.notifies()) is not None:
                        self._deliver(notify.relname.decode(), notify.extra.decode())
            except Exception:  # noqa: BLE001 - the connection failed: opened again, listened to again
                if self._closed:
                    return
                self._drop()
                self._serve_requests(failed=True)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _serve_requests(self, failed: bool = False) -> None:
        while True:
            with self._lock:
                if not self._requests:
                    return
                channel, listen, done = self._requests.popleft()
            with self._lock:
                followed = channel in self._followers
            new = listen and channel not in self._listening
            gone = not listen and not followed and channel in self._listening
            if new:
                self._listening.add(channel)  # (listened to again whenever the connection is opened again)
            elif gone:
                self._listening.discard(channel)
            try:
                if not failed and self._conn is not None:
                    if new:
                        self._conn.execute(f"LISTEN {channel}")
                    elif gone:
                        self._conn.execute(f"UNLISTEN {channel}")
            finally:
                done.set()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        self._closed = True
        self._wake.ring()
        self._thread.join(timeout=5)
        self._drop()
        self._wake.close()
