"""`pdserve dashboard`: write the Grafana dashboard JSON built by `pdserve.dashboard.build`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pdserve.dashboard.build import dashboard_json

CHART_PATH = Path("charts/pdserve/dashboards/pdserve.json")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pdserve dashboard",
                                description="Generate the Grafana dashboard with grafana-foundation-sdk.")
    p.add_argument("--out", type=Path, metavar="PATH", help=f"file to write (e.g. {CHART_PATH}); default stdout")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out is out of date")
    args = p.parse_args(argv)
    text = dashboard_json()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    current = args.out.read_text() if args.out.exists() else None
    if current == text:
        return 0
    if args.check:
        print(f"out of date (run `make dashboard`): {args.out}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0
