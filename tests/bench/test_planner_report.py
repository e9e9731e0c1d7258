"""bench/planner/README.md's results block is rendered from the committed result files (report.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "planner"))
import report  # noqa: E402


def test_readme_block_matches_the_result_files():
    assert report.main(["--check"]) == 0, "stale: run .venv/bin/python bench/planner/report.py"


def test_every_run_states_its_feasible_fraction():
    results = ROOT / "bench" / "planner" / "results"
    block = report.render(results)
    runs = len(list(results.glob("*/*.json")))
    assert runs >= 12 and block.count("Feasible alone: ") == runs
