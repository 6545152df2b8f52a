"""OpenTelemetry traces of invocations (extra `journal-agents[otel]`): `OpenTelemetry`, the
observer (`runtime.hooks`). Importing this package registers it as a default observer
(`runtime.hooks.add_default`): every engine made afterwards without `observers=` traces,
once the application configured an OpenTelemetry SDK. docs/observability.md describes its
spans."""

from ..hooks import add_default as _add_default
from ._tracing import OpenTelemetry as OpenTelemetry

__all__ = ("OpenTelemetry",)

_add_default(OpenTelemetry)
