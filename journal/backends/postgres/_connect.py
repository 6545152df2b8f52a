"""Connections to PostgreSQL that outlive the server going away.

A database on the network fails in ways a directory does not: it restarts, fails over to
a standby, has its sessions ended by an administrator or a pooler, or drops off the
network for a while. A `PostgresStore` holds five connections (the writer, the steps'
connection on the event loop, the reader, the listener, the owners' lock session), and
each of them, when its connection fails in a way that says "the server went away" rather
than "the statement was wrong" (`is_fault`), opens another and goes on:

- **Backoff with jitter.** Attempts are spaced 50 ms, 100 ms, ... doubling up to 1 s,
  each a random 50-100% of that, so that many workers coming back together do not knock
  on the server in step, and one comes back within about a second of the server
  accepting connections again (`Outage.pause`).
- **Patience.** A store waits for its server `reconnect_for` seconds (by default
  `$JOURNAL_RECONNECT_FOR`, else 30: the command line's one-shot commands), or without
  limit (None: `journal worker` and `journal serve`); `store_patience` lowers it for the calls made inside it (the HTTP
  API, which answers 503 rather than hang). Then the call raises `StoreUnavailable`,
  which names the URL without its password.
- **One line each way.** The first failure of an outage logs one warning on the
  `journal` logger, and the first connection opened again logs one more with how long
  it took (`Outage.failed`, `Outage.reached`). A connection opened before an outage that
  fails afterwards is part of the outage already told.
- **What the old session held.** A session lost from this side may live on at the
  server for a while (a network partition, a proxy that closed only our side), holding
  row locks or an owner's advisory lock. Each session's `(pid, backend_start)` is noted
  when it opens; once a new session reaches the same server, the old ones still there are
  ended (`pg_terminate_backend`) and waited for (`Connector.settle`). Their transactions
  are then over, committed or not, so what a redo finds is final.
- **Finding the writable host.** A URL may list several hosts (`h1:p1,h2:p2`, or
  `?host=h1,h2&port=p1,p2`); libpq tries each in turn, and with
  `target_session_attrs=read-write` (added when several hosts are listed and the URL
  does not say) it keeps only a primary, so after a failover every connection finds the
  new one, and an old primary that comes back as a standby takes no writes.

Each session also gets settings that let the server and the client notice a peer that
vanished without closing its connection: TCP keepalives and a TCP user timeout (both
ends), and an idle-in-transaction timeout, so that a transaction whose client was cut off
mid-way does not hold its rows until TCP gives up, two hours later. A URL's own values
win. `application_name` says which of the store's connections a session is
(`journal writer`, `journal owners`, ...), for `pg_stat_activity`.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

from ...errors import StoreError, StoreUnavailable
from ._urls import redact_url

# SQLSTATEs that mean the session, not the statement, is gone (or on a server that takes no
# writes): 08 connection exceptions, 57P01-57P03 shutdowns and start-ups, too many
# connections, the idle timeouts, and a read-only transaction (a standby).
_FAULTS = {"57P01", "57P02", "57P03", "53300", "57P05", "25P03", "25006"}
# Words of a connection failure that waiting will not cure.
_FOR_GOOD = ("does not exist", "authentication failed", "no pg_hba.conf entry", "password", "permission denied",
             "not permitted", "no such user")
_FIRST_WAIT, _LONGEST_WAIT = 0.05, 1.0
_FLAPPING = 10.0  # seconds: an outage for the same reason this soon after the last is not told again
# Defaults each session gets unless the URL gives its own (libpq parameters, client side).
_CLIENT = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5",
           "keepalives_count": "3", "tcp_user_timeout": "20000"}
# ... and on the server side, for each session: a peer that vanished is noticed there too.
# The store's transactions send their statements back to back, so one idle for 2 s has lost
# its client (a partition, a frozen host): ended then, it frees the lease rows it locked for
# the worker taking them over, instead of holding them past the lease (a transaction ended
# this way by a client that was only slow is retried, as any lost session is).
_SESSION = ("SET idle_in_transaction_session_timeout = '2s'", "SET tcp_keepalives_idle = 10",
            "SET tcp_keepalives_interval = 5", "SET tcp_keepalives_count = 3", "SET tcp_user_timeout = 20000")
_IDENTITY = "SELECT pg_backend_pid(), backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
SESSION_SETUP = "; ".join((*_SESSION, _IDENTITY))
IDENTITY = _IDENTITY

_patience: contextvars.ContextVar[float | None] = contextvars.ContextVar("journal_store_patience", default=None)


@contextlib.contextmanager
def store_patience(seconds: float) -> Iterator[None]:
    """Inside it, a store call that cannot reach its server waits at most `seconds` (from the
    moment the server was found gone) before raising `StoreUnavailable`, however long the
    store itself would wait. It follows the calls into the threads that `anyio.to_thread`
    starts (which copy the context). `journal serve` wraps each request in it."""
    token = _patience.set(seconds)
    try:
        yield
    finally:
        _patience.reset(token)


def default_patience() -> float:
    """How long a store waits for its server unless told: `$JOURNAL_RECONNECT_FOR` seconds, else 30."""
    import os

    text = os.environ.get("JOURNAL_RECONNECT_FOR", "").strip()
    if not text:
        return 30.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise StoreError(f"JOURNAL_RECONNECT_FOR={text!r} is not a number of seconds (0 or more); unset it for 30")
    return seconds


def conninfo(url: str, role: str) -> str:
    """`url` with the session defaults it does not set itself (see the module's docstring)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(url)
    extra = {k: v for k, v in _CLIENT.items() if k not in given}
    if "application_name" not in given:
        extra["application_name"] = f"journal {role}"
    if "," in str(given.get("host", "")) + str(given.get("hostaddr", "")) and "target_session_attrs" not in given:
        extra["target_session_attrs"] = "read-write"  # several hosts: only the primary takes writes
    return make_conninfo(url, **extra)


def _log() -> Any:
    """The `journal` logger, on which a store tells of an outage (imported when one begins)."""
    import logging

    return logging.getLogger("journal")


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Session:
    """One connection and what is known of it: which outage generation opened it, and the
    server's `(pid, backend_start)` for it."""

    __slots__ = ("conn", "generation", "identity")

    def __init__(self, conn: Any, generation: int, identity: tuple[int, Any] | None) -> None:
        self.conn, self.generation, self.identity = conn, generation, identity


class Outage:
    """What a store's connections know together about reaching its server."""

    def __init__(self, shown_url: str, patience: float | None) -> None:
        self.shown = shown_url
        self.patience = patience
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self.generation = 0  # one more for each outage begun
        self.down_since: float | None = None  # (monotonic) while no connection could be opened
        self.reason = ""
        self._up_since = float("-inf")  # when the last outage ended
        self._told = False  # whether the outage under way was logged
        self.ended = 0  # outages that ended: how many times the store connected again after losing its server

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, generation: int | None, exc: BaseException) -> None:
        """A session opened in `generation` failed (None: opening one failed)."""
        with self._lock:
            reason, self.reason = self.reason, _reason(exc)
            if self.down_since is not None:
                return
            if generation is not None and generation != self.generation:
                return  # opened before the outage that was told: reopened quietly, unless that fails
            now = time.monotonic()
            self.down_since = now
            self.generation += 1
            # A server that takes connections and fails every statement the same way (a
            # standby named alone in the URL) is told of once, not twice a second.
            self._told = self.reason != reason or now - self._up_since > _FLAPPING
            if not self._told:
                return
        _log().warning("journal: the journal store at %s cannot be reached (%s); reconnecting", self.shown, self.reason)

    def reached(self) -> None:
        """A session was opened: the outage, if one was on, is over."""
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is None:
                return
            self._up_since = time.monotonic()
            took, self.down_since = self._up_since - self.down_since, None
            self.ended += 1
            if not self._told:
                return
        _log().warning("journal: the journal store at %s is reachable again, after %.1f s", self.shown, took)

    def patience_now(self) -> float | None:
        mine, asked = self.patience, _patience.get()
        if asked is None:
            return mine
        return asked if mine is None else min(mine, asked)

    def error(self, since: float | None = None) -> StoreUnavailable | None:
        """The error of a call that waited for the server since `since` (default: since it went
        away) and gives up now; None if no outage is on and no `since` is given."""
        since = self.down_since if self.down_since is not None else since
        if since is None:
            return None
        return StoreUnavailable(
            f"cannot reach the journal store at {self.shown} (tried for {time.monotonic() - since:.0f} s; last "
            f"error: {self.reason}); check that the database server is running and that this host can reach it "
            "(pg_isready), then try again")

    def pause(self, attempt: int, until: float | None = None, since: float | None = None) -> None:
        """Wait before attempt `attempt + 1`; raise `StoreUnavailable` once the caller's
        patience, counted from the outage's start (or from `since`, when the caller's own
        trouble began, if no outage is on), or `until` (both monotonic) is used up."""
        now = time.monotonic()
        patience = self.patience_now()
        since = self.down_since if self.down_since is not None else (since or now)
        ends = None if patience is None else since + patience
        if until is not None:
            ends = until if ends is None else min(ends, until)
        if ends is not None and now >= ends:
            error = self.error(since)
            assert error is not None  # (`since` is given)
            raise error
        import random  # (only when the server is away: `journal ls` imports it not)

        wait = min(_LONGEST_WAIT, _FIRST_WAIT * 2 ** min(attempt, 10))
        wait *= random.uniform(0.5, 1.0)
        if ends is not None:
            wait = min(wait, ends - now)
        if self.closing.wait(max(0.0, wait)):
            raise StoreError(f"the store at {self.shown} is closed")


class Connector:
    """Opens a store's sessions, patiently, and ends the old ones its lost sessions left."""

    def __init__(self, url: str, patience: float | None) -> None:
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self.outage = Outage(redact_url(url), patience)
        self._lock = threading.Lock()
        self._unsettled: list[tuple[int, Any]] = []  # sessions lost from this side, maybe alive there

    def is_fault(self, exc: BaseException, conn: Any = None) -> bool:
        """Whether `exc` says the session (or its server) is gone, rather than the statement wrong."""
        psycopg = self._psycopg
        if not isinstance(exc, psycopg.Error):
            return False
        if conn is not None and (conn.closed or conn.broken):
            return True
        state = exc.sqlstate
        if state is not None:
            return state.startswith("08") or state in _FAULTS
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))

    def _for_good(self, exc: BaseException) -> bool:
        """A failure to connect that waiting will not cure (a wrong URL, name or password)."""
        if not isinstance(exc, self._psycopg.OperationalError):
            return True  # ProgrammingError: the URL itself is malformed
        text = str(exc).lower()
        return any(word in text for word in _FOR_GOOD)

    def open(self, role: str, *, until: float | None = None, setup: tuple[str, ...] = ()) -> Session:
        """A new session for `role`, waiting for the server as the store's patience says (and
        no later than `until`, monotonic). `setup`: statements run in it first."""
        psycopg = self._psycopg
        info = conninfo(self.url, role)
        attempt = 0
        while True:
            if self.outage.closing.is_set():
                raise StoreError(f"the store at {self.outage.shown} is closed")
            generation = self.outage.generation
            try:
                conn = psycopg.connect(info, autocommit=True)
            except psycopg.Error as exc:
                if self._for_good(exc):
                    raise StoreError(f"cannot connect to the journal store at {self.outage.shown}: "
                                     f"{_reason(exc)}") from None
                self.outage.failed(None, exc)
                self.outage.pause(attempt, until)
                attempt += 1
                continue
            try:
                identity = self._prepare(conn, setup)
                self.settle(conn)
            except psycopg.Error as exc:
                conn.close()
                if not self.is_fault(exc, conn):
                    raise StoreError(f"PostgreSQL error in {self.outage.shown}: {_reason(exc)}") from None
                self.outage.failed(None, exc)
                self.outage.pause(attempt, until)
                attempt += 1
                continue
            self.outage.reached()
            return Session(conn, generation, identity)

    def _prepare(self, conn: Any, setup: tuple[str, ...] = ()) -> tuple[int, Any] | None:
        """The session's settings, then its identity, in one round trip (the settings one by
        one, ignoring those an older server does not have, if the round trip fails on them)."""
        psycopg = self._psycopg
        statements = (*_SESSION, *setup)
        try:
            cur = conn.execute("; ".join((*statements, _IDENTITY)))
            while cur.pgresult is not None and cur.pgresult.status != psycopg.pq.ExecStatus.TUPLES_OK:
                if not cur.nextset():
                    break
            row = cur.fetchone()
        except psycopg.Error as exc:
            if self.is_fault(exc, conn):
                raise
            for statement in statements:
                try:
                    conn.execute(statement)
                except psycopg.Error as again:
                    if self.is_fault(again, conn):
                        raise
            row = conn.execute(_IDENTITY).fetchone()
        return (int(row[0]), row[1]) if row is not None else None

    def lost(self, session: Session | None, exc: BaseException) -> None:
        """`session` failed with `exc` (a fault): closed here, and ended at the server later."""
        if session is None:
            return
        self.outage.failed(session.generation, exc)
        self.forget(session)

    def forget(self, session: Session) -> None:
        """Close `session` from this side; the server's end of it is ended by the next `settle`."""
        if session.identity is not None:
            self.forget_identity(session.identity)
        with contextlib.suppress(Exception):
            session.conn.close()

    def forget_identity(self, identity: tuple[int, Any]) -> None:
        with self._lock:
            self._unsettled.append(identity)

    @property
    def unsettled(self) -> bool:
        """Whether sessions lost from this side may live on at the server (see `settle`)."""
        return bool(self._unsettled)

    def settle(self, conn: Any) -> None:
        """On `conn`'s server, end the sessions this store lost that are still there, and wait
        until they are gone: whatever they were committing is then committed or not, for good."""
        with self._lock:
            lost, self._unsettled = self._unsettled, []
        if not lost:
            return
        try:
            pids = [pid for pid, _ in lost]
            starts = [start for _, start in lost]
            deadline = time.monotonic() + 30
            while True:
                left = conn.execute(
                    "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a "
                    "JOIN unnest(%s::int[], %s::timestamptz[]) AS l (pid, started) "
                    "ON a.pid = l.pid AND a.backend_start = l.started", (pids, starts)).fetchall()
                if not left or time.monotonic() > deadline:
                    return
                time.sleep(0.01)  # a terminated backend exits within milliseconds; there is no event for it
        except self._psycopg.Error as exc:
            if not self.is_fault(exc, conn):
                return  # not ours to end after all (no right to, here): they end with their TCP connections
            with self._lock:  # not settled: the next session tries again
                self._unsettled = lost + self._unsettled
            raise
        except BaseException:
            with self._lock:
                self._unsettled = lost + self._unsettled
            raise

    def close(self) -> None:
        self.outage.closing.set()
