"""The session whose advisory locks tell other workers that this process's owners are alive.

A lease protects its owner only while some session holds the owner's advisory lock
(`_rows.owner_lock_key`): when the process dies, the server ends its sessions and
the locks go with them, so rivals may take its invocations over at once. The session sits
idle by design, so it turns a server-wide `idle_session_timeout` off for itself.

The server may still end it while the process lives (an administrator, a pooler
restarting, a restart or a failover), and rivals then see this process's owners as dead.
So the session is checked before anything relies on it:

- before every claim (`hold`), without a round trip: a session the server ended has said
  so on its socket (an error, or the end of the stream), which a poll of the socket sees.
  A worker claims nothing its session does not protect.
- before every renewal (`keep`), with a round trip, which also catches a session that
  vanished without a word (a partition);
- whenever the worker waits for work (`check`, as `hold`), so that a lost session is
  taken again within a second even when nothing is claimed or renewed.

A lost session is replaced by a new one that takes every lock again (`_relock`), once the
old one is gone at the server too (`Connector.settle`: a session cut off on our side only
would otherwise keep the locks, and the new one would wait for them). Until then rivals
may have claimed invocations of ours: such a lease fails its next renewal or append with
`LeaseLost`, and its handler stops. The leases still held are protected again from here on.
"""

from __future__ import annotations

import select
import threading
from typing import TYPE_CHECKING

from ...errors import StoreError
from ._rows import owner_lock_key

if TYPE_CHECKING:
    from ._connect import Connector, Session

_LOCK = "SELECT pg_advisory_lock(%s::int, %s::int)"
_SETUP = ("SET idle_session_timeout = 0",)  # (a server before PostgreSQL 14 has no such timeout)


class OwnerSession:
    """Holds the advisory lock of every owner that acquired a lease through one store."""

    def __init__(self, connector: Connector) -> None:
        import psycopg

        self._connector = connector
        self._error = psycopg.Error
        self._lock = threading.Lock()
        self._owners: set[str] = set()
        self.session: Session | None = None  # opened on the first claim

    def hold(self, owner: str) -> None:
        """Before a claim for `owner`: its lock is held, from now on, by a session that was
        standing a moment ago."""
        if self.held(owner):
            return
        with self._lock:
            if not self._standing():
                self._relock()
            if owner in self._owners:
                return
            while True:
                session = self.session
                assert session is not None  # `_relock` opened it
                try:
                    session.conn.execute(_LOCK, owner_lock_key(owner))
                    break
                except self._error as exc:
                    self._lost(exc)
                    self._relock()
            self._owners.add(owner)

    def held(self, owner: str) -> bool:
        """Whether `hold(owner)` has nothing to do (no round trip, nothing to wait for)."""
        return owner in self._owners and self._standing()

    def keep(self) -> None:
        """Before renewing: one round trip says that the session still stands (the server
        may have dropped it without a word reaching us); if not, take every lock again."""
        with self._lock:
            if self.session is None or not self._owners:
                return
            try:
                self.session.conn.execute("SELECT 1")
                return
            except self._error as exc:
                self._lost(exc)
            self._relock()

    def check(self, until: float | None = None) -> None:
        """`hold`'s look, for every owner: take the locks again now if the session fell."""
        if self.session is None or self._standing():
            return
        with self._lock:
            if self.session is not None and not self._standing():
                self._relock(until)

    def close(self) -> None:
        """Close the session once no claim or renewal is using it (see `PostgresStore.close`)."""
        with self._lock:
            session, self.session = self.session, None
        if session is not None:
            try:
                session.conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection: nothing to save
                pass

    def _standing(self) -> bool:
        """Whether the session looks alive: nothing has come on its idle socket (an ended
        session's last words, or the end of the stream). No round trip."""
        session = self.session
        if session is None:
            return False
        conn = session.conn
        if conn.closed or conn.broken:
            return False
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError, self._error):
            return False
        if not readable:
            return True
        try:  # something came: if only a notice, the session still answers
            conn.execute("SELECT 1")
            return True
        except self._error as exc:
            self._lost(exc)
            return False

    def _lost(self, exc: BaseException) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        if not self._connector.is_fault(exc, session.conn):
            self._connector.forget(session)
            raise StoreError(f"PostgreSQL error in the owners' lock session: {exc}") from None
        self._connector.lost(session, exc)

    def _relock(self, until: float | None = None) -> None:
        """A new session (the old one ended at the server first) holding every owner's lock."""
        if self.session is not None:
            self._connector.forget(self.session)
            self.session = None
        while True:
            session = self._connector.open("owners", until=until, setup=_SETUP)
            try:
                for owner in self._owners:
                    session.conn.execute(_LOCK, owner_lock_key(owner))
            except self._error as exc:
                self.session = session
                self._lost(exc)
                continue
            self.session = session
            return
