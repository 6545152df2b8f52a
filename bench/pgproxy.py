"""A TCP proxy on loopback in front of a PostgreSQL server, which can lose a commit's answer.

A connection that drops after the server committed and before its answer reached the
client leaves the client in doubt: the commit happened, but nothing says so. Networks do
this (a NAT or load balancer timing out, a pooler restarting), too rarely to test against.
`CommitCutter` makes it happen on demand. It forwards PostgreSQL's wire protocol both
ways, reading it message by message, and knows a commit when it sees one go to the
server: a `COMMIT`, or a data-changing statement sent outside a transaction block (which
commits by itself). When armed, it forwards such a commit, reads the server's whole
answer up to its ReadyForQuery (so the commit is done), drops that answer, and closes
both sides. The client sees its connection end in the middle of a commit.

It can also hold back a request on its way: `hold(pattern)` keeps the first message to the
server that contains `pattern`, and everything after it on that connection, until
`let_through()`, even past the client closing its end, as the network delivers a packet it
retransmits late. The server then gets a statement its client has given up on.

It listens on 127.0.0.1 only, one thread per direction of each connection.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102
_CHANGES = (b"INSERT", b"UPDATE", b"DELETE", b"WITH", b"MERGE")


class CommitCutter:
    """`CommitCutter(host, port).start()`: a proxy on `127.0.0.1:self.port` in front of the
    server at `host:port` (or a Unix socket directory `host`). `cut_after(n)` arms it to cut
    the connection of the n-th commit from now; `cuts` counts the cuts made."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._countdown: int | None = None  # commits to let through before the next cut
        self.commits = 0
        self.cuts = 0
        self.cut: list[bytes] = []  # the SQL of each commit whose answer was dropped
        self._pairs: set[_Pair] = set()
        self._stopped = False
        self._hold_pattern: bytes | None = None  # `hold`: what the next held message contains
        self.holding = threading.Event()  # set once a message is held back
        self.released = threading.Event()  # `let_through`
        self.delivered = threading.Event()  # set once what was held has gone to the server and its connection ended
        self._thread = threading.Thread(target=self._accept, name="commit-cutter", daemon=True)

    def start(self) -> CommitCutter:
        self._thread.start()
        return self

    def url(self, dbname: str, user: str = "journal") -> str:
        # No TLS to read through: the proxy sees the protocol in the clear.
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}?sslmode=disable&gssencmode=disable"

    def cut_after(self, n: int) -> None:
        """Cut the connection of the `n`-th commit that passes from now on (1: the next one)."""
        with self._lock:
            self._countdown = n

    def hold(self, pattern: bytes) -> None:
        """Hold back the first message to the server that contains `pattern`, and the rest of its
        connection's, until `let_through` (`holding` is set when one is held)."""
        with self._lock:
            self._hold_pattern = pattern

    def let_through(self) -> None:
        self.released.set()

    def _should_hold(self, body: bytes) -> bool:
        if self._hold_pattern is None:  # (not armed: every message of every connection asks)
            return False
        with self._lock:
            if self._hold_pattern is None or self._hold_pattern not in body:
                return False
            self._hold_pattern = None
        self.holding.set()
        return True

    def cut_all(self) -> None:
        """Close every connection now, whatever it is doing."""
        for pair in list(self._pairs):
            pair.close()

    def _should_cut(self, unit: list[bytes]) -> bool:
        with self._lock:
            self.commits += 1
            if self._countdown is None:
                return False
            self._countdown -= 1
            if self._countdown > 0:
                return False
            self._countdown = None
            self.cuts += 1
            self.cut.append(b"; ".join(unit))
            return True

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = _connect(*self.upstream)
            except OSError:
                client.close()
                continue
            # Messages go one by one: without this, Nagle's algorithm holds each small one
            # back until the previous is acknowledged (40 ms with delayed ACKs).
            for sock in (client, server):
                if sock.family != socket.AF_UNIX:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, server, self._should_cut, self._pairs.discard, self)
            self._pairs.add(pair)
            pair.start()

    def stop(self) -> None:
        self._stopped = True
        self.released.set()  # a pair still holding messages stops waiting (its sockets close below)
        self._listener.close()
        self.cut_all()


def _connect(host: str, port: int) -> socket.socket:
    if host.startswith("/"):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(f"{host}/.s.PGSQL.{port}")
        return sock
    return socket.create_connection((host, port))


class _Pair:
    """One client connection and its server connection, read message by message."""

    def __init__(self, client: socket.socket, server: socket.socket, should_cut: Callable[[list[bytes]], bool],
                 gone: Callable[[_Pair], None], proxy: CommitCutter) -> None:
        self.client, self.server = client, server
        self._should_cut, self._gone = should_cut, gone
        self._proxy = proxy
        self._held: list[bytes] | None = None  # messages held back (`CommitCutter.hold`)
        self._idle = True  # the server's last ReadyForQuery said: no transaction block open
        self._cutting = threading.Event()  # a commit went to the server: drop its answer, then cut
        self._closed = False
        self._statements: dict[bytes, bytes] = {}  # prepared statement name -> its SQL
        self._unit: list[bytes] = []  # the SQL executed since the last Sync

    def start(self) -> None:
        threading.Thread(target=self._upstream, daemon=True).start()
        threading.Thread(target=self._downstream, daemon=True).start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._gone(self)

    # -- client to server -----------------------------------------------------------------

    def _upstream(self) -> None:
        try:
            if not self._prelude():
                return
            while True:
                kind, body = _message(self.client)
                if kind == b"P":  # Parse: name NUL query NUL ...
                    name, query = body.split(b"\x00", 2)[:2]
                    self._statements[name] = query
                elif kind == b"B":  # Bind: portal NUL statement NUL ...
                    statement = body.split(b"\x00", 2)[1]
                    self._unit.append(self._statements.get(statement, b""))
                elif kind == b"Q":
                    self._unit.append(body.rstrip(b"\x00"))
                commits = kind in (b"Q", b"S") and self._commits(self._unit)
                unit = self._unit
                if kind in (b"Q", b"S"):
                    self._unit = []
                if commits and self._should_cut(unit):
                    self._cutting.set()  # before the message leaves: its answer must not get through
                message = kind + struct.pack("!I", len(body) + 4) + body
                if self._held is None and self._proxy._should_hold(body):
                    self._held = []
                if self._held is not None:
                    self._held.append(message)
                    continue
                self.server.sendall(message)
        except (OSError, ConnectionError):
            pass
        finally:
            if self._held is not None:
                self._deliver_held()
            elif not self._cutting.is_set():
                self.close()

    def _deliver_held(self) -> None:
        """Once let through, what was held goes to the server (which may have ended the
        session meanwhile), and the connection ends when the server is done with it."""
        self._proxy.released.wait()
        try:
            for message in self._held or ():
                self.server.sendall(message)
            self.server.shutdown(socket.SHUT_WR)
            while self.server.recv(65536):
                pass
        except OSError:
            pass
        self.close()
        self._proxy.delivered.set()

    def _prelude(self) -> bool:
        """The untyped start of a connection: TLS or GSS requests (each answered by one byte),
        then the startup message or a cancel request."""
        while True:
            (length,) = struct.unpack("!I", _exactly(self.client, 4))
            rest = _exactly(self.client, length - 4)
            self.server.sendall(struct.pack("!I", length) + rest)
            (code,) = struct.unpack("!I", rest[:4])
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                self.client.sendall(_exactly(self.server, 1))
                continue
            if code == _CANCEL_REQUEST:
                threading.Thread(target=self._relay_rest, daemon=True).start()
                return False
            return True

    def _relay_rest(self) -> None:
        try:
            while data := self.server.recv(65536):
                self.client.sendall(data)
        except OSError:
            pass
        self.close()

    def _commits(self, unit: list[bytes]) -> bool:
        for sql in unit:
            head = sql.lstrip().upper()
            if head.startswith((b"COMMIT", b"END")) or (self._idle and head.startswith(_CHANGES)):
                return True
        return False

    # -- server to client -----------------------------------------------------------------

    def _downstream(self) -> None:
        try:
            while True:
                kind, body = _message(self.server)
                if kind == b"Z":
                    self._idle = body == b"I"
                if self._cutting.is_set():
                    if kind == b"Z":  # the commit's whole answer has come, and is dropped
                        break
                    continue
                self.client.sendall(kind + struct.pack("!I", len(body) + 4) + body)
        except (OSError, ConnectionError):
            pass
        self.close()


def _message(sock: socket.socket) -> tuple[bytes, bytes]:
    head = _exactly(sock, 5)
    (length,) = struct.unpack("!I", head[1:])
    return head[:1], _exactly(sock, length - 4)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
