"""bench/planner/evaluate.py's planner variants: one table (bench/planner/variants.py) that the dispatch,
the "unknown policy" message and the plot read, and every variant replays the configuration its result
records."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH / "planner"), str(BENCH)]
import evaluate  # noqa: E402

from pdserve.planner.core.policy import PolicyConfig  # noqa: E402
from pdserve.planner.core.profile_model import derive_profile  # noqa: E402

AZURE = str(BENCH / "sim" / "data" / "azure_conv_excerpt.csv")
# Every variant evaluate.py runs, by hand (session 14).
ALL = ["planner", "planner_constant", "planner_irate", "planner_burst", "planner_fit", "planner_next", "planner_link",
       "planner_link_path", "planner_next2", "planner_young", "planner_next4", "planner_no_level", "planner_next5",
       "planner_next6", "planner_miss_budget", "planner_next7", "planner_lone"]
# The profile whose TTFTs hold the engine's front end (evaluate.py's default model and KV link).
FRONT = derive_profile("llama-3.1-8b-h100", kv_link_gbps=100.0, include_frontend=True)
NEXT2 = {"cold_start_link": True, "correction_pool_ttft": True, "profile_frontend": True, "min_level_smoothing": 0.5}


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policies: list[str], *flags: str) -> tuple[dict, dict, list]:
    """evaluate.main on 150 requests; the PolicyConfig (and whether the profile holds the front end) each replay
    was built with, in order, and the plot's legend."""
    built: list = []
    real = evaluate.PlannerPolicy

    def spy(cfg: PolicyConfig, profile):  # type: ignore[no-untyped-def]
        built.append((cfg, profile == FRONT))
        return real(cfg, profile)

    import matplotlib.pyplot as plt

    legend: list = []
    close = plt.close

    def keep(fig):  # type: ignore[no-untyped-def]
        legend.extend(fig.axes[1].get_legend_handles_labels()[1])
        close(fig)

    monkeypatch.setattr(evaluate, "PlannerPolicy", spy)
    monkeypatch.setattr(plt, "close", keep)
    out = tmp_path / "e.json"
    assert evaluate.main(["--trace", AZURE, "--duration", "0", "--limit", "150", "--warmup", "10", "--policies",
                          *policies, *flags, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    return doc["results"], dict(zip([n for n in doc["results"] if n != "reactive"], built)), legend


def test_each_variant_replays_what_it_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, cfgs, legend = run(tmp_path, monkeypatch, ["reactive", *ALL])
    assert list(results) == ["reactive", *ALL]
    pw = PolicyConfig.peak_window_s
    shipped = {"burst_budget_s": 2.0, "burst_fit_budget_s": 4.0, "burst_absorb_fraction": 0.9}
    # Written out by hand: each variant's own knobs, then planner_next2's parts, shipped since session 15 (PRE15: off,
    # as the planner before session 15 had them, for the development variants measured against that planner).
    young = {"arriving_young": "peak"}
    # burst_level_ratio: 1.5 since session 17; None in the variants measured against earlier planners
    level, no_level = {"burst_level_ratio": 1.5}, {"burst_level_ratio": None}
    shipped_next2 = {**NEXT2, **young, **level}
    pre15 = {"cold_start_link": False, "correction_pool_ttft": False, "profile_frontend": False,
             "min_level_smoothing": None, **young, **no_level}
    path = results["planner_link_path"]["params"].get("ttft_path_ms")
    expected = {
        "planner": shipped | shipped_next2, "planner_constant": shipped | shipped_next2,
        "planner_irate": {"burst_budget_s": None, **pre15}, "planner_burst": {"burst_budget_s": 0.0, **pre15},
        "planner_fit": {"burst_budget_s": 2.0, "burst_fit_budget_s": 4.0, "burst_absorb_fraction": None,
                        **shipped_next2},
        "planner_next": {"correction_offset": True, **pre15},
        "planner_link": {**pre15, "cold_start_link": True},
        "planner_link_path": {"cold_start_link": True, "ttft_path_ms": path, **{k: v for k, v in pre15.items()
                                                                               if k != "cold_start_link"}},
        "planner_next2": {**NEXT2, **young, **no_level}, "planner_young": {"arriving_young": "seen", **{
            k: v for k, v in pre15.items() if k != "arriving_young"}},
        "planner_next4": {**NEXT2, "arriving_young": "seen", **no_level},
        "planner_no_level": shipped | {**NEXT2, **young, **no_level},
        "planner_next5": shipped | {"prefill_utilization": 0.95, "hold_prefill_on_rise": True} | shipped_next2,
        "planner_next6": shipped | {"prefill_utilization": 0.95, "hold_prefill_on_rise": True,
                                    "prefill_utilization_min_replicas": 2} | shipped_next2,
        "planner_miss_budget": shipped | {"burst_miss_budget": 0.5} | shipped_next2,
        "planner_next7": shipped | {"prefill_utilization": 0.9, "prefill_utilization_min_replicas": 2} | shipped_next2,
        "planner_lone": shipped | {"lone_burst_s": 300.0} | shipped_next2}
    for name in ALL:
        assert list(results[name]["params"].items()) == [("peak_window_s", pw), *expected[name].items()], name
        assert "sweep" not in results[name]
    # Each replay was built with what its params say, the shipped planner's settings elsewhere, and the
    # settings its params leave out (by hand).
    unrecorded = {"planner_irate": {"burst_fit_budget_s": None}, "planner_burst": {"burst_fit_budget_s": None}}
    base = {**shipped, "correction_offset": False, "cold_start_link": True, "ttft_path_ms": None,
            "correction_pool_ttft": True, "min_level_smoothing": 0.5, "arriving_young": "peak",
            "predictor": "holt-winters", "peak_window_s": pw, "burst_level_ratio": 1.5, "prefill_utilization": None,
            "hold_prefill_on_rise": True, "prefill_utilization_min_replicas": 1, "burst_miss_budget": 0.25,
            "lone_burst_s": None, "prefill_pool_queueing": True}
    for name in ALL:
        cfg, frontend = cfgs[name]
        params = dict(results[name]["params"])
        assert frontend is params.pop("profile_frontend", False), name
        if "ttft_path_ms" in params:
            assert cfg.ttft_path_ms is not None and round(cfg.ttft_path_ms, 3) == params.pop("ttft_path_ms") > 0
            params["ttft_path_ms"] = cfg.ttft_path_ms
        want = base | params | unrecorded.get(name, {}) | ({"predictor": "constant"} if name == "planner_constant" else {})
        assert {k: getattr(cfg, k) for k in base} == want, name
    assert FRONT != derive_profile("llama-3.1-8b-h100", kv_link_gbps=100.0)
    assert [n for n in ALL if cfgs[n][1] is True] == ["planner", "planner_constant", "planner_fit", "planner_next2",
                                                      "planner_next4", "planner_no_level", "planner_next5", "planner_next6",
                                                      "planner_miss_budget", "planner_next7", "planner_lone"]
    # The plot draws the references and the variants, not the ablations.
    assert legend == ["reactive", *(n for n in ALL if n not in ("planner_constant", "planner_irate"))]


def test_burst_flags_and_sweeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, cfgs, _ = run(tmp_path, monkeypatch, ["planner_fit", "planner_burst", "planner"], "--burst-budget", "1",
                           "--burst-fit-budget", "3", "--burst-absorb-fraction", "0.25", "--peak-window", "120",
                           "--burst-sweep", "1", "0", "--planner-sweep", "60")
    next2 = {**NEXT2, "arriving_young": "peak", "burst_level_ratio": 1.5}
    pre15 = {"cold_start_link": False, "correction_pool_ttft": False, "profile_frontend": False,
             "min_level_smoothing": None, "arriving_young": "peak", "burst_level_ratio": None}
    assert list(results["planner_fit"]["params"].items()) == [
        ("peak_window_s", 120.0), ("burst_budget_s", 1.0), ("burst_fit_budget_s", 3.0), ("burst_absorb_fraction", 0.25),
        *next2.items()]
    assert results["planner_burst"]["params"] == {"peak_window_s": 120.0, "burst_budget_s": 1.0, **pre15}
    # The shipped planner keeps its own burst settings whatever the burst flags say.
    assert results["planner"]["params"] == {"peak_window_s": 120.0, "burst_budget_s": 2.0, "burst_fit_budget_s": 4.0,
                                            "burst_absorb_fraction": 0.9, **next2}
    assert [p["burst_budget_s"] for p in results["planner_burst"]["sweep"]] == [1.0, 0.0]
    assert list(results["planner_burst"]["sweep"][0]) == ["burst_budget_s", "attainment", "attainment_after_warmup",
                                                          "gpu_hours"]
    assert [p["peak_window_s"] for p in results["planner"]["sweep"]] == [60.0]
    assert "sweep" not in results["planner_fit"]
    # Without --burst-budget / --burst-absorb-fraction: planner_fit's 2 s and no absorb gate (the session-7 rule).
    results, _, _ = run(tmp_path, monkeypatch, ["planner_fit"])
    assert results["planner_fit"]["params"] == {"peak_window_s": PolicyConfig.peak_window_s, "burst_budget_s": 2.0,
                                                "burst_fit_budget_s": 4.0, "burst_absorb_fraction": None, **next2}


def test_one_table_names_them() -> None:
    import variants

    assert list(variants.NAMES) == ALL
    assert evaluate.PLOTTED is variants.PLOTTED
    assert variants.PLOTTED == {*ALL, "best", "reactive", "dynamo", "dynamo_load"} - {"planner_constant", "planner_irate"}
    msg = variants.unknown_policy("bogus")
    assert msg.startswith("unknown policy 'bogus': best, static (or best_capN / static_capN")
    assert all(f" {n}," in msg or f" {n} " in msg for n in [*ALL, "causal", "reactive", "dynamo_load"])


def test_an_unknown_policy_is_refused_by_name(tmp_path: Path) -> None:
    import variants

    with pytest.raises(SystemExit) as e:
        evaluate.main(["--trace", AZURE, "--duration", "0", "--limit", "150", "--policies", "planner_nex",
                       "--out", str(tmp_path / "x.json")])
    assert str(e.value) == variants.unknown_policy("planner_nex")
