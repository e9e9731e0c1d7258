"""Fixtures for the chart tests: the chart loaded once through real Helm (helm-python-sdk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "pdserve"
HERE = Path(__file__).resolve().parent
GOOD_VALUES = sorted((HERE / "good_values").glob("*.yaml"))
BAD_VALUES = sorted((HERE / "bad_values").glob("*.yaml"))


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None, namespace: str = "pdserve-system",
           hooks: bool = False) -> list[dict[str, Any]]:
    """Render like `helm install --dry-run` and return every object, NOTES excluded;
    Helm hooks (the CRD-upgrade Job and its RBAC) only with ``hooks=True``."""
    rendered = chart.render(values=values or {}, name="pds", namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc and (hooks or "helm.sh/hook" not in (doc.get("metadata", {}).get("annotations") or {})):
                doc.setdefault("_template", path)
                objects.append(doc)
    return objects


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def load_values(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return values
