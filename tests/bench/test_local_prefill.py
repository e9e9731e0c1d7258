"""bench/planner/local_prefill.py: the limit is chosen on the tuning seeds only, and the README
section is generated from the committed result file."""

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH / "planner"), str(BENCH)]
import local_prefill  # noqa: E402


def _run(seed: int, policy: str, limit: int, att: float, gpu_h: float, budget: int | None = None) -> dict:
    return {"seed": seed, "policy": policy, "limit": limit, "decode_token_budget": budget,
            "attainment_after_warmup": att, "gpu_hours": gpu_h}


def test_the_limit_is_chosen_on_the_tuning_seeds_only() -> None:
    runs = [
        # Tuning seeds 0 and 1: planner attainment 0.80 / 0.90 mean at limit 8192 and at 16384, 0.70 off;
        # static is cheaper at 16384, so the tie goes there.
        _run(0, "planner", 0, 0.6, 1.0), _run(1, "planner", 0, 0.8, 1.0),
        _run(0, "planner", 8192, 0.8, 1.0), _run(1, "planner", 8192, 1.0, 1.0),
        _run(0, "planner", 16384, 0.9, 1.0), _run(1, "planner", 16384, 0.9, 1.0),
        _run(0, "static", 0, 0.99, 2.0), _run(1, "static", 0, 0.99, 2.0),
        _run(0, "static", 8192, 0.99, 1.8), _run(1, "static", 8192, 0.99, 1.8),
        _run(0, "static", 16384, 0.99, 1.5), _run(1, "static", 16384, 0.99, 1.5),
        # A held-out seed that would pick 8192 if it counted.
        _run(3, "planner", 8192, 1.0, 1.0), _run(3, "planner", 16384, 0.1, 1.0),
        _run(3, "static", 8192, 0.99, 1.0), _run(3, "static", 16384, 0.99, 9.0),
    ]
    assert local_prefill.choose(runs, [0, 1]) == (16384, None)
    assert local_prefill.choose(runs, [3]) == (8192, None)
    # The same numbers at a 1024-token decode budget: a tie, which goes to the default budget; better, it wins.
    same = [_run(r["seed"], r["policy"], r["limit"], r["attainment_after_warmup"], r["gpu_hours"], 1024)
            for r in runs if r["limit"]]
    assert local_prefill.choose(runs + same, [0, 1]) == (16384, None)
    better = [r | {"attainment_after_warmup": 0.95} if r["policy"] == "planner" and r["limit"] == 8192 else r
              for r in same]
    assert local_prefill.choose(runs + better, [0, 1]) == (8192, 1024)


def test_the_readme_section_is_the_result_files() -> None:
    doc = json.loads(local_prefill.DEFAULT_OUT.read_text())
    text = local_prefill.README.read_text()
    assert local_prefill.readme_section(doc) in text
    chosen = (doc["chosen"]["limit"], doc["chosen"]["decode_token_budget"])
    assert chosen == local_prefill.choose(doc["runs"], doc["tuning_seeds"])
    held = [r for r in doc["runs"] if r["seed"] in doc["held_out_seeds"]]
    # Run only off and at the chosen arm.
    assert held and {(r["limit"], r["decode_token_budget"]) for r in held} <= {(0, None), chosen}
