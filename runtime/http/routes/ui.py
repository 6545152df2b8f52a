"""The web UI: one page shell for every UI address, and its packaged static files."""

from __future__ import annotations

import importlib.resources

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

_STATIC = importlib.resources.files("runtime.http") / "static"

# A strict policy: the UI's own script and style only, nothing from the network, no inline code.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


async def page(request: Request) -> Response:
    return FileResponse(str(_STATIC / "index.html"), headers=_PAGE_HEADERS)


routes = [
    Route("/", page), Route("/i/{id}", page), Route("/k/{key}", page), Route("/s", page),
    Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"),
]
