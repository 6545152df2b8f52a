"""What runs before every route: ids that hold `/`, and the bearer token."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import error_response
from ._guard import authorized

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
            path = scope["path"]
            shell = path == "/" or any(path.startswith(p) for p in _UI_SHELL[1:])
            if not shell and not authorized(Request(scope), self.token):
                response = error_response(401, "Unauthorized", "this server requires `Authorization: Bearer TOKEN` "
                                          "with the token it was started with (--token-file or JOURNAL_TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
