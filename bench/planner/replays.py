"""Replays of one trace in the simulator, scored the same way for every policy, and the two
reference searches built on them (the hindsight best schedule, the causal floor + onset oracle)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

from feasibility import Hardware, TraceFeasibility
from references import BestSchedule, OnsetAutoscaler, Setup, _blame, ideal_hits

from pdserve.planner.core.sim_hook import PlannerAutoscaler
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace


@dataclass
class Recorder:
    """Wraps an autoscaler to record (time, prefill, decode) after each tick."""

    inner: object
    series: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s  # type: ignore[attr-defined]

    def on_tick(self, now, window, current):  # type: ignore[no-untyped-def]
        out = self.inner.on_tick(now, window, current)  # type: ignore[attr-defined]
        self.series.append((now, out.prefill, out.decode))
        return out


def trace_feasibility(trace: Trace, s: Setup, warmup_s: float) -> TraceFeasibility:
    """Which requests could meet the SLO alone on idle replicas (``feasibility.py``), best-case prefix hits."""
    rows = [(r.arrival_s, r.input_tokens, r.output_tokens, c) for r, c in zip(trace.requests, ideal_hits(trace))]
    return TraceFeasibility.of(rows, Hardware.of(s.sim_config(1, 1)), s.slo, trace.requests[0].arrival_s + warmup_s)


def run_policy(trace: Trace, s: Setup, scaler, start: tuple[int, int], warmup_s: float, startup: float | None = None,
               *, feas: TraceFeasibility) -> dict:
    rec = Recorder(scaler) if scaler is not None else None
    wall = time.perf_counter()
    res = run_simulation(trace, s.sim_config(*start, startup=startup), autoscaler=rec)
    t0 = trace.requests[0].arrival_s
    recs = res.records
    warm = [r for r in recs if r.arrival_s >= t0 + warmup_s]
    n = int(trace.duration_s // s.interval_s) + 1
    ok, cnt = [0] * n, [0] * n
    for r in recs:
        k = int((r.arrival_s - t0) // s.interval_s)
        cnt[k] += 1
        ok[k] += r.attains(s.slo)
    sm = res.summary
    by_index = sorted(recs, key=lambda r: r.index)
    series = rec.series if rec else [(t0, *start), (res.end_time_s, *start)]
    out = {
        "attainment": sm.attainment, "attainment_after_warmup": sum(r.attains(s.slo) for r in warm) / len(warm) if warm else None,
        **feas.score([r.attains(s.slo) for r in by_index], by_index),
        "attainment_ttft": sm.attainment_ttft, "attainment_tpot": sm.attainment_tpot,
        "gpu_hours": res.gpu_seconds / 3600, "requests": sm.requests, "finished": sm.finished,
        "ttft_p99_s": sm.ttft.get("p99"), "tpot_p99_s": sm.tpot.get("p99"),
        "max_prefill": max(x[1] for x in series), "max_decode": max(x[2] for x in series),
        "sim_wall_s": round(time.perf_counter() - wall, 1),
        "series": {"replicas": [(round(t - t0, 1), p, d) for t, p, d in series],
                   "interval_attainment": [round(o / c, 4) if c else None for o, c in zip(ok, cnt)]},
    }
    if isinstance(scaler, PlannerAutoscaler):
        out["held_decisions"] = sum(d.held for d in scaler.decisions)
        binds = [d.explanation.get("demand", {}).get("terms", {}) for d in scaler.decisions]
        out["binding_counts"] = {
            f"{pool}_{term}": sum(1 for b in binds if b.get(f"binding_{pool}") == term)
            for pool in ("prefill", "decode") for term in ("compute", "link", "drain", "peak")
        }
    return out, res


REFERENCE = re.compile(r"(best|static)(?:_cap(\d+))?")


def run_order(name: str) -> int:
    """Static first (its schedule is a candidate for the best found), then best, then the causal
    reference (built on the best's per-interval sizes), then the policies in the order given."""
    m = REFERENCE.fullmatch(name)
    return (0 if m.group(1) == "static" else 1) if m else 2 if name in CAUSAL else 3


# The causal references: the oracle's lag in intervals (references.OnsetAutoscaler).
CAUSAL = {"causal": 0, "causal_past": 1}


def best_schedule(trace: Trace, s: Setup, bound: dict, feas: TraceFeasibility, warmup_s: float, repairs: int,
                  log, static: dict | None) -> dict:
    """The hindsight per-interval search (``references.BestSchedule``), replayed end to end and
    repaired; then the best candidate found (``pick``). The static search's schedule is a candidate
    too (a schedule that is better than the search's is the best found)."""
    t0 = trace.requests[0].arrival_s
    search = BestSchedule(s, trace, feasible=[v == "feasible" for v in feas.verdicts])
    search.search_intervals(bound["per_interval"])
    rounds, cands = [], []
    for i in range(repairs + 1):
        out, res = run_policy(trace, s, search.autoscaler(t0), search.initial(), warmup_s, feas=feas)
        out["search"] = {"miss_causes": search.miss_causes(res.records, t0),
                         "per_interval": [list(x) for x in search.needs]}
        rounds.append({"attainment": out["attainment"], "attainment_feasible": out["attainment_feasible"],
                       "gpu_hours": out["gpu_hours"], "miss_causes": out["search"]["miss_causes"]})
        cands.append((f"search round {i}", out))
        log(f"best round {i}: {out['attainment']:.4f} (feasible {out['attainment_feasible']:.4f}) at "
            f"{out['gpu_hours']:.2f} GPU-h, misses {out['search']['miss_causes']}")
        if out["attainment_feasible"] >= 0.99 or i == repairs or not search.repair(res.records, t0):
            break
    if static is not None:
        cands.append((f"static {static['size'][0]}P{static['size'][1]}D", static))

    chosen, out = pick(cands, len(rounds))
    extra = {"interval_sims": search.sims, "rounds": rounds, "chosen": chosen, "max_replicas": s.max_p,
             "interval_status": search.status, "startup_s": s.startup_s,
             "per_interval": [list(x) for x in search.needs]}
    return {k: v for k, v in out.items() if k not in ("size", "search_sims", "search")} | {
        "search": (out.get("search", {}) | extra)}


def pick(cands: list[tuple[str, dict]], n_search: int) -> tuple[str, dict]:
    """The best candidate found: the cheapest meeting 99 % of the feasible requests; if none does,
    the search round attaining most (cheaper on a tie), replaced only by a candidate that
    dominates it (at least its attainment at no more GPU-hours). Not "the highest attainment at
    any cost": on 70B bursty_seed1 at 8 per pool that would swap a 6.8 GPU-h schedule at 86.9 % for
    static 8P7D at 15.2 GPU-h and 90.2 %, and make every policy look cheap against it."""
    def att(c: tuple[str, dict]) -> float:
        return c[1]["attainment_feasible"] or 0.0

    ok = [c for c in cands if att(c) >= 0.99]
    if ok:
        return min(ok, key=lambda c: c[1]["gpu_hours"])
    best = max(cands[:n_search], key=lambda c: (att(c), -c[1]["gpu_hours"]))
    dominating = [c for c in cands if att(c) >= att(best) and c[1]["gpu_hours"] <= best[1]["gpu_hours"]]
    return max(dominating, key=lambda c: (att(c), -c[1]["gpu_hours"]))


def causal_reference(trace: Trace, s: Setup, best: dict, feas: TraceFeasibility, warmup_s: float, log,
                     lag: int = 0) -> dict:
    """The cheapest floor that, with the onset oracle on top (``references.OnsetAutoscaler``, the best
    schedule's per-interval sizes learnt at each interval's start, or with ``lag`` 1 the past interval's,
    held one start-up plus one interval), meets 99 % of the feasible requests: grown from 1P1D on the
    pool the misses point at, stopping at the target, the caps, or two probes that bought nothing."""
    t0 = trace.requests[0].arrival_s
    needs = [tuple(x) for x in best["search"]["per_interval"]]
    hold = math.ceil((s.startup_s + s.interval_s) / s.interval_s)
    floor, probes, best_probe, stalls = (1, 1), [], None, 0
    while True:
        sc = OnsetAutoscaler(needs, t0, s.interval_s, floor, hold, lag)
        out, res = run_policy(trace, s, sc, sc.want(t0), warmup_s, feas=feas)
        a = out["attainment_feasible"] or 0.0
        probes.append({"floor": list(floor), "attainment": out["attainment"], "attainment_feasible": a,
                       "attainment_after_warmup": out["attainment_after_warmup"], "gpu_hours": out["gpu_hours"]})
        log(f"causal (lag {lag}) floor {floor[0]}P{floor[1]}D: {a:.4f} of feasible at {out['gpu_hours']:.2f} GPU-h")
        if best_probe is None or a > (best_probe[0]["attainment_feasible"] or 0.0) + 1e-9:
            best_probe, stalls = (out, floor), 0
        else:
            stalls += 1
        capped = floor[0] >= s.max_p and floor[1] >= s.max_d
        if a >= 0.99 or capped or stalls >= 2:
            break
        p, d = floor
        floor = (p + 1, d) if (_blame(res.records, s.slo) == "prefill" and p < s.max_p) or d >= s.max_d else (p, d + 1)
    out, chosen = (out, floor) if a >= 0.99 else best_probe
    return out | {"floor": list(chosen), "hold_intervals": hold, "lag_intervals": lag, "probes": probes}
