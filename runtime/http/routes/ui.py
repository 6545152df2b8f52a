"""The web UI: one page shell for every UI address, and its packaged static files (the console's
ES modules: `app.js`, the router, `common.js`, and a module per page under `pages/`)."""

from __future__ import annotations

import importlib.resources
import os

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

_STATIC = importlib.resources.files("runtime.http") / "static"

# A strict policy: the UI's own script and style only, nothing from the network, no inline code.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_JAVASCRIPT = "text/javascript; charset=utf-8"


class _Static(StaticFiles):
    """The static files, a module script always as JavaScript: a browser runs a module only when
    it is served with a JavaScript type, which the system's MIME table may not say (Windows'
    registry can map .js to text/plain)."""

    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        if os.fspath(full_path).endswith(".js") and response.status_code != 304:
            response.headers["Content-Type"] = _JAVASCRIPT
        return response


async def page(request: Request) -> Response:
    return FileResponse(str(_STATIC / "index.html"), headers=_PAGE_HEADERS)


# The pages are not the API: /openapi.json leaves them out.
routes = [
    *(Route(path, page, include_in_schema=False) for path in ("/", "/i/{id}", "/k/{key}", "/s")),
    Mount("/static", app=_Static(directory=str(_STATIC)), name="static"),
]
