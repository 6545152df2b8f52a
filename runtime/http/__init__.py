"""journal's HTTP API, Server-Sent Events and web UI as an ASGI application over an `Engine`
(`pip install 'journal-agents[http]'`): `create_app(engine, handlers=..., token=...)` to mount in
your own server, or `journal serve` to run it with workers. docs/http.md has every route."""

from ._app import create_app as create_app
from ._app import stop_streams as stop_streams
from ._request_checks import is_loopback as is_loopback

__all__ = ("create_app", "is_loopback", "stop_streams")
