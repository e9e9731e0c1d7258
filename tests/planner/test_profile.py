import json

import pytest
from pydantic import ValidationError

from pdserve.planner.core.profile import CapacityProfile
from capacity_profiles import PREFILL_TOK_S, queue_profile


def test_prefill_capacity_under_ttft(profile):
    # ISL 1024: service 102.4 ms; tail = S + 4*rho*S/(2(1-rho)) <= 500 ms -> rho ~ 0.66
    cap = profile.prefill_capacity(1024, 500)
    rho = cap / PREFILL_TOK_S
    tail = 102.4 + 4 * rho * 102.4 / (2 * (1 - rho))
    # Linear interpolation between sweep points is conservative: never above the SLO.
    assert 0.6 < rho < 0.7 and 0.85 * 500 <= tail <= 500
    # A looser SLO never gives less capacity; an impossible one gives zero.
    assert profile.prefill_capacity(1024, 2000) >= cap
    assert profile.prefill_capacity(16384, 100) == 0.0


def test_interpolation_and_coverage(profile):
    a, b = profile.prefill_capacity(1024, 2000), profile.prefill_capacity(4096, 2000)
    mid = profile.prefill_capacity(2560, 2000)
    assert min(a, b) <= mid <= max(a, b)
    assert profile.prefill_capacity(20000, 2000) is None
    assert profile.prefill_capacity(10, 2000) is None
    assert profile.decode_capacity(50_000, 50) is None
    # Decode at context 1024: tail ITL crosses 50 ms between concurrency 128 and 256.
    thr = lambda c: c / (0.010 + 0.0002 * c * 1.024)  # noqa: E731
    assert thr(128) < profile.decode_capacity(1024, 50) < thr(256)
    assert profile.decode_capacity(16384, 20) < profile.decode_capacity(128, 20)


def test_expected_latency_grows_with_load(profile):
    lo = profile.expected_ttft_ms(1024, 1000)
    hi = profile.expected_ttft_ms(1024, 9000)
    beyond = profile.expected_ttft_ms(1024, 20000)
    assert lo < hi < beyond
    assert profile.expected_itl_ms(1024, 100) < profile.expected_itl_ms(1024, 5000)


def test_roundtrip_and_version(tmp_path, profile):
    path = tmp_path / "p.json"
    profile.dump(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and "throughputTokensPerS" in data["prefill"]["points"][0]
    assert CapacityProfile.load(path) == profile
    data["version"] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationError, match="version 7 is not supported"):
        CapacityProfile.load(path)
    path.write_text("{nope")
    with pytest.raises(ValueError, match="not JSON"):
        CapacityProfile.load(path)


def test_rejects_unknown_fields():
    data = queue_profile().model_dump(by_alias=True)
    data["prefill"]["points"][0]["ttft"] = 1
    with pytest.raises(ValidationError, match="ttft"):
        CapacityProfile.model_validate(data)
