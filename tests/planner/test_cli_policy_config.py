"""``pdserve planner run``'s policy flags reach the PolicyConfig fields they name (``cli.policy_config``): each flag
set away from its default moves its own field to the value given and no other, every flag of the policy group is in
the table, and the TP sizes fall back to the capacity profile's."""

from __future__ import annotations

import dataclasses

import pytest

from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.profile_model import derive_profile
from pdserve.planner.shell.cli import build_parser, policy_config

# flag (with its value, if any) -> (field, value the field must take). Every value differs from the default.
FLAGS: dict[tuple[str, ...], tuple[str, object]] = {
    ("--ttft-ms", "700"): ("ttft_slo_ms", 700.0),
    ("--itl-ms", "30"): ("itl_slo_ms", 30.0),
    ("--attainment", "0.95"): ("attainment", 0.95),
    ("--interval", "15"): ("interval_s", 15.0),
    ("--predictor", "arima"): ("predictor", "arima"),
    ("--seasonal-periods", "4"): ("seasonal_periods", 4),
    ("--prefill-min", "2"): ("prefill_min", 2),
    ("--prefill-max", "6"): ("prefill_max", 6),
    ("--decode-min", "2"): ("decode_min", 2),
    ("--decode-max", "5"): ("decode_max", 5),
    ("--prefill-tp", "2"): ("prefill_tp", 2),
    ("--decode-tp", "8"): ("decode_tp", 8),
    ("--gpu-budget", "40"): ("gpu_budget", 40),
    ("--stabilization-s", "45"): ("scale_down_stabilization_s", 45.0),
    ("--startup-s", "90"): ("startup_s", 90.0),
    ("--scale-to-zero",): ("scale_to_zero", True),
    ("--target-utilization", "0.8"): ("target_utilization", 0.8),
    ("--burst-budget", "1"): ("burst_budget_s", 1.0),
    ("--burst-fit-budget", "none"): ("burst_fit_budget_s", None),
    ("--burst-absorb-fraction", "0.5"): ("burst_absorb_fraction", 0.5),
    ("--burst-level-ratio", "2"): ("burst_level_ratio", 2.0),
    ("--burst-miss-budget", "0.5"): ("burst_miss_budget", 0.5),
    ("--lone-burst-s", "300"): ("lone_burst_s", 300.0),
    ("--prefill-utilization", "0.95"): ("prefill_utilization", 0.95),
    ("--no-hold-prefill-on-rise",): ("hold_prefill_on_rise", False),
    ("--hold-decode-on-rise",): ("hold_decode_on_rise", True),
    ("--correction-engage-pool",): ("correction_engage_pool", True),
    ("--prefill-utilization-min-replicas", "2"): ("prefill_utilization_min_replicas", 2),
    ("--no-burst-on-level",): ("burst_on_level", False),
    ("--no-prefill-pool-queueing",): ("prefill_pool_queueing", False),
    ("--prefill-headroom-on-rise",): ("prefill_headroom_on_rise", True),
    ("--prefill-ratio-floor", "0.9"): ("prefill_ratio_floor", 0.9),
    ("--correction-backlog-s", "120"): ("correction_backlog_s", 120.0),
    ("--no-drain-starting",): ("drain_starting", False),
    ("--decode-link-release", "0.7"): ("decode_link_release", 0.7),
    ("--ramp-projection-s", "30"): ("ramp_projection_s", 30.0),
    ("--ramp-ticks", "3"): ("ramp_ticks", 3),
    ("--scale-down-stabilization-max-replicas", "1"): ("scale_down_stabilization_max_replicas", 1),
    ("--scale-down-clear-fraction", "0.9"): ("scale_down_clear_fraction", 0.9),
    ("--scale-down-clear-quantile", "none"): ("scale_down_clear_quantile", None),
    ("--no-stabilize-drain",): ("stabilize_drain", False),
    ("--no-scale-down-clear-after-burst",): ("scale_down_clear_after_burst", False),
    ("--no-release-only-cleared",): ("release_only_cleared", False),
    ("--release-only-cleared-max-replicas", "none"): ("release_only_cleared_max_replicas", None),
    ("--no-correction-decode-curve",): ("correction_decode_curve", False),
    ("--decode-queue-compute",): ("decode_queue_compute", True),
    ("--decode-correction-max", "3"): ("correction_bounds_decode", (0.67, 3.0)),
}
# Policy-group flags that choose the capacity profile rather than a PolicyConfig field.
PROFILE_FLAGS = {"--profile", "--model-profile", "--mock-speedup"}

PROFILE = derive_profile("llama-3.1-70b-tp4-h100")


def _config(*argv: str) -> PolicyConfig:
    return policy_config(build_parser().parse_args(["run", *argv]), PROFILE)


@pytest.mark.parametrize("argv,field_value", FLAGS.items(), ids=[a[0] for a in FLAGS])
def test_each_flag_sets_its_own_field(argv: tuple[str, ...], field_value: tuple[str, object]) -> None:
    field, value = field_value
    base, cfg = dataclasses.asdict(_config()), dataclasses.asdict(_config(*argv))
    assert base[field] != value, "the table's value must differ from the default to show the flag reached it"
    assert cfg[field] == value
    assert {k for k in cfg if cfg[k] != base[k]} == {field}, "the flag moved another field too"


def test_every_policy_flag_is_in_the_table() -> None:
    run = next(a for a in build_parser()._actions if a.dest == "cmd").choices["run"]
    group = next(g for g in run._action_groups if (g.title or "").startswith("policy"))
    flags = {s for a in group._group_actions for s in a.option_strings if not s.startswith("--no-")}
    named = {argv[0].replace("--no-", "--") for argv in FLAGS}
    assert flags - PROFILE_FLAGS == named


def test_defaults_are_the_policy_s_but_the_slo_and_the_profile_s_tp() -> None:
    cfg = _config()
    assert (cfg.prefill_tp, cfg.decode_tp) == (4, 4)  # llama-3.1-70b-tp4-h100's
    differ = {f.name for f in dataclasses.fields(PolicyConfig)
              if getattr(cfg, f.name) != getattr(PolicyConfig(), f.name)}
    # The CLI's TTFT default is 2 s (PolicyConfig's 1 s is the library's); TP from the profile.
    assert differ == {"ttft_slo_ms", "prefill_tp", "decode_tp"}


def test_a_bad_combination_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="prefill min 3 > max 2"):
        _config("--prefill-min", "3", "--prefill-max", "2")


def test_the_decode_correction_max_at_the_shared_bound_is_no_bound_of_its_own_and_under_1_is_refused() -> None:
    assert _config("--decode-correction-max", str(PolicyConfig.correction_bounds[1])).correction_bounds_decode is None
    with pytest.raises(ValueError, match="decode correction bounds"):
        _config("--decode-correction-max", "0.9")
