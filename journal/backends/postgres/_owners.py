"""The session whose advisory locks tell other workers that this process's owners are alive.

A lease protects its owner only while some session holds the owner's advisory lock
(`_postgres_rows.owner_lock_key`): when the process dies, the server ends its sessions and
the locks go with them, so rivals may take its invocations over at once. The session sits
idle by design, so it turns a server-wide `idle_session_timeout` off for itself; and since
the server may still end it while the process lives (an administrator, a pooler
restarting), every renewal first checks it and, if it ended, takes the locks again in a new
one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ._rows import owner_lock_key

if TYPE_CHECKING:
    import psycopg

_LOCK = "SELECT pg_advisory_lock(%s::int, %s::int)"


class OwnerSession:
    """Holds the advisory lock of every owner that acquired a lease through one store."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], error: type[Exception],
                 guard: Callable[[], AbstractContextManager[None]]) -> None:
        self._connect, self._error, self._guard = connect, error, guard
        self._lock = threading.Lock()
        self._owners: set[str] = set()
        self.conn: psycopg.Connection[Any] | None = None  # opened on the first acquire

    def hold(self, owner: str) -> None:
        """Hold `owner`'s lock from now on, so that its death shows."""
        if owner in self._owners:
            return
        with self._lock, self._guard():
            conn = self.conn
            if conn is None:
                self.conn = conn = self._open()
            conn.execute(_LOCK, owner_lock_key(owner))
            self._owners.add(owner)

    def keep(self) -> None:
        """Before renewing: if the session has ended, open another and take every lock again.

        Until then rivals saw these owners as dead and may have claimed their invocations; a
        lease claimed meanwhile is lost (its renewal fails with `LeaseLost`, and its handler
        stops). The leases still held are protected again from here on."""
        with self._lock:
            conn = self.conn
            if conn is None or not self._owners:
                return
            try:
                conn.execute("SELECT 1")
                return
            except self._error:
                pass
            try:
                conn.close()
            except self._error:  # it is broken already; a new one replaces it
                pass
            with self._guard():
                self.conn = conn = self._open()
                for owner in self._owners:
                    conn.execute(_LOCK, owner_lock_key(owner))

    def _open(self) -> psycopg.Connection[Any]:
        conn = self._connect()
        try:
            conn.execute("SET idle_session_timeout = 0")
        except self._error:  # a server before PostgreSQL 14 has no such timeout
            pass
        return conn
