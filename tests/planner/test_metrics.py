"""The pdserve_planner_* names the chart's dashboard and alerts query."""

from prometheus_client import generate_latest

from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.shell.metrics import PlannerMetrics
from pdserve.planner.core.observation import Observation, PoolState


def test_planner_metrics_exposition():
    m = PlannerMetrics()
    obs = Observation(timestamp=0, prefill=PoolState(1), decode=PoolState(1), request_rate=3.0, mean_isl=500.0)
    ok = ScalingDecision(2, 3, "up", explanation={"forecast": {"requestRate": 3.5}, "capacity": {"prefillCorrection": 1.1}})
    held = ScalingDecision(2, 3, "held: x", held=True, hold_key="stale-metrics")
    m.record("svc", "ns", obs, ok, 2000, 50)
    text = generate_latest(m.registry).decode()
    for line in ('pdserve_planner_desired_replicas{namespace="ns",pool="decode",service="svc"} 3.0',
                 'pdserve_planner_observed_request_rate{namespace="ns",service="svc"} 3.0',
                 'pdserve_planner_predicted_request_rate{namespace="ns",service="svc"} 3.5',
                 'pdserve_planner_slo_ttft_seconds{namespace="ns",service="svc"} 2.0',
                 'pdserve_planner_slo_itl_seconds{namespace="ns",service="svc"} 0.05',
                 'pdserve_planner_decisions_total{namespace="ns",service="svc"} 1.0',
                 'pdserve_planner_held{namespace="ns",service="svc"} 0.0',
                 'pdserve_planner_correction_factor{namespace="ns",pool="prefill",service="svc"} 1.1',
                 # never held yet: every reason's counter exists at 0
                 'pdserve_planner_held_decisions_total{namespace="ns",reason="stale-metrics",service="svc"} 0.0',
                 'pdserve_planner_held_decisions_total{namespace="ns",reason="missing-data",service="svc"} 0.0'):
        assert line in text, line
    m.record("svc", "ns", obs, held)
    text = generate_latest(m.registry).decode()
    assert 'pdserve_planner_held{namespace="ns",service="svc"} 1.0' in text
    assert 'pdserve_planner_held_decisions_total{namespace="ns",reason="stale-metrics",service="svc"} 1.0' in text
    assert 'pdserve_planner_observed_isl{namespace="ns",service="svc"} 500.0' in text
