"""Draws the panels of docs/grafana-dashboard.json as a page of SVG line charts, from what a
real Prometheus answers to each panel's queries over a time range: the screenshot in
docs/img/dashboard.png (Grafana itself is not packaged in Debian)."""

from __future__ import annotations

import html
import math
import re
from typing import Any

_COLOURS = ("#3274d9", "#e0752d", "#56a64b", "#a352cc", "#d44a3a", "#1f9c9c", "#c4a000")
_WIDTH, _HEIGHT, _PAD = 560, 220, 36


def _legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "") or str(labels or "value")


def _unit(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.3g} ms" if 0 < abs(value) < 1 else f"{value:.3g} s"
    return f"{value:.3g}"


def panel_svg(title: str, unit: str, series: list[tuple[str, list[tuple[float, float]]]]) -> str:
    """One panel: its title, its series as lines over a shared time axis, and a legend."""
    points = [(t, v) for _, values in series for t, v in values if math.isfinite(v)]
    t0, t1 = (min(t for t, _ in points), max(t for t, _ in points)) if points else (0.0, 1.0)
    top = max([v for _, v in points] + [0.0]) or 1.0
    inner_w, inner_h = _WIDTH - 2 * _PAD, _HEIGHT - 2 * _PAD

    def x(t: float) -> float:
        return _PAD + (t - t0) / ((t1 - t0) or 1.0) * inner_w

    def y(v: float) -> float:
        return _PAD + inner_h - v / top * inner_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT + 18 * len(series)}">',
             '<rect width="100%" height="100%" fill="#181b1f"/>',
             f'<text x="{_PAD}" y="20" fill="#d8d9da" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for n in range(5):
        value = top * n / 4
        parts.append(f'<line x1="{_PAD}" x2="{_WIDTH - _PAD}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                     'stroke="#2c3235"/>')
        parts.append(f'<text x="2" y="{y(value) + 4:.1f}" fill="#8e8e8e" font-size="10">'
                     f'{html.escape(_unit(value, unit))}</text>')
    for n, (name, values) in enumerate(series):
        colour = _COLOURS[n % len(_COLOURS)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}"
                        for i, (t, v) in enumerate((t, v) for t, v in values if math.isfinite(v)))
        if path:
            parts.append(f'<path class="series" d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<rect x="{_PAD}" y="{_HEIGHT + 18 * n - 4}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{_PAD + 16}" y="{_HEIGHT + 18 * n + 5}" fill="#d8d9da" font-size="11">'
                     f'{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def dashboard_page(dashboard: dict[str, Any], answers: dict[str, list[dict[str, Any]]]) -> str:
    """The page: every panel in the dashboard's order, `answers` being each query's
    `query_range` result (a list of {"metric", "values"})."""
    panels = []
    for panel in dashboard["panels"]:
        series = []
        for target in panel["targets"]:
            for result in answers.get(target["expr"], []):
                values = [(float(t), float(v)) for t, v in result["values"]]
                series.append((_legend(target.get("legendFormat", ""), result["metric"]), values))
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        panels.append(f'<div class="panel">{panel_svg(panel["title"], unit, series)}</div>')
    return ('<!doctype html><html><head><meta charset="utf-8"><style>body{background:#111217;margin:12px;'
            'font-family:sans-serif}h1{color:#d8d9da;font-size:18px}.grid{display:grid;'
            'grid-template-columns:repeat(2,580px);gap:10px}</style></head><body>'
            f'<h1>{html.escape(dashboard["title"])}</h1><div class="grid">{"".join(panels)}</div></body></html>')
