"""The routes of the API, one module per resource; each module's `routes` lists its own.

Adding a route: a module-level endpoint in the module of its resource (or a new module),
its request and answer types, and its `Route` in that module's `routes`.
"""

from __future__ import annotations

import typing

from . import events, invocations, keys, limits, meta, operations, promises, schedules, ui

__all__ = ("all_routes",)

if typing.TYPE_CHECKING:
    from starlette.routing import BaseRoute


def all_routes() -> list[BaseRoute]:
    return [*ui.routes, *meta.routes, *invocations.routes, *events.routes, *promises.routes, *operations.routes,
            *keys.routes, *limits.routes, *schedules.routes]
