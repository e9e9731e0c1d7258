"""Metadata every benchmark result file carries, and median/spread over repeated runs.

Every script under ``bench/`` writes its JSON through :func:`write_result`, which adds a
``meta`` block: the exact command line, the git commit (and whether the tree was dirty),
the UTC date, the machine's load (``/proc/loadavg`` before and after the run), CPU count
and affinity, Python version, and N (how many repeated runs the numbers summarise).
The README's benchmark table (``bench/readme_table.py``) quotes numbers only from files
written this way, so a number always comes with where, when and under what load.

Scripts run as ``python bench/<area>/<script>.py`` and put ``bench/`` on ``sys.path`` to
import it, so the module stays stdlib-only and needs no install.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def loadavg() -> dict[str, float]:
    """The 1/5/15-minute load averages from ``/proc/loadavg`` (``os.getloadavg`` elsewhere)."""
    try:
        parts = Path("/proc/loadavg").read_text().split()
        one, five, fifteen = (float(x) for x in parts[:3])
    except OSError:
        one, five, fifteen = os.getloadavg()
    return {"1m": one, "5m": five, "15m": fifteen}


RESULTS_EXCLUDE = ":(exclude,glob)bench/**/results/**"


def git_commit(repo: Path = REPO) -> dict[str, Any]:
    """HEAD's commit and whether tracked files differ from it (numbers from a dirty tree say so).

    Committed result files (``bench/**/results/``) are outputs, not inputs: a suite that rewrites them run after
    run would otherwise mark every run after its first as dirty (session 9's regeneration did)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True, timeout=30,
                              check=False).stdout.strip()
    sha = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", RESULTS_EXCLUDE))
    return {"commit": sha or "unknown", "dirty": dirty}


class Run:
    """Context for one benchmark invocation: records load at start, builds ``meta`` at the end."""

    def __init__(self, argv: Sequence[str] | None = None, *, runs: int = 1) -> None:
        self.argv = list(sys.argv if argv is None else argv)
        self.runs = runs
        self.started = _dt.datetime.now(_dt.UTC)
        self.load_before = loadavg()
        # At the start: the run's own outputs (tracked result files) must not mark the tree dirty.
        self.git = git_commit()

    def meta(self) -> dict[str, Any]:
        cmd = [os.path.relpath(a, REPO) if a.startswith(str(REPO)) else a for a in self.argv]
        try:
            affinity = sorted(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            affinity = []
        return {
            "command": "python " + shlex.join(cmd),
            **self.git,
            "date": self.started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "wall_s": round((_dt.datetime.now(_dt.UTC) - self.started).total_seconds(), 1),
            "loadavg_before": self.load_before,
            "loadavg_after": loadavg(),
            "cpus": os.cpu_count(),
            "cpu_affinity": affinity,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "runs": self.runs,
        }


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """Median, min, max and relative spread ((max - min) / median) of N repeated measurements."""
    if not values:
        raise ValueError("spread() needs at least one value")
    vals = [float(v) for v in values]
    med = statistics.median(vals)
    return {
        "n": len(vals),
        "median": round(med, 6),
        "min": round(min(vals), 6),
        "max": round(max(vals), 6),
        "rel_spread": round((max(vals) - min(vals)) / med, 4) if med else 0.0,
        "values": [round(v, 6) for v in vals],
    }


def write_result(path: Path, doc: dict[str, Any], run: Run) -> Path:
    """Write ``doc`` as JSON with the run's ``meta`` block first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = {"meta": run.meta(), **{k: v for k, v in doc.items() if k != "meta"}}
    path.write_text(json.dumps(out, indent=2) + "\n")
    return path


def read_meta(path: Path) -> dict[str, Any] | None:
    """The ``meta`` block of a result file, or None for files written before this helper."""
    doc = json.loads(path.read_text())
    meta = doc.get("meta") if isinstance(doc, dict) else None
    return meta if isinstance(meta, dict) else None
