"""What the README tables' generators share: reading a result file, a cell's number
formats, and the provenance cell (commit, date, load, runs from a file's ``meta``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _load(root: Path, rel: str) -> dict[str, Any]:
    return json.loads((root / rel).read_text())


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def _provenance(doc: dict[str, Any], rel: str) -> str:
    meta = doc.get("meta")
    link = f"[{rel}]({rel})"
    if not isinstance(meta, dict):
        load = doc.get("load_average_1m") or doc.get("load_average_1m_at_start")
        extra = f"; load {load}" if isinstance(load, (int, float)) else ""
        commit = doc.get("commit")
        extra += f"; commit {str(commit)[:7]}" if commit else ""
        return f"{link} (provenance not recorded{extra})"
    load = meta.get("loadavg_before", {}).get("1m")
    dirty = "+dirty" if meta.get("dirty") else ""
    return f"{link} ({str(meta.get('commit'))[:7]}{dirty}, {str(meta.get('date'))[:10]}, load {load}, N={meta.get('runs')})"


@dataclass(frozen=True)
class Row:
    what: str
    target: str
    source: str  # result file, relative to the repository
    cell: Callable[[dict[str, Any]], str]


def _spread(x: dict[str, Any], fmt: str) -> str:
    return f"{x['median']:{fmt}} [{x['min']:{fmt}}..{x['max']:{fmt}}]"
