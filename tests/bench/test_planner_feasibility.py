"""The infeasibility classifier (bench/planner/feasibility.py): hand-computed cases, and the
simulator's own latencies for a request alone on idle replicas."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))
from feasibility import (  # noqa: E402
    FEASIBLE, TOO_LONG, TPOT, TTFT, Hardware, attainment_among_feasible, classify, summary,
)

from pdserve.sim.config import SimConfig  # noqa: E402
from pdserve.sim.metrics import Slo  # noqa: E402
from pdserve.sim.simulator import run_simulation  # noqa: E402
from pdserve.sim.traces import Trace, from_rows  # noqa: E402

P8, P70 = "llama-3.1-8b-h100", "llama-3.1-70b-tp4-h100"
SLO = Slo(ttft_s=2.0, tpot_s=0.05)


def cfg(profile: str, **kw) -> SimConfig:
    return SimConfig(topology="disagg", prefill_instances=1, decode_instances=1, profile=profile,
                     startup_delay_s=0.0, slo=SLO, **kw)


def test_transfer_is_the_uncached_kv_over_one_link():
    # Llama-3.1-8B: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131072 bytes per token;
    # 2000 tokens at 100 Gbit/s = 2000 * 131072 * 8 / 1e11 s.
    hw = Hardware.of(cfg(P8))
    assert hw.alone(2000, 10).transfer_s == pytest.approx(2000 * 131072 * 8 / 1e11)
    assert hw.alone(2000, 10, cached_tokens=1024).transfer_s == pytest.approx(976 * 131072 * 8 / 1e11)
    assert Hardware.of(cfg(P8, kv_link_gbps=25)).alone(2000, 10).transfer_s == pytest.approx(4 * 2000 * 131072 * 8 / 1e11)


def test_hand_computed_verdicts():
    hw70 = Hardware.of(cfg(P70))
    # 70B: a 60k-token prompt needs 2 x 70.6e9 x 60000 FLOPs = 8.47e15; four H100s at their
    # 989.4 TFLOP/s peak take 2.14 s even at 100 % utilisation: past a 2 s TTFT on any schedule.
    assert 2 * 70.6e9 * 60000 / (4 * 989.4e12) > SLO.ttft_s
    assert hw70.verdict(60000, 10, SLO) == TTFT
    # ...but a 100-token prompt is far inside it (one step of ~100 tokens).
    assert hw70.verdict(100, 10, SLO) == FEASIBLE
    hw8 = Hardware.of(cfg(P8))
    # 8B: every decode step reads 8.03e9 x 2 bytes of weights; at 3.35 TB/s that alone is 4.79 ms,
    # so a 4 ms ITL objective is missed by every request, alone or not.
    assert 8.03e9 * 2 / 3.35e12 > 0.004
    assert hw8.verdict(100, 10, Slo(ttft_s=2.0, tpot_s=0.004)) == TPOT
    assert hw8.verdict(100, 1, Slo(ttft_s=2.0, tpot_s=0.004)) == FEASIBLE  # one token: no inter-token time
    # A prompt of max_model_len tokens is refused by the engine (vLLM answers 400).
    assert hw8.verdict(131072, 10, SLO) == TOO_LONG
    # A prefix hit shortens the prefill: 60k tokens with 56k cached is feasible on 8B, uncached it is not.
    assert hw8.verdict(60000, 10, SLO) == TTFT
    assert hw8.verdict(60000, 10, SLO, cached_tokens=56000) == FEASIBLE


@pytest.mark.parametrize("profile", [P8, P70])
@pytest.mark.parametrize("isl,osl", [(100, 1), (100, 10), (2000, 500), (20000, 100), (60000, 5), (131000, 2000)])
def test_alone_latencies_are_the_simulators(profile, isl, osl):
    c = cfg(profile)
    rec = run_simulation(from_rows([(0.0, isl, osl, ())], format="azure", source="t"), c).records[0]
    a = Hardware.of(c).alone(isl, osl)
    assert a.ttft_s == pytest.approx(rec.ttft, rel=1e-5)
    assert a.tpot_s == pytest.approx(rec.tpot, rel=1e-4, abs=1e-9)
    assert Hardware.of(c).verdict(isl, osl, SLO) == (FEASIBLE if rec.attains(SLO) else TTFT)


def test_prefix_hit_alone_is_the_simulators():
    # The second request shares 20 blocks of 512 tokens with the first: alone (100 s later) it
    # prefills 2048 tokens and moves only their KV; the classifier is given the same hit.
    rows = [(0.0, 10240, 10, tuple(range(20))), (100.0, 12288, 10, (*range(20), 50, 51, 52, 53))]
    t = from_rows(rows, format="mooncake", source="t")
    t = Trace(requests=t.requests, format=t.format, source=t.source, sha256=t.sha256, hash_block_tokens=512)
    c = cfg(P8, block_size=512)
    recs = run_simulation(t, c).records
    hw = Hardware.of(c)
    assert recs[1].cached_tokens == 10240
    assert hw.alone(12288, 10, 10240).ttft_s == pytest.approx(recs[1].ttft, rel=1e-5)
    assert hw.alone(12288, 10).ttft_s > 3 * recs[1].ttft  # without the hit it would be slower


def test_summary_and_attainment_among_feasible():
    verdicts = classify([(100, 10, 0), (60000, 10, 0), (100, 10, 0), (131072, 5, 0)], Hardware.of(cfg(P8)), SLO)
    assert verdicts == [FEASIBLE, TTFT, FEASIBLE, TOO_LONG]
    s = summary(verdicts, arrivals=[0.0, 10.0, 200.0, 300.0], after_s=120.0)
    assert s["counts"] == {FEASIBLE: 2, TTFT: 1, TPOT: 0, TOO_LONG: 1}
    assert s["feasible_fraction"] == 0.5 and s["feasible_fraction_after_warmup"] == 0.5
    # Met: the first feasible one and the infeasible one (impossible, but the count must not use it).
    assert attainment_among_feasible([True, True, False, False], verdicts) == 0.5
    assert attainment_among_feasible([True], [TTFT]) is None
    assert math.isclose(attainment_among_feasible([True, False, True, False], verdicts), 1.0)


def test_a_miss_without_the_prefix_hit_it_needed_is_a_prefix_miss():
    from feasibility import TraceFeasibility

    from pdserve.sim.metrics import RequestRecord

    hw = Hardware.of(cfg(P8))
    # 60k tokens with 56k cacheable: feasible only with the hit (see the hand-computed verdicts).
    feas = TraceFeasibility.of([(0.0, 60000, 10, 56000), (1.0, 100, 10, 0)], hw, SLO, warm_from_s=0.0)
    assert feas.summary()["feasible_only_with_prefix_hit"] == 1

    def rec(i: int, n: int, cached: int, prefill_done: float, first: float) -> RequestRecord:
        return RequestRecord(index=i, arrival_s=float(i), input_tokens=n, output_tokens=10, cached_tokens=cached,
                             prefill_done_s=i + prefill_done, first_token_s=i + first, finish_s=i + first + 0.1)

    # Request 0 got no hit (a replica without the prefix): a prefix miss, whatever the wait.
    # Request 1 waited 2.5 s for prefill with nothing to blame but the queue: a prefill wait.
    s = feas.score([False, False], [rec(0, 60000, 0, 3.6, 4.2), rec(1, 100, 0, 2.5, 2.6)])
    assert s["misses"]["prefix_miss"] == 1 and s["misses"]["prefill_wait"] == 1
    assert s["attainment_feasible"] == 0.0
    # With the hit it needed, the same late request is a queueing miss, not a prefix miss.
    s = feas.score([False, True], [rec(0, 60000, 56000, 2.5, 2.7), rec(1, 100, 0, 0.03, 0.06)])
    assert s["misses"]["prefix_miss"] == 0 and s["misses"]["prefill_wait"] == 1


def test_replayed_history_is_not_scored():
    """evaluate.py --history: requests before the scored window count in no attainment the references
    search for (the static search's mask, attainment among the feasible), only in the replay."""
    from dataclasses import replace

    from feasibility import TraceFeasibility

    f = TraceFeasibility(verdicts=[FEASIBLE, FEASIBLE, TTFT, FEASIBLE, FEASIBLE], alone=[], arrivals=[0, 5, 11, 12, 15],
                         warm_from_s=10.0, slo=Slo())
    hits = [False, False, False, True, False]
    assert f.scored_feasible() == [True, True, False, True, True]
    assert f.score(hits)["attainment_feasible"] == pytest.approx(1 / 4)
    h = replace(f, scored_from_s=10.0)
    assert h.scored_feasible() == [False, False, False, True, True]
    assert h.score(hits)["attainment_feasible"] == pytest.approx(1 / 2)
    assert h.score(hits)["attainment_feasible_after_warmup"] == pytest.approx(1 / 2)


def test_a_trace_files_history_is_its_own_arrivals_before_the_window(tmp_path):
    """evaluate.py --trace F --start S --history H: the arrivals in [S - H, S) are replayed first and not
    scored (warm-up and GPU-hours from the first arrival at or after S), as for the bursty family."""
    import evaluate

    csv = tmp_path / "t.csv"
    # Azure's format, one request a second from 18:00:00.5 (the trace counts from its first arrival)
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   + "".join(f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.5000000,100,10\n" for i in range(100)))
    base = ["--trace", str(csv), "--start", "50", "--duration", "10", "--out", str(tmp_path / "o.json")]
    args = evaluate.build_parser().parse_args([*base, "--history", "20"])
    trace, _, s, feas, n_hist, hist_end = evaluate.load_run(args)
    assert (len(trace.requests), n_hist) == (30, 20)  # 30..49 replayed, 50..59 scored
    assert hist_end == pytest.approx(20.0) and args.warmup == pytest.approx(20.0)
    assert s.gpu_seconds_from_s == pytest.approx(20.0) and feas.scored_from_s == pytest.approx(20.0)
    plain = evaluate.build_parser().parse_args(base)
    assert len(evaluate.load_run(plain)[0].requests) == 10 and plain.warmup == 120.0
    with pytest.raises(SystemExit, match="reaches before the trace's start"):
        evaluate.load_run(evaluate.build_parser().parse_args([*base, "--history", "60"]))
