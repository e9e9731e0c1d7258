"""One routing spec: the CRD, the router's flags and the simulator build the same policies."""

from __future__ import annotations

import pytest

from pdserve.api.spec import RouterSpec
from pdserve.router.shell.cli import build_parser, config_from_args
from pdserve.router.shell.config import RouterConfig, routing_flags
from pdserve.router.core.build import PolicySet
from pdserve.router.core.spec import AdmissionSpec, PolicyName, RoutingSpec
from pdserve.router.policies import CostWeights, Policy
from pdserve.router.shell.state import RouterState
from pdserve.sim.config import SimConfig
from pdserve.sim.simulator import Simulation
from pdserve.sim.traces import synthetic_trace


def _described(p: Policy) -> tuple[str, int, CostWeights | None]:
    return p.name, p.block_size, getattr(p, "weights", None)


def _set(ps: PolicySet) -> list[tuple[str, int, CostWeights | None]]:
    return [_described(p) for p in ps.all()]


SPECS = [
    RoutingSpec(),
    RoutingSpec(policy=PolicyName.PREFIX_APPROX, decode_policy=PolicyName.KV_AWARE, block_size=32,
                weights=CostWeights(overlap_weight=3.0, kv_tokens=512.0, tie_fraction=0.02),
                disagg_threshold_tokens=128, decode_reuse_threshold_tokens=4096, max_prefill_queue_tokens=32768,
                admission=AdmissionSpec(500.0, 2.0, 9000.0)),
    RoutingSpec(policy=PolicyName.CACHE_AWARE),
]


@pytest.mark.parametrize("spec", SPECS)
def test_flags_read_back_as_the_same_spec(spec: RoutingSpec) -> None:
    args = build_parser().parse_args(["--decode", "http://127.0.0.1:1", *routing_flags(spec)])
    assert config_from_args(args).routing == spec


def test_crd_router_section_becomes_the_routing_spec() -> None:
    crd = RouterSpec.model_validate({"policy": "prefix_approx", "decodePolicy": "round_robin",
                                     "disaggThresholdTokens": 64, "decodeReuseThresholdTokens": 4096,
                                     "maxPrefillQueueTokens": 32768, "weights": {"overlap": 3, "kvTokens": 100}})
    spec = crd.routing(block_size=32)
    assert spec == RoutingSpec(policy=PolicyName.PREFIX_APPROX, decode_policy=PolicyName.ROUND_ROBIN, block_size=32,
                               disagg_threshold_tokens=64, decode_reuse_threshold_tokens=4096,
                               max_prefill_queue_tokens=32768, weights=CostWeights(overlap_weight=3.0, kv_tokens=100.0))
    with pytest.raises(ValueError, match="policy"):
        RouterSpec.model_validate({"policy": "fastest"})


@pytest.mark.parametrize("spec", SPECS)
def test_live_router_and_simulator_build_the_same_policies(spec: RoutingSpec) -> None:
    """The kv_tokens drift: the simulator's prefill-pool kv_aware used to keep kv_tokens=2048
    while the live router's (pool_weights(..., "prefill")) had 0."""
    live = RouterState(RouterConfig(prefill=["http://p:1"], decode=["http://d:1"], routing=spec, tokenizer_mode="mock"))
    trace = synthetic_trace(4, 1.0, (100, 200), (2, 4), seed=0)
    sim = Simulation(trace, SimConfig(prefill_instances=1, decode_instances=1, block_size=spec.block_size,
                                      routing=spec))
    assert _set(sim.scheduler.policies) == _set(live.scheduler.policies)
    for ps in (sim.scheduler.policies, live.scheduler.policies):
        if isinstance(w := getattr(ps.prefill, "weights", None), CostWeights):
            assert w.kv_tokens == 0.0  # a prefill pool never charges KV usage
        if isinstance(w := getattr(ps.local_decode, "weights", None), CostWeights):
            assert w.kv_tokens == spec.weights.kv_tokens


def test_default_sim_prefill_pool_kv_aware_has_no_kv_charge() -> None:
    sim = Simulation(synthetic_trace(4, 1.0, (100, 200), (2, 4), seed=0), SimConfig())
    assert sim.scheduler.policies.prefill.name == "kv_aware"
    assert sim.scheduler.policies.prefill.weights.kv_tokens == 0.0  # type: ignore[attr-defined]
    assert sim.scheduler.policies.pd_decode.name == "least_loaded"


def test_the_live_state_decides_on_its_injected_clock() -> None:
    from pdserve.common.clock import VirtualClock
    from pdserve.router.shell.discovery import Endpoint, Endpoints
    from pdserve.router.policies import RouteRequest

    clock = VirtualClock(1000.0)
    st = RouterState(RouterConfig(decode=["http://d:1"], routing=RoutingSpec(policy=PolicyName.LEAST_LOADED),
                                  tokenizer_mode="mock"), clock=clock)
    st.apply_endpoints(Endpoints(decode=(Endpoint("http://d:1"),), source="test"))
    req = RouteRequest("r1", (), (), 100)
    choice = st.choose("decode", st.decode_policy, req, set())
    assert choice is not None
    st.scheduler.on_routed(st.decode_policy, choice.decision, req, clock.monotonic())
    assert st.decode_policy.ledger.requests("http://d:1") == 1
    # The ledger forgets a request never reported finished after its TTL (600 s) on the
    # router's clock: only the injected clock moved, not the wall clock.
    clock.advance(601.0)
    st.choose("decode", st.decode_policy, RouteRequest("r2", (), (), 100), set())
    assert st.decode_policy.ledger.requests("http://d:1") == 0


def test_worker_cooldowns_follow_the_injected_clock() -> None:
    from pdserve.common.clock import VirtualClock
    from pdserve.router.shell.discovery import Endpoint, Endpoints

    # Far from the machine's monotonic reading: a cool-down set on the wall clock would
    # already be over (or never end) at this virtual time.
    clock = VirtualClock(1e9)
    st = RouterState(RouterConfig(decode=["http://d:1"], routing=RoutingSpec(policy=PolicyName.LEAST_LOADED),
                                  tokenizer_mode="mock", worker_cooldown_s=2.0), clock=clock)
    st.apply_endpoints(Endpoints(decode=(Endpoint("http://d:1"),), source="test"))
    st.pool.mark_failed("http://d:1")  # as the relay does on a lost stream: no explicit time
    assert st.pool.views("decode", fail_open=False) == []
    assert st.pool.views("decode", clock.monotonic(), fail_open=False) == []
    clock.advance(2.5)
    assert [v.worker_id for v in st.pool.views("decode", clock.monotonic(), fail_open=False)] == ["http://d:1"]


def test_relay_reports_prefill_done_on_the_injected_clock() -> None:
    from types import SimpleNamespace

    from pdserve.common.clock import VirtualClock
    from pdserve.router.shell.relay import _Clock

    clock = VirtualClock(1e9)
    st = RouterState(RouterConfig(decode=["http://d:1"], routing=RoutingSpec(policy=PolicyName.LEAST_LOADED),
                                  tokenizer_mode="mock"), clock=clock)
    seen: list[tuple[str, float]] = []

    class Spy:
        def on_prefill_done(self, request_id: str, now: float) -> None:
            seen.append((request_id, now))

    flow = SimpleNamespace(mode="local", arrived=0.0, trace=None, route=SimpleNamespace(request_id="r1"))
    _Clock(st, flow, Spy()).tokens(3)
    assert seen == [("r1", 1e9)]
