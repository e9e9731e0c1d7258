import json
import subprocess
import sys

import pytest

from pdserve.planner.core.profile import CapacityProfile
from pdserve.planner.shell.profile_cli import main
from pdserve.planner.core.profile_model import derive_profile


def test_derived_profile_is_consistent():
    p = derive_profile("opt-13b-a100")
    assert p.prefill.tensor_parallel_size == 1 and p.source.startswith("sim:opt-13b-a100")
    # Longer prompts cost more per token (attention), tighter SLOs allow less load.
    assert p.prefill_capacity(2048, 2000) < p.prefill_capacity(256, 2000)
    assert p.prefill_capacity(1024, 300) < p.prefill_capacity(1024, 2000)
    assert p.decode_capacity(2048, 50) < p.decode_capacity(256, 50)
    tp4 = derive_profile("llama-3.1-70b-tp4-h100")
    assert tp4.prefill.tensor_parallel_size == 4


def test_time_scaled_profile():
    p = derive_profile("opt-13b-a100")
    fast = p.time_scaled(10)
    assert fast.prefill_capacity(512, 200) == pytest.approx(10 * p.prefill_capacity(512, 2000), rel=1e-6)
    assert fast.decode_capacity(512, 5) == pytest.approx(10 * p.decode_capacity(512, 50), rel=1e-6)
    with pytest.raises(ValueError, match="speedup must be > 0"):
        p.time_scaled(0)


def test_profile_cli_sim(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["--sim", "--model-profile", "opt-13b-a100", "--mock-speedup", "5", "--out", str(out)]) == 0
    prof = CapacityProfile.load(out)
    assert "x5 speed-up" in prof.source
    assert main(["--sim", "--model-profile", "nope", "--out", str(out)]) == 2
    assert "unknown performance profile 'nope'" in capsys.readouterr().err


def test_profile_cli_sim_holds_the_front_end_as_a_measured_profile_does(tmp_path):
    # A sweep against an endpoint measures TTFT with the engine's front end, and the planner's
    # default correction compares the prefill pods' TTFT (which holds it) with the profile.
    out = tmp_path / "p.json"
    assert main(["--sim", "--model-profile", "llama-3.1-8b-h100", "--out", str(out)]) == 0
    with_front = derive_profile("llama-3.1-8b-h100", include_frontend=True)
    assert CapacityProfile.load(out).model_dump() == with_front.model_dump()
    assert main(["--sim", "--model-profile", "llama-3.1-8b-h100", "--no-frontend", "--out", str(out)]) == 0
    engine_only = CapacityProfile.load(out)
    assert engine_only.model_dump() == derive_profile("llama-3.1-8b-h100").model_dump()
    # 22 ms on this profile (efficiency.frontend_latency_s)
    assert with_front.prefill.points[0].ttft_mean_ms - engine_only.prefill.points[0].ttft_mean_ms == \
        pytest.approx(22.0)


@pytest.mark.slow
def test_profile_cli_sweeps_a_live_mock_worker(tmp_path):
    from pdserve.worker.testing import start_worker

    out = tmp_path / "sweep.json"
    # A modest speed-up: the mock must stay faster than this shared CPU, or batching cannot show.
    with start_worker("mock", speedup=2, profile="opt-13b-a100") as w:
        proc = subprocess.run([sys.executable, "-m", "pdserve.cli", "profile", "--endpoint", w.url, "--isl", "128",
                               "--context", "128", "--level-seconds", "0.8", "--max-concurrency", "4",
                               "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    prof = CapacityProfile.load(out)
    assert prof.isl_range() == (128, 128) and len(prof.prefill.points) >= 2
    assert {p.concurrency for p in prof.decode.points} == {1, 2, 4}
    data = json.loads(out.read_text())
    assert data["source"] == f"sweep {w.url}"
    # Higher concurrency, more decode throughput: the sweep measured real batching.
    pts = sorted(prof.decode.points, key=lambda p: p.concurrency)
    assert pts[-1].throughput > 1.5 * pts[0].throughput
    assert prof.prefill_capacity(128, 10_000) > 0


def test_profile_cli_bad_endpoint(tmp_path, capsys):
    assert main(["--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "x.json")]) == 2
    assert "127.0.0.1:9" in capsys.readouterr().err


def test_derived_profile_can_hold_the_engines_front_end():
    """The prefill pods' TTFT (and a sweep against a prefill endpoint) holds the engine's front end: 22 ms on the 8B
    H100 profile; the derived profile's TTFT holds it with include_frontend, at every point, mean and tail alike."""
    plain = derive_profile("llama-3.1-8b-h100")
    front = derive_profile("llama-3.1-8b-h100", include_frontend=True)
    assert "front end included" in front.source
    pairs = list(zip(plain.prefill.points, front.prefill.points))
    assert len(pairs) > 50
    for a, b in pairs:
        assert (b.isl, b.throughput) == (a.isl, a.throughput)
        assert b.ttft_mean_ms == pytest.approx(a.ttft_mean_ms + 22.0) and b.ttft_tail_ms == pytest.approx(a.ttft_tail_ms + 22.0)
    assert front.expected_ttft_ms(1536, 2000.0) == pytest.approx(plain.expected_ttft_ms(1536, 2000.0) + 22.0)
    # the 70B TP4 profile models no front end (0): the same either way
    assert derive_profile("llama-3.1-70b-tp4-h100", include_frontend=True).prefill == derive_profile("llama-3.1-70b-tp4-h100").prefill
