"""Prometheus metrics of an engine and its store (the `metrics` extra: `prometheus_client`).

`Metrics(store)` is an observer (`engine.observe(metrics)`) whose `exposition()` is the
Prometheus text format: the counters of this process and the gauges of the store. `journal
serve` answers it at `GET /metrics`; `journal worker --metrics HOST:PORT` serves it with
`serve_metrics`. docs/observability.md lists the families.
"""

from ._fleet import MAX_LIMIT_LABELS as MAX_LIMIT_LABELS
from ._metrics import MAX_HANDLER_LABELS as MAX_HANDLER_LABELS
from ._metrics import Metrics as Metrics
from ._serve import serve_metrics as serve_metrics

__all__ = ("MAX_HANDLER_LABELS", "MAX_LIMIT_LABELS", "Metrics", "serve_metrics")
