"""What runs before every route: ids that hold `/`, the bearer token, and the wait for a
store whose server is away."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from journal import Store, store_patience

from ._errors import error_response, unavailable
from ._guard import authorized

# How long a request waits for a store whose server went away, before it answers 503 (the
# workers beside it wait without limit).
STORE_PATIENCE = 5.0

_UI_SHELL = ("/", "/i/", "/k/", "/static/")


class SlashesInIds:
    """Lets an id hold `/` (sent as %2F): routing sees it as NUL, which no id may contain,
    and `param` turns it back. Without this, `/invocations/a%2Fb/result` would not route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and b"%2f" in raw.lower():
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
