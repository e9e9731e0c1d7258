"""Every PromQL query of the Grafana dashboard, read from the dashboard JSON itself.

The dashboard JSON is the one place the queries live; the unit tests check that each
parses and the e2e suite runs each against a live Prometheus and expects data.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "charts" / "pdserve" / "dashboards" / "pdserve.json"

# Grafana's built-in interval variables, replaced by what Grafana would use at a
# short scrape interval so the expressions are valid PromQL outside Grafana.
_BUILTINS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref: str  # refId, or "annotation"
    expr: str  # as written in the dashboard, with $variables


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        dashboard: dict[str, Any] = json.load(f)
    return dashboard


def queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    found: list[PanelQuery] = []
    for panel in _all_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                found.append(PanelQuery(panel["title"], target.get("refId", "?"), target["expr"]))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            found.append(PanelQuery(annotation["name"], "annotation", annotation["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            found.append(PanelQuery(f"variable {variable['name']}", "variable", _label_values_as_query(variable)))
    return found


def _all_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in panels:
        out.append(panel)
        out.extend(_all_panels(panel.get("panels", [])))
    return out


def _label_values_as_query(variable: dict[str, Any]) -> str:
    # label_values(METRIC, LABEL) is Grafana's, not PromQL: the equivalent series query
    # is the metric itself (the label is read from the result).
    definition = variable.get("definition") or variable["query"]["query"]
    match = re.fullmatch(r"\s*label_values\((.+),\s*(\w+)\)\s*", definition)
    if not match:
        raise ValueError(f"dashboard variable {variable['name']!r}: unsupported query {definition!r}")
    return match.group(1)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Replace $name / ${name} with concrete values; unknown variables are an error."""
    for builtin, value in _BUILTINS.items():
        expr = expr.replace(builtin, value)

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"dashboard query uses ${name}, which has no value: {expr}")
        return variables[name]

    return _VARIABLE.sub(repl, expr)
