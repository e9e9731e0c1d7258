"""bench/planner/evaluate.py takes the router's flags and every replay runs with them."""

import sys
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH / "planner"), str(BENCH)]
from evaluate import build_parser  # noqa: E402
from references import Setup  # noqa: E402

from pdserve.planner.core.profile_model import derive_profile  # noqa: E402
from pdserve.router.core.spec import PolicyName, RoutingSpec  # noqa: E402
from pdserve.router.shell.config import routing_from_args  # noqa: E402
from pdserve.sim.metrics import Slo  # noqa: E402


def test_router_flags_reach_every_replay() -> None:
    args = build_parser().parse_args(["--bursty", "0", "--out", "x.json", "--max-prefill-queue-tokens", "16384",
                                      "--decode-policy", "least_loaded"])
    spec = routing_from_args(args)
    assert spec == RoutingSpec(decode_policy=PolicyName.LEAST_LOADED, max_prefill_queue_tokens=16384)
    s = Setup("llama-3.1-8b-h100", derive_profile("llama-3.1-8b-h100"), 1, 1, 4, 4, Slo(), 30.0, 60.0)
    assert s.sim_config(1, 1).routing == RoutingSpec()  # the router's defaults unless given
    assert replace(s, routing=spec).sim_config(2, 1).routing == spec
    # Without the flags: the router's defaults, as before.
    default = build_parser().parse_args(["--bursty", "0", "--out", "x.json"])
    assert routing_from_args(default) == RoutingSpec()
