"""An analytic capacity profile with known numbers, for planner tests.

Its own module, not conftest.py: every test folder has a conftest and pytest imports them all as the one
module name ``conftest``, so ``from conftest import`` can find another folder's (tests/common/test_conftest_imports).
"""

from __future__ import annotations

from pdserve.planner.core.policy import PlannerPolicy, PolicyConfig
from pdserve.planner.core.profile import CapacityProfile

PREFILL_TOK_S = 10_000.0  # one prefill replica's prompt-token throughput at saturation


def queue_profile(prefill_tok_s: float = PREFILL_TOK_S) -> CapacityProfile:
    """Prefill: an M/D/1 queue per ISL; decode: ITL = 10 ms + 0.2 ms x concurrency x context/1k."""
    pre = []
    for isl in (64, 256, 1024, 4096, 16384):
        service = isl / prefill_tok_s
        for rho in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
            wait = rho * service / (2 * (1 - rho))
            pre.append({"isl": isl, "throughputTokensPerS": rho * prefill_tok_s,
                        "ttftMeanMs": 1000 * (service + wait), "ttftTailMs": 1000 * (service + 4 * wait)})
    dec = []
    for ctx in (128, 1024, 4096, 16384):
        for c in (1, 8, 32, 64, 128, 256):
            itl = 0.010 + 0.0002 * c * ctx / 1000
            dec.append({"context": ctx, "concurrency": c, "throughputTokensPerS": c / itl,
                        "itlMeanMs": 1000 * itl, "itlTailMs": 1000 * itl * 1.05})
    return CapacityProfile.model_validate({
        "version": 1, "model": "test", "hardware": "analytic", "source": "tests",
        "prefill": {"tensorParallelSize": 1, "points": pre},
        "decode": {"tensorParallelSize": 1, "points": dec},
    })


def queue_policy(**kw) -> PlannerPolicy:
    """A planner on ``queue_profile()`` with the settings the hand-computed policy cases assume (constant
    predictor, 10 s ticks, no correction, no scale-down stabilisation, 0.8 utilisation, the prefill pool read as
    lone replicas, releases on a rise), ``kw`` on top."""
    cfg = PolicyConfig(**({"predictor": "constant", "interval_s": 10, "prefill_max": 32, "decode_max": 32,
                           "ttft_slo_ms": 1000, "itl_slo_ms": 50, "correction": False, "startup_s": 30,
                           "scale_down_stabilization_s": 0, "target_utilization": 0.8,
                           "prefill_pool_queueing": False, "hold_prefill_on_rise": False} | kw))
    return PlannerPolicy(cfg, queue_profile())
