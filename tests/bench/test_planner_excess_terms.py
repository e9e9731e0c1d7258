"""bench/planner/excess_terms.py: each scored tick's excess over the best schedule goes to what set the planner's
size at that tick. Hand-made ticks of two 4-GPU pools."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

from excess_terms import TickWhy, at, attribute, cause  # noqa: E402


def _why(t: float, target: tuple[int, int], want: tuple[int, int], binding=("compute", "compute"),
         pc: float | None = None, pc_now: float | None = None) -> TickWhy:
    return TickWhy(t, target, want, binding, pc, pc_now)


def test_a_tick_s_cause() -> None:
    # asked for 2 prefill, sized 2 on the compute term: at the arriving rate the term reads 0.9 -> 1 replica
    assert cause(_why(0, (2, 1), (2, 1), pc=1.2, pc_now=0.9), 0, 2) == "compute_forecast"
    # at the arriving rate it still needs 2 (1.1): the headroom and the profile, not the forecast
    assert cause(_why(0, (2, 1), (2, 1), pc=1.3, pc_now=1.1), 0, 2) == "compute"
    # exactly 1.0 at the arriving rate is one replica
    assert cause(_why(0, (2, 1), (2, 1), pc=1.2, pc_now=1.0), 0, 2) == "compute_forecast"
    # wanted 1, kept 2: held; running 3 where the decision said 2: lag
    assert cause(_why(0, (2, 1), (1, 1), pc=0.8, pc_now=0.8), 0, 2) == "held"
    # which gate kept them, from the decision's reason (PlannerPolicy._clamp's notes) or its hold key
    gates = TickWhy.gates("prefill 2->2, decode 2->2 (scale-down stabilised over 60s; decode: requests still queued)",
                          None)
    assert gates == ("stabilised", "queued")
    assert TickWhy.gates("prefill 3->3, decode 1->1 (prefill: prompt tokens rising (9 -> 10/s), not shrinking)",
                         None) == ("rising", "")
    assert TickWhy.gates("held: metrics are 90s old (limit 60s)", "stale-metrics") == (
        "hold_stale-metrics", "hold_stale-metrics")
    # a decision held whole (no sizing, so no want) is the hold's
    stale = TickWhy.of(0, (2, 1), {}, "held: metrics are 90s old (limit 60s)", "stale-metrics")
    assert cause(stale, 0, 2) == "held_hold_stale-metrics"
    held = TickWhy(0, (2, 2), (1, 1), ("compute", "compute"), held_by=gates)
    assert (cause(held, 0, 2), cause(held, 1, 2)) == ("held_stabilised", "held_queued")
    assert cause(_why(0, (2, 1), (2, 1)), 0, 3) == "lag"
    # other terms by name, decode's compute never split
    assert cause(_why(0, (3, 2), (3, 2), binding=("peak", "link")), 0, 3) == "peak"
    assert cause(_why(0, (3, 2), (3, 2), binding=("peak", "compute"), pc=1.0, pc_now=0.1), 1, 2) == "compute"


def test_tick_why_reads_a_decision_s_explanation() -> None:
    expl = {"demand": {"prefillReplicas": 2, "decodeReplicas": 1, "prefillTokensPerS": 14_612.0,
                       "arrivingPromptTokensPerS": 11_028.0,
                       "terms": {"prefill_compute": 1.4567, "binding_prefill": "compute", "binding_decode": "compute"}}}
    w = TickWhy.of(660.0, (2, 1), expl)
    assert (w.want, w.binding) == ((2, 1), ("compute", "compute"))
    # the compute term scales with the prompt-token rate: 1.4567 x 11,028 / 14,612 = 1.0994 -> still 2
    assert w.prefill_compute_arriving == pytest.approx(1.0994, abs=1e-4)
    assert cause(w, 0, 2) == "compute"


def test_attribute_counts_scored_ticks_in_gpus() -> None:
    whys = [_why(0, (3, 2), (3, 2), ("peak", "compute")), _why(30, (3, 2), (2, 2), ("compute", "compute")),
            _why(60, (2, 1), (2, 1), ("compute", "compute"), pc=1.2, pc_now=0.9)]
    planner = [(0.0, 3, 2), (30.0, 3, 2), (60.0, 2, 1)]
    best = [(0.0, 1, 1), (30.0, 1, 1), (60.0, 1, 1)]
    out = attribute(whys, planner, best, 30.0, (4, 4))
    # tick 0 is history; tick 30: 2 prefill held, 1 decode on compute; tick 60: 1 prefill on the forecast
    assert out["excess_gpu_ticks"] == {"prefill": {"compute_forecast": 4, "held": 8}, "decode": {"compute": 4}}
    assert out["best_gpu_ticks"] == 16 and out["excess_share_of_best"] == pytest.approx(16 / 16)
    # The best schedule records its changes only: 1P1D from 0 s, 2P1D from 45 s, read at each tick
    assert at([(0.0, 1, 1), (45.0, 2, 1)], 30.0) == (1, 1) and at([(0.0, 1, 1), (45.0, 2, 1)], 60.0) == (2, 1)
    out = attribute(whys, planner, [(0.0, 1, 1), (45.0, 2, 1)], 30.0, (4, 4))
    assert out["excess_gpu_ticks"] == {"prefill": {"held": 8}, "decode": {"compute": 4}}
    assert out["best_gpu_ticks"] == 8 + 12
