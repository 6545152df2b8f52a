"""The HTTP face of `journal serve`: a Starlette application over `runtime.Engine` and its
store, with the JSON API of docs/http.md, Server-Sent Events and the packaged web UI."""

from ._app import Service as Service
from ._app import create_app as create_app
from ._guard import is_loopback as is_loopback

__all__ = ("Service", "create_app", "is_loopback")
