"""The routes of the API, one module per resource; each module's `routes` lists its own.

Adding a route: a module-level endpoint in the module of its resource (or a new module),
with its OpenAPI operation beside it (`@operation(...)` of `.._openapi`: summary,
parameters, body, answers and errors), its request and answer types in `..models`, and its
`Route` in that module's `routes`; `/openapi.json` collects the operations of these routes,
and refuses a route of the API that has none.
"""

from __future__ import annotations

import typing

from . import batches, events, invocations, keys, limits, messages, meta, operations, promises, schedules, ui

__all__ = ("all_routes",)

if typing.TYPE_CHECKING:
    from starlette.routing import BaseRoute


def all_routes() -> list[BaseRoute]:
    return [*ui.routes, *meta.routes, *invocations.routes, *events.routes, *promises.routes, *operations.routes,
            *keys.routes, *limits.routes, *schedules.routes, *messages.routes, *batches.routes]
