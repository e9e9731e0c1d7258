#!/usr/bin/env python3
"""Policies added to copies of committed ``evaluate.py`` result files, each on its own recorded window: the file's
command (``meta.command``) rerun by ``evaluate.py`` with ``--policies P... --merge`` on a copy under ``--out-dir``
(the same path below ``bench/planner/results/``), so the copy keeps the file's results and adds these, at this
commit. The committed file is not touched.

    python bench/planner/rerun.py --traces /path/to/traces --jobs 2 --policies causal causal_past planner \\
        --out-dir bench/planner/results/diagnosis/causal26 --files bench/planner/results/heldout/70b_tp4/*.json

A recorded ``--dynamo-python`` is dropped (Dynamo's default row is kept, not rerun); ``--dynamo-python PY`` passes one
for the Dynamo variants among ``--policies`` (``variants.DYNAMO_VARIANTS``, e.g. ``dynamo_load``); a recorded trace
path that is not here is looked up under ``--traces`` by its folder and name (``recorded.retarget``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from recorded import recorded_argv  # noqa: E402

RESULTS = HERE / "results"


def destination(src: Path, out_dir: Path) -> Path:
    """The copy's path: ``src`` below the results folder (a file elsewhere: its name), under ``out_dir``."""
    try:
        return out_dir / src.resolve().relative_to(RESULTS.resolve())
    except ValueError:
        return out_dir / src.name


def rerun(src: Path, dst: Path, policies: list[str], traces: Path | None,
          dynamo_python: Path | None = None) -> tuple[Path, int, str]:
    argv = recorded_argv(json.loads(src.read_text())["meta"]["command"], traces)
    if dynamo_python is not None:
        argv += ["--dynamo-python", str(dynamo_python)]
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    proc = subprocess.run([sys.executable, str(HERE / "evaluate.py"), *argv, "--policies", *policies, "--merge",
                           "--out", str(dst)], capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return dst, proc.returncode, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", type=Path, required=True, help="committed evaluate.py result files")
    ap.add_argument("--policies", nargs="+", required=True, help="evaluate.py policies to add")
    ap.add_argument("--out-dir", type=Path, required=True, help="where the copies go (below it: the files' paths "
                                                                "below bench/planner/results/)")
    ap.add_argument("--traces", type=Path, help="folder holding the traces where a recorded path is not here")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--dynamo-python", type=Path, help="the peers' python, for Dynamo variants among --policies")
    args = ap.parse_args(argv)
    jobs = [(f, destination(f, args.out_dir)) for f in args.files]
    if len({d for _, d in jobs}) != len(jobs):
        raise SystemExit("two files map to one copy")
    failed = 0
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for dst, rc, last in pool.map(lambda j: rerun(j[0], j[1], args.policies, args.traces, args.dynamo_python), jobs):
            print(f"{dst}: {'ok' if rc == 0 else f'exit {rc}'}: {last}", flush=True)
            failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
