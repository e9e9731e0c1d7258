"""References the planner is judged against, neither of them the planner's own rule.

* ``lower_bound``: GPU-hours no schedule meeting the SLO can go under. Each pool must
  do its total work at its *saturated* per-replica rate (from the engine's step model) (prefill: prompt tokens after
  the best possible prefix-cache hits, i.e. an infinite cache; decode: generated tokens
  at the highest throughput whose mean ITL is within the SLO, KV memory included; the
  KV link: every prefilled token crosses one link at each end), and never below its
  minimum replica count (the floor). Reported both as the strict bound (whole trace)
  and per interval (tighter, but assumes work stays in the 30 s interval it arrived in).
* ``best_schedule``: an achievable cost found by hindsight search: for each interval,
  the fewest GPUs (P x TP + D x TP) whose replay of that interval's requests alone, on
  warm replicas, meets the SLO for >= 99 % of its *feasible* requests (``feasibility.py``:
  a request that misses alone on idle replicas is left to miss, more replicas cannot
  help it), grown from the interval bound (clamped to the pool caps), adding to whichever
  pool the misses point at, and stopping at the caps or where two more replicas bought
  nothing; then replayed end to end with the same start-up delay the policies face
  (replicas requested one start-up ahead of the interval that needs them), and
  repaired: intervals whose feasible requests still miss get one more replica of the
  pool they missed on. Each interval's outcome (``status``) says whether its cap bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdserve.planner.core.profile import CapacityProfile
from pdserve.planner.core.profile_model import UTILISATION
from pdserve.router.core.spec import RoutingSpec
from pdserve.sim.autoscale import PoolSizes, WindowMetrics
from pdserve.sim.config import SimConfig
from pdserve.sim.metrics import RequestRecord, Slo
from pdserve.sim.simulator import run_simulation
from pdserve.sim.traces import Trace, TraceRequest, from_rows


@dataclass(frozen=True)
class Setup:
    profile_name: str
    profile: CapacityProfile
    tp_p: int
    tp_d: int
    max_p: int
    max_d: int
    slo: Slo
    interval_s: float
    startup_s: float
    kv_link_gbps: float = 100.0
    routing: RoutingSpec = field(default_factory=RoutingSpec)  # the router's rules in every replay
    decode_token_budget: int | None = None  # the decode engines' max_num_batched_tokens (None: the simulator's 8192)
    gpu_seconds_from_s: float = 0.0  # GPU-hours count from here (after replayed history; SimConfig's field)
    first_tick_s: float | None = None  # the autoscaler's first tick (None: one interval after the first arrival)

    def sim_config(self, p: int, d: int, startup: float | None = None) -> SimConfig:
        return SimConfig(topology="disagg", prefill_instances=p, decode_instances=d, profile=self.profile_name,
                         startup_delay_s=self.startup_s if startup is None else startup, slo=self.slo,
                         kv_link_gbps=self.kv_link_gbps, routing=self.routing,
                         decode_token_budget=self.decode_token_budget, gpu_seconds_from_s=self.gpu_seconds_from_s,
                         first_tick_s=self.first_tick_s)

    def gpus(self, p: float, d: float) -> float:
        return p * self.tp_p + d * self.tp_d


# ----------------------------------------------------------------------------- lower bound
def ideal_hits(trace: Trace) -> list[int]:
    """Prompt tokens each request could at best take from a prefix cache (infinite, shared)."""
    seen: set[int] = set()
    out = []
    for r in trace.requests:
        k = 0
        while k < len(r.hash_ids) and r.hash_ids[k] in seen:
            k += 1
        out.append(min(r.input_tokens, k * trace.hash_block_tokens))
        seen.update(r.hash_ids)
    return out


def lower_bound(trace: Trace, s: Setup, *, floor: tuple[int, int] = (1, 1)) -> dict:
    prof, itl_ms = s.profile, s.slo.tpot_s * 1000
    link = prof.kv_link.tokens_per_s if prof.kv_link else math.inf
    hits = ideal_hits(trace)
    # The derived profile's highest prefill point is at this fraction of the engine's
    # saturated rate: the bound uses the full rate.
    mu_frac = max(UTILISATION) if "max_num_batched_tokens" in prof.source else 1.0
    t0 = trace.requests[0].arrival_s
    n = int(trace.duration_s // s.interval_s) + 1
    buckets: list[list[tuple[TraceRequest, int]]] = [[] for _ in range(n)]
    for r, h in zip(trace.requests, hits):
        buckets[int((r.arrival_s - t0) // s.interval_s)].append((r, h))
    lo_isl, hi_isl = prof.isl_range()
    lo_ctx, hi_ctx = prof.context_range()
    tot = {"p": 0.0, "d": 0.0}
    per_interval = []
    for reqs in buckets:
        work_p = work_d = 0.0  # replica-seconds
        for r, h in reqs:
            isl = min(max(r.input_tokens, lo_isl), hi_isl)
            ctx = min(max(r.input_tokens + r.output_tokens / 2, lo_ctx), hi_ctx)
            fresh = r.input_tokens - h
            kv_s = fresh / link
            work_p += max(fresh / ((prof.prefill_saturated(isl) or math.inf) / mu_frac), kv_s)
            work_d += max(r.output_tokens / (prof.decode_saturated(ctx, itl_ms) or math.inf), kv_s)
        tot["p"] += work_p
        tot["d"] += work_d
        per_interval.append((max(floor[0], work_p / s.interval_s), max(floor[1], work_d / s.interval_s)))
    # The floor holds from the first arrival to the last (every run's GPU time covers that span).
    dur = trace.duration_s
    strict = (s.tp_p * max(floor[0] * dur, tot["p"]) + s.tp_d * max(floor[1] * dur, tot["d"])) / 3600
    lengths = [min(s.interval_s, dur - k * s.interval_s) for k in range(n)]
    interval = sum(s.gpus(p, d) * max(w, 0.0) for (p, d), w in zip(per_interval, lengths)) / 3600
    return {"gpu_hours": strict, "interval_gpu_hours": interval, "prefill_replica_hours": tot["p"] / 3600,
            "decode_replica_hours": tot["d"] / 3600, "ideal_prefix_hit_tokens": sum(hits),
            "per_interval": [(round(p, 3), round(d, 3)) for p, d in per_interval]}


# ----------------------------------------------------------------------------- best schedule
def _sub_trace(reqs: list[TraceRequest], trace: Trace) -> Trace:
    rows = [(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs]
    t = from_rows(rows, format=trace.format, source="interval")
    return Trace(requests=t.requests, format=t.format, source=t.source, sha256=t.sha256,
                 hash_block_tokens=trace.hash_block_tokens)


def attainment_of(recs: list[RequestRecord], slo: Slo, feasible: list[bool] | None = None) -> float:
    """Share of ``recs`` that met the SLO, among the feasible ones when flags (same order) are given."""
    pairs = [(r, f) for r, f in zip(recs, feasible)] if feasible is not None else [(r, True) for r in recs]
    n = sum(f for _, f in pairs)
    return sum(r.attains(slo) for r, f in pairs if f) / n if n else 1.0


def _blame(recs: list[RequestRecord], slo: Slo) -> str:
    """Which pool the misses point at: waiting for prefill -> prefill; the rest -> decode."""
    pre = dec = 0
    for r in recs:
        if r.attains(slo):
            continue
        if r.prefill_done_s < 0 or r.prefill_done_s - r.arrival_s > 0.8 * slo.ttft_s:
            pre += 1
        else:
            dec += 1  # KV transfer queued on a link, decode admission, or TPOT
    return "prefill" if pre >= dec else "decode"


@dataclass
class BestSchedule:
    setup: Setup
    trace: Trace
    target: float = 0.99
    feasible: list[bool] | None = None  # per trace request (feasibility.py); None: all count
    sims: int = 0
    needs: list[tuple[int, int]] = field(default_factory=list)
    status: list[dict] = field(default_factory=list)  # per interval: the isolated search's outcome

    def _flags(self, idx: list[int]) -> list[bool] | None:
        return None if self.feasible is None else [self.feasible[i] for i in idx]

    def search_intervals(self, bound: list[tuple[float, float]]) -> None:
        s, tr = self.setup, self.trace
        t0 = tr.requests[0].arrival_s
        buckets: list[list[int]] = [[] for _ in bound]
        for i, r in enumerate(tr.requests):
            buckets[int((r.arrival_s - t0) // s.interval_s)].append(i)
        for k, idx in enumerate(buckets):
            # The interval bound can exceed a pool's cap (a burst's work): the cap is the search's too.
            p = min(s.max_p, max(1, math.ceil(bound[k][0] - 1e-9)))
            d = min(s.max_d, max(1, math.ceil(bound[k][1] - 1e-9)))
            if not idx:
                self.needs.append((p, d))
                self.status.append({"ok": None, "capped": False, "stalled": False})
                continue
            sub = _sub_trace([tr.requests[i] for i in idx], tr)
            flags = self._flags(idx)
            best_ok, best_size, stalls = -1.0, (p, d), 0
            while True:
                res = run_simulation(sub, s.sim_config(p, d))
                self.sims += 1
                ok = attainment_of(sorted(res.records, key=lambda r: r.index), s.slo, flags)
                if ok > best_ok + 1e-9:
                    best_ok, best_size, stalls = ok, (p, d), 0
                else:
                    stalls += 1
                # Stop at the target, at the caps, or when two more replicas bought nothing
                # (more GPUs would only inflate the reference).
                capped = p >= s.max_p and d >= s.max_d
                if ok >= self.target or capped or stalls >= 2:
                    break
                pool = _blame(res.records, s.slo)
                if (pool == "prefill" and p < s.max_p) or d >= s.max_d:
                    p += 1
                else:
                    d += 1
            self.needs.append(best_size)
            # Below target with a pool at its cap: the cap bound (the search then grew the other
            # pool, which may have stalled); below target with neither at its cap: stalled.
            at_cap = p >= s.max_p or d >= s.max_d
            self.status.append({"ok": round(best_ok, 4), "size": [p, d], "capped": best_ok < self.target and at_cap,
                                "stalled": best_ok < self.target and not at_cap})

    def miss_causes(self, records: list[RequestRecord], t0: float) -> dict[str, int]:
        """The end-to-end replay's misses by cause: (a) infeasible alone; among feasible ones, in an
        interval whose isolated search (b) ended below target with a pool at its cap, (c) met the target in
        isolation (so the miss comes from the end-to-end replay: work carried over from earlier
        intervals, replicas still starting, per-interval granularity), or (d) stalled below
        target with neither pool at its cap (two more replicas bought nothing; on Mooncake these
        are mostly prefix misses: each isolated replay starts with cold caches)."""
        s = self.setup
        out = {"infeasible": 0, "cap": 0, "end_to_end": 0, "stalled": 0}
        for r in sorted(records, key=lambda r: r.index):
            if r.attains(s.slo):
                continue
            if self.feasible is not None and not self.feasible[r.index]:
                out["infeasible"] += 1
                continue
            st = self.status[min(int((r.arrival_s - t0) // s.interval_s), len(self.status) - 1)]
            out["cap" if st["capped"] else "stalled" if st["stalled"] else "end_to_end"] += 1
        return out

    def autoscaler(self, t0: float) -> ScheduleAutoscaler:
        return ScheduleAutoscaler(list(self.needs), t0, self.setup.interval_s, self.setup.startup_s)

    def initial(self) -> tuple[int, int]:
        return self.autoscaler(0.0).want(0.0)

    def repair(self, records: list[RequestRecord], t0: float) -> int:
        """One more replica, on the pool the misses point at, for intervals that missed."""
        s = self.setup
        by_k: dict[int, list[RequestRecord]] = {}
        for r in sorted(records, key=lambda r: r.index):
            by_k.setdefault(int((r.arrival_s - t0) // s.interval_s), []).append(r)
        changed = 0
        for k, recs in by_k.items():
            if k >= len(self.needs):
                continue
            ok = attainment_of(recs, s.slo, self._flags([r.index for r in recs]))
            if ok < self.target:
                p, d = self.needs[k]
                if _blame(recs, s.slo) == "prefill" and p < s.max_p:
                    self.needs[k] = (p + 1, d)
                elif d < s.max_d:
                    self.needs[k] = (p, d + 1)
                else:
                    continue
                changed += 1
        return changed


@dataclass
class ScheduleAutoscaler:
    """Replays per-interval sizes: replicas are requested one start-up delay ahead, and the
    sizes up at a tick cover every interval until the next tick's additions are ready."""

    needs: list[tuple[int, int]]
    t0: float
    interval_s: float
    startup_s: float

    def want(self, now: float) -> tuple[int, int]:
        lo = int((now - self.t0) // self.interval_s)
        hi = int((now + self.startup_s + self.interval_s - self.t0) // self.interval_s)
        ks = range(max(lo, 0), min(hi + 1, len(self.needs)))
        if not ks:
            return 1, 1
        return max(self.needs[k][0] for k in ks), max(self.needs[k][1] for k in ks)

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        return PoolSizes(*self.want(now))


@dataclass
class OnsetAutoscaler:
    """The causal reference: a floor held all the time, plus an *onset oracle*: at the tick that
    starts interval k it learns the hindsight size that interval needs (``needs[k]``, the best
    schedule's) and orders it, so capacity for a burst arrives one start-up after the interval it
    began in, never before; ordered capacity is held ``hold`` intervals (long enough to arrive
    and drain what queued). Optimistic for any causal policy (it learns a whole interval's demand
    at the interval's start, up to one interval before a burst's first request); what it cannot
    do, and no causal policy can, is have capacity up before the onset it did not foresee.

    With ``lag`` 1 it is the *past-need oracle*: at the tick that starts interval k it learns interval k-1's
    hindsight size, the earliest a measurement of that interval could give it exactly: no foresight, only a
    perfect reading of what has happened. A causal planner can match it only by measuring need exactly; it can
    beat it only by foreseeing a rise."""

    needs: list[tuple[int, int]]
    t0: float
    interval_s: float
    floor: tuple[int, int]
    hold: int
    lag: int = 0

    def want(self, now: float) -> tuple[int, int]:
        k = int((now - self.t0) / self.interval_s + 1e-9) - self.lag
        ks = range(max(k - self.hold, 0), min(k, len(self.needs) - 1) + 1)
        return (max([self.floor[0], *(self.needs[j][0] for j in ks)]),
                max([self.floor[1], *(self.needs[j][1] for j in ks)]))

    def on_tick(self, now: float, window: WindowMetrics, current: PoolSizes) -> PoolSizes:
        return PoolSizes(*self.want(now))


# ----------------------------------------------------------------------------- peer export
def dynamo_inputs(trace: Trace, s: Setup, *, max_replicas: int, out_dir) -> tuple:
    """Mooncake-format trace and pdserve's engine numbers for ``dynamo_peer.py``."""
    import json
    from pathlib import Path

    from pdserve.planner.core.profile_model import _prefill_alone_s, prefill_flat_out
    from pdserve.worker.perf import PerfModel, load_profile

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pm = PerfModel(load_profile(s.profile_name))
    block = trace.hash_block_tokens if any(r.hash_ids for r in trace.requests) else 64
    rows, fresh = [], 1 << 40  # requests without hash ids get ids no other request shares
    for r in trace.requests:
        ids = list(r.hash_ids)
        if not ids:
            n = -(-r.input_tokens // block)
            ids = list(range(fresh, fresh + n))
            fresh += n
        rows.append({"timestamp": round(r.arrival_s * 1000, 3), "input_length": r.input_tokens,
                     "output_length": r.output_tokens, "hash_ids": ids})
    (out / "trace.jsonl").write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    kv_tokens = pm.num_kv_blocks(16) * 16
    isls = [16 * 2 ** k for k in range(12)]
    dec = {}
    for ctx in (256, 512, 1024, 2000, 4000, 8000, 16000):
        bs = [b for b in (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256) if b * (ctx + 16) <= kv_tokens]
        if bs:
            dec[str(ctx)] = {"batch": bs, "ms": [1000 * pm.step_time(decode_contexts=[ctx] * b) for b in bs]}
    cal = {
        "prefill_isl": isls, "prefill_ms": [1000 * _prefill_alone_s(pm, i, 8192) for i in isls], "decode": dec,
        # what the planner's profile calls saturated (derive_profile): the mocker's prefill is matched to it
        "prefill_flat_out_tokens_per_s": [prefill_flat_out(pm, i, 8192) for i in isls],
        "kv_bytes_per_token": pm.kv_bytes_per_token, "kv_link_gbytes_per_s": s.kv_link_gbps / 8,
        "block_size": 64, "num_gpu_blocks": kv_tokens // 64, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
        "max_model_len": pm.profile.model.max_position_embeddings, "tp": s.tp_p, "startup_s": s.startup_s,
        "ttft_ms": s.slo.ttft_s * 1000, "itl_ms": s.slo.tpot_s * 1000, "interval_s": s.interval_s,
        "max_replicas": max_replicas, "hash_block_tokens": block,
    }
    (out / "calibration.json").write_text(json.dumps(cal) + "\n")
    return out / "trace.jsonl", out / "calibration.json"
