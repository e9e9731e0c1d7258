"""bench/planner/README.md's results block is rendered from the committed result files (report.py)."""

import json
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
    # Count evaluation runs by their schema: results/ also holds other files (diagnosis/burst_misses_8b.json).
    runs = sum(json.loads(f.read_text()).get("schema") == "pdserve.planner-eval/2" for f in results.glob("*/*.json"))
    assert runs >= 12 and block.count("Feasible alone: ") == runs
