"""What runs before every route: the Host and Origin checks, ids that hold `/`, the bearer
token, and the wait for a store whose server is away."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from journal import Store, store_patience

from ._errors import error_response, unavailable
from ._request_checks import authorized

# How long a request waits for a store whose server went away, before it answers 503 (the
# workers beside it wait without limit).
STORE_PATIENCE = 5.0

_UI_SHELL = ("/", "/i/", "/k/", "/static/")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class KnownHosts:
    """Answers 421 to a request whose `Host` is not one of `hosts`: a DNS name rebound to
    127.0.0.1 then reaches the server but is never treated as it. The check itself is
    Starlette's `TrustedHostMiddleware`; this only gives its refusal the API's error form."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app = app
        self.hosts = list(hosts)
        self.check = TrustedHostMiddleware(self._admitted, allowed_hosts=self.hosts, www_redirect=False)

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["journal.host_ok"] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def swallow(message: object) -> None:
            pass  # the check's own plain-text refusal: ours replaces it below

        await self.check(scope, receive, swallow)
        if scope.pop("journal.host_ok", False):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        allowed = ", ".join(self.hosts)
        await error_response(421, "MisdirectedRequest",
                             f"this server does not answer to Host {host!r}; it answers to {allowed} "
                             "(start it with --allow-host NAME to add a name)")(scope, receive, send)


class SameOrigin:
    """Refuses a state-changing request that another web page could have sent: it must be
    `application/json` (which no page can send across origins without a preflight, and
    this server answers none) and carry no `Origin` but the server's own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in _SAFE_METHODS:
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            refusal = None
            if origin is not None and not _same_origin(origin, scope["scheme"], headers.get("host", "")):
                refusal = error_response(403, "ForeignOrigin",
                                         f"a request from the web page at {origin!r} may not change anything here: "
                                         "only this server's own UI, or a program that sends no Origin, may")
            elif headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
                refusal = error_response(403, "NotJSON",
                                         f"{scope['method']} requests must be sent as Content-Type: application/json "
                                         "(so that no other web page can send them); with curl, add "
                                         "-H 'Content-Type: application/json'")
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether `origin` is this server as the request addressed it (`scheme://Host`)."""
    try:
        theirs = urlsplit(origin)
        ours = urlsplit(f"{scheme}://{host}")
        return bool(theirs.hostname) and theirs.scheme == scheme and theirs.hostname == ours.hostname \
            and (theirs.port or _DEFAULT_PORTS.get(scheme)) == (ours.port or _DEFAULT_PORTS.get(scheme))
    except ValueError:  # a port that is not a number: not ours
        return False


class SlashesInIds:
    """Lets an id hold `/` (sent as %2F): routing sees it as NUL, which no id may contain,
    and `param` turns it back. Without this, `/invocations/a%2Fb/result` would not route.
    A NUL the client sent itself (%00) is refused here, before it could pass for a `/`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if "\x00" in scope["path"]:
                await error_response(400, "InvalidId", "an id in the path contains the control character '\\x00' "
                                     "(sent as %00); ids are printable text")(scope, receive, send)
                return
            raw = scope.get("raw_path")
            if raw and b"%2f" in raw.lower():
                parts = raw.split(b"?", 1)[0].decode("latin-1").split("/")
                path = "/".join(unquote(part).replace("/", "\x00") for part in parts)
                scope = {**scope, "path": path}
        await self.app(scope, receive, send)


class BearerToken:
    """Requires `Authorization: Bearer TOKEN` on every request but the UI's static shell,
    which holds no journal data (the page asks for the token and sends it on its API calls)."""

    def __init__(self, app: ASGIApp, token: bytes) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if not _shell(scope["path"]) and not authorized(Request(scope), self.token):
                response = error_response(401, "Unauthorized", "this server requires `Authorization: Bearer TOKEN` "
                                          "with the token it was started with (--token-file or JOURNAL_TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class StoreWait:
    """While the store's server cannot be reached, API requests answer 503 at once; a
    request that finds it gone waits for it `STORE_PATIENCE` seconds at most, then answers
    503 too (`journal.store_patience`), instead of hanging, or failing with a 500."""

    def __init__(self, app: ASGIApp, store: Store, patience: float = STORE_PATIENCE) -> None:
        self.app = app
        self.store = store
        self.patience = patience

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _shell(scope["path"]):
            away = self.store.outage()
            if away is not None:
                await unavailable(away)(scope, receive, send)
                return
        with store_patience(self.patience):
            await self.app(scope, receive, send)


def _shell(path: str) -> bool:
    """The UI's static shell, which holds no journal data and reads no store."""
    return path == "/" or any(path.startswith(p) for p in _UI_SHELL[1:])
