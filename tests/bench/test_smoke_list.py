"""`make bench-smoke` must cover every benchmark script, so a new one cannot rot unseen."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import smoke  # noqa: E402


def test_every_benchmark_script_has_a_smoke_run() -> None:
    scripts = {str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py")
               if 'if __name__ == "__main__"' in p.read_text() and p.name != "smoke.py"}
    covered = {s.script for s in smoke.SMOKES}
    assert scripts - covered == set(), "add these to bench/smoke.py SMOKES"
    assert covered <= scripts


def test_smoke_outputs_go_to_their_own_folder_never_over_committed_results() -> None:
    for s in smoke.SMOKES:
        for a in s.args:
            assert "results" not in a or a.endswith(".json") and Path(a).is_file(), (s.name, a)  # inputs only
        writes = [a for a in s.args if "{out}" in a]
        assert writes or s.name in ("readme_table", "burst_readme", "dynamo_replay", "planner_bursty", "python_floor"), s.name  # these only print


def test_unknown_names_are_refused(capsys: object) -> None:
    assert smoke.main(["--only", "no-such-bench"]) == 2
