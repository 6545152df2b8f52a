"""OpenTelemetry traces of invocations (extra `journal-agents[otel]`): `OpenTelemetry`, the
observer (`runtime.hooks`) that every engine has by default once the application imported
OpenTelemetry. docs/observability.md describes its spans."""

from ._tracing import OpenTelemetry as OpenTelemetry

__all__ = ("OpenTelemetry",)
