"""The planner's pure core: observation + clock -> replica counts for both pools.

Each interval: validate the inputs (hold on anything doubtful), append to the history,
forecast rate / ISL / OSL for the start-up horizon, and size each pool for whichever
bottleneck binds (``pdserve.planner.core.sizing``: prefill compute within the TTFT SLO,
decode compute and KV memory within the ITL SLO, the P/D KV link at both ends, and
draining the queues that a burst left behind), with the profile corrected by observed vs
expected latency. Then clamp: min/max, pending pods, scale-down only once the queues are
empty and after a short stabilisation window, and finally the GPU budget, which no path
may exceed. Up is fast (one tick, for the forecast, the observed load or the queue,
whichever is largest); down is cheap (as soon as queue and forecast allow).
No I/O and no wall clock: ``now`` is passed in, so the simulator and the tests drive it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdserve.planner.core.arriving import TrafficStart, arrival_rate, arriving_tokens
from pdserve.planner.core import decision as D
from pdserve.planner.core.budget import fit_budget, gpus
from pdserve.planner.core.burst_memory import BurstMemory
from pdserve.planner.core.decision import ScalingDecision
from pdserve.planner.core.link_model import budget_transfers, usable_utilization
from pdserve.planner.core.lookahead import Ramp, moving_replicas
from pdserve.planner.core.correction import LatencyCorrection
from pdserve.planner.core.observation import Observation
from pdserve.planner.core.observation import finite as _finite
from pdserve.planner.core.policy_config import PolicyConfig
from pdserve.planner.core.predictors import Forecast, Predictor, make_predictor
from pdserve.planner.core.release import clear_fraction, cleared_floor, is_clear, reserved, undrained
from pdserve.planner.core.profile import CapacityProfile
from pdserve.planner.core.sizing import LINK_PLATEAU, Capacity, Load, size

__all__ = ["PlannerPolicy", "PolicyConfig"]


@dataclass
class _State:
    rate: deque = field(default_factory=deque)
    isl: deque = field(default_factory=deque)
    osl: deque = field(default_factory=deque)
    hit: float = 0.0
    recs: deque = field(default_factory=deque)  # (time, prefill, decode) raw recommendations
    last_busy: float | None = None  # last time requests were seen
    start: TrafficStart = field(default_factory=TrafficStart)  # when the traffic began (the rate window fills)
    pending_since: dict[str, float] = field(default_factory=dict)
    prompt_tokens: float | None = None  # the router's prompt-token rate at the previous tick (hold_prefill_on_rise)
    prefill_up_at: float | None = None  # when the prefill pool was last raised (drain_starting)
    ramp: Ramp | None = None  # the prompt-token rate's last ticks (ramp_projection_s)


class PlannerPolicy:
    def __init__(self, config: PolicyConfig, profile: CapacityProfile, predictor: Predictor | None = None) -> None:
        self.config = config
        self.profile = profile
        self.predictor = predictor or make_predictor(config.predictor, seasonal_periods=config.seasonal_periods,
                                                     explode_ratio=config.explode_ratio,
                                                     min_level_smoothing=config.min_level_smoothing)
        self.length_predictor = predictor or make_predictor(config.length_predictor, explode_ratio=config.explode_ratio)
        self._s = _State()
        self._bursts = BurstMemory(config)
        if config.ramp_projection_s is not None:
            self._s.ramp = Ramp(config.ramp_ticks, config.ramp_projection_s)
        self._rise: tuple[tuple[float, float] | None] | None = None
        self._corr = LatencyCorrection(config.correction_bounds, config.correction_engage, config.correction_hold_s,
                                        learn_offset=config.correction_offset, ttft_path_ms=config.ttft_path_ms,
                                        pool_ttft=config.correction_pool_ttft, pool=config.prefill_pool_queueing,
                                        prefill_floor=config.prefill_ratio_floor,
                                        decode_bounds=config.decode_correction_limits,
                                        decode_curve=config.correction_decode_curve,
                                        backlog_s=config.correction_backlog_s,
                                        backlog_per_replica=config.release_queue_per_replica)

    @property
    def interval_s(self) -> float:
        return self.config.interval_s

    # ------------------------------------------------------------------ decide
    def decide(self, obs: Observation, now: float) -> ScalingDecision:
        cfg, s = self.config, self._s
        self._rise = None  # this tick's reading, taken once (_rising)
        cur = (obs.prefill.replicas, obs.decode.replicas)
        inputs = obs.metrics_dict() | {"prefillReplicas": cur[0], "decodeReplicas": cur[1]}
        expl: dict[str, Any] = {"inputs": inputs}

        if (bad := cfg.invalid()) is not None:
            return self._hold(cur, now, D.HOLD_INVALID, bad, expl, budget=False)
        if obs.error:
            return self._hold(cur, now, D.HOLD_ERROR, f"metrics unavailable: {obs.error}", expl)
        age = now - obs.timestamp
        stale_after = cfg.stale_after_s if cfg.stale_after_s is not None else 3 * cfg.interval_s
        if not math.isfinite(age) or age > stale_after:
            return self._hold(cur, now, D.HOLD_STALE, f"metrics are {age:.0f}s old (limit {stale_after:.0f}s)", expl)

        busy = any(_finite(v) and v > 0 for v in (obs.request_rate, obs.waiting, obs.router_request_rate,
                                                   obs.router_inflight, obs.router_prompt_tokens_rate))
        if busy or s.last_busy is None:  # the first interval counts as busy: no instant scale-to-zero
            s.last_busy = now
        s.start.observe(now, busy, cfg.interval_s)
        if cfg.scale_to_zero and cur == (0, 0):
            if busy:
                p, d = max(cfg.prefill_min, 1), max(cfg.decode_min, 1)
                return self._result(cur, (p, d), now, "wake-up: requests arrived while scaled to zero", expl)
            return self._result(cur, cur, now, "scaled to zero and idle", expl)

        if not _finite(obs.request_rate):
            return self._hold(cur, now, D.HOLD_MISSING, "request rate is missing", expl)
        if obs.request_rate > 0 and not (_finite(obs.mean_isl) and _finite(obs.mean_osl)):
            return self._hold(cur, now, D.HOLD_MISSING, "mean ISL/OSL missing while requests flow", expl)

        # A finite mean is itself evidence of completions in the window, whatever the request rate
        # says: they can come from different pods' series (the ISL falls back to any role's pods, the
        # rate reads the decode pool's counter), and a decode pod Prometheus first scraped after it
        # served its only request shows a flat counter. Each mean is history on its own; the OSL still
        # needs the decode (or unlabelled) pods' histogram (source_prometheus), so a service whose
        # decode series are flat holds on "no ISL/OSL history" until they show a completion.
        for q, v in ((s.isl, obs.mean_isl), (s.osl, obs.mean_osl)):
            if _finite(v) and v > 0:
                self._push(q, v)
        seen = arrival_rate(obs, s.isl[-1] if s.isl else None)
        if seen is None:
            return self._hold(cur, now, D.HOLD_MISSING, "prompt tokens arrive but no request has completed yet "
                              "(no ISL to turn them into a request rate)", expl)
        self._push(s.rate, seen)
        if _finite(obs.prefix_hit_ratio):
            s.hit = min(max(obs.prefix_hit_ratio, 0.0), 0.95)

        horizon = cfg.horizon_ticks
        f_rate = self.predictor.predict(list(s.rate), horizon)
        f_isl = self.length_predictor.predict(list(s.isl))
        f_osl = self.length_predictor.predict(list(s.osl))
        expl["forecast"] = {
            "requestRate": f_rate.value, "isl": f_isl.value, "osl": f_osl.value,
            "method": f_rate.method, "rawRequestRate": f_rate.raw, "horizonIntervals": horizon,
        }
        for what, f in (("request rate", f_rate), ("ISL", f_isl), ("OSL", f_osl)):
            if f.exploded:
                return self._hold(
                    cur, now, D.HOLD_EXPLODED, f"{what} forecast exploded ({f.raw:.4g}, clamped to {f.value:.4g})", expl
                )
        if not _finite(f_rate.value):
            return self._hold(cur, now, D.HOLD_MISSING, "no request-rate history to forecast from", expl)

        rate = f_rate.value
        if cfg.floor_on_observed:
            rate = max(rate, seen)
        if rate <= 0 and not self._queued(obs):
            want = (0, 0)
            expl["demand"] = {"requestRate": 0.0}
        else:
            if not (_finite(f_isl.value) and _finite(f_osl.value)):
                return self._hold(cur, now, D.HOLD_MISSING, "no ISL/OSL history to forecast from", expl)
            sized = self._size(rate, f_isl, f_osl, obs, now, expl)
            if isinstance(sized, ScalingDecision):
                return sized
            want = sized
        return self._clamp(cur, want, obs, now, expl)

    # ------------------------------------------------------------------ sizing
    def _size(self, rate: float, f_isl: Forecast, f_osl: Forecast, obs: Observation, now: float, expl: dict) -> Any:
        cfg, s, prof = self.config, self._s, self.profile
        isl, osl = f_isl.value, f_osl.value
        context = isl + osl / 2  # mean context over a request's decode
        cur = (obs.prefill.replicas, obs.decode.replicas)
        cap_p = prof.prefill_capacity(isl, cfg.ttft_slo_ms)
        cap_d = prof.decode_capacity(context, cfg.itl_slo_ms)
        if cap_p is None:
            lo, hi = prof.isl_range()
            return self._hold(cur, now, D.HOLD_UNCOVERED, f"profile covers ISL {lo:.0f}..{hi:.0f}, forecast ISL is {isl:.0f}", expl)
        if cap_d is None:
            lo, hi = prof.context_range()
            return self._hold(cur, now, D.HOLD_UNCOVERED, f"profile covers decode context {lo:.0f}..{hi:.0f}, forecast context is {context:.0f}", expl)
        if cap_p <= 0:
            return self._hold(cur, now, D.HOLD_UNATTAINABLE, f"no prefill load meets TTFT {cfg.ttft_slo_ms:.0f} ms at ISL {isl:.0f}", expl)
        if cap_d <= 0:
            return self._hold(cur, now, D.HOLD_UNATTAINABLE, f"no decode load meets ITL {cfg.itl_slo_ms:.0f} ms at context {context:.0f}", expl)

        if cfg.correction:
            self._corr.update(obs, prof, s.hit)
        pool_tail = cfg.correction_engage_pool and cfg.correction_pool_ttft and _finite(obs.prefill_ttft_tail_s)
        corr_p = self._corr.factor("prefill", obs.prefill_ttft_tail_s if pool_tail else obs.ttft_tail_s,
                                   cfg.ttft_slo_ms, now)
        corr_d = self._corr.factor("decode", obs.itl_tail_s, cfg.itl_slo_ms, now)
        if corr_d != 1.0 and (curved := self._curved_decode_capacity(context)) is not None:
            corr_d = cap_d / max(curved, 1e-9)  # the capacity where the load-dependent ratio meets the SLO
        link = prof.kv_link.tokens_per_s if prof.kv_link is not None else None
        self._bursts.record(obs, now)
        if s.ramp is not None:
            s.ramp.record(now, obs.router_prompt_tokens_rate)
        u_p = self._prefill_utilization(obs)
        want, terms, load, capacity = self._terms(u_p, cap_p, cap_d, corr_p, corr_d, link, isl, osl, rate, obs, now)
        if u_p != cfg.target_utilization and terms.prefill < cfg.prefill_utilization_min_replicas:
            u_p = cfg.target_utilization  # a pool this small keeps the full headroom
            want, terms, load, capacity = self._terms(u_p, cap_p, cap_d, corr_p, corr_d, link, isl, osl, rate, obs, now)
        expl["capacity"] = {
            "prefillTokensPerSPerReplica": cap_p, "decodeTokensPerSPerReplica": cap_d,
            "prefillSaturatedTokensPerS": capacity.prefill_saturated, "linkTokensPerSPerInstance": link,
            "prefillCorrection": corr_p, "decodeCorrection": corr_d,
            "prefillLatencyRatio": self._corr.prefill, "decodeLatencyRatio": self._corr.decode,
            "targetUtilization": cfg.target_utilization, "prefillUtilization": u_p, "decodeContext": context,
        }
        expl["demand"] = {
            "requestRate": rate, "prefixHitRatio": s.hit, "prefillQueueTokens": load.prefill_queue_tokens,
            "decodeQueueTokens": load.decode_queue_tokens,
            "arrivingPromptTokensPerS": load.arriving_prompt_tokens,
            "prefillTokensPerS": load.prompt_tokens, "decodeTokensPerS": load.rate * osl,
            "prefillReplicas": want[0], "decodeReplicas": want[1],
            "terms": terms.to_dict(),
        }
        return want

    def _curved_decode_capacity(self, context: float) -> float | None:
        """Decode tokens/s per replica within the ITL SLO when the engine's ITL is the profile's times the ratio read
        at that load (``LatencyCorrection.decode_ratio_at``): the load x where x = capacity(SLO / ratio(x)), by
        bisection (the right side falls as x rises, the ratio's line rising with load). None: no line to read."""
        corr, prof, slo = self._corr, self.profile, self.config.itl_slo_ms
        if corr.decode_ratio_at(0.0) is None:
            return None

        def room(x: float) -> float:
            r = corr.decode_ratio_at(x)
            return (prof.decode_capacity(context, slo / r) or 0.0) - x if r else -x

        lo, hi = 0.0, max(prof.decode_capacity(context, slo / corr.decode_limits[0]) or 0.0, 1.0)
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if room(mid) > 0 else (lo, mid)
        return lo

    def _terms(self, u_p: float, cap_p: float, cap_d: float, corr_p: float, corr_d: float, link: float | None,
               isl: float, osl: float, rate: float, obs: Observation, now: float) -> tuple[tuple[int, int], Any, Load, Capacity]:
        """Both pools sized with the prefill compute term at ``u_p``: (want, terms, load, capacity)."""
        cfg, s, prof = self.config, self._s, self.profile
        cur = (obs.prefill.replicas, obs.decode.replicas)
        capacity = Capacity(
            prefill_slo=cap_p * u_p / corr_p,
            prefill_pool=((lambda n: (prof.prefill_capacity(isl, cfg.ttft_slo_ms, n) or cap_p) * u_p / corr_p)
                          if cfg.prefill_pool_queueing else None),
            prefill_saturated=(prof.prefill_saturated(isl) or cap_p) / corr_p,
            decode_slo=cap_d * cfg.target_utilization / corr_d,
            link=link, link_utilization=cfg.target_utilization,
            link_usable=self._link_usable(isl * (1 - s.hit), link) if link and cfg.link_contention else None,
            prefill_sends=(prof.prefill_saturated(isl) or cap_p) if cfg.cold_start_link else None,
            link_plateau=LINK_PLATEAU if cfg.cold_start_link else None)
        q_p, q_d = self._queue_tokens(obs, isl) if cfg.drain_backlog else (0.0, 0.0)
        tokens_now = obs.router_prompt_tokens_rate if cfg.floor_on_observed and _finite(obs.router_prompt_tokens_rate) else 0.0
        floor = tokens_now + s.ramp.rise() if cfg.floor_on_observed and s.ramp is not None else tokens_now
        window = obs.window_s if _finite(obs.window_s) else max(cfg.interval_s, 60.0)  # the live PromQL range
        arriving = arriving_tokens(tokens_now, obs.router_prompt_tokens_peak, window, now, s.start,
                                   signal=cfg.arriving_signal, young=cfg.arriving_young)
        load = Load(rate=max(rate, 0.0), isl=isl, osl=osl, hit=s.hit, prefill_queue_tokens=q_p,
                    decode_queue_tokens=q_d, prompt_tokens_floor=floor,
                    peak_prompt_tokens=self._bursts.reserve(obs, now, steady=self._steady_prefill(rate * isl, tokens_now, capacity)),
                    arriving_prompt_tokens=arriving if cfg.drain_backlog else 0.0,
                    prefill_replicas=cur[0], decode_replicas=cur[1], prefill_moving=self._prefill_moving(obs, now),
                    peak_is_need=(bool(cfg.burst_budget_s) and cfg.burst_fit_budget_s is None
                                  and _finite(obs.router_prompt_tokens_peak)),
                    peak_utilization=self._or_target(cfg.burst_utilization) if self._bursts.fitting(obs) else 1.0,
                    drain_serves_arriving=cfg.cold_start_link,
                    link_release=self._or_target(cfg.decode_link_release) if cfg.cold_start_link else None,
                    decode_queue_compute=cfg.decode_queue_compute)
        terms = size(load, capacity, drain_s=cfg.drain_s or cfg.interval_s,
                     startup_s=cfg.startup_s if cfg.drain_backlog else 0.0)
        return (terms.prefill, terms.decode), terms, load, capacity

    def _link_usable(self, tokens_per_transfer: float, link: float) -> Callable[[int, int], float]:
        budget = budget_transfers(self.config.link_wait_fraction * self.config.ttft_slo_ms / 1000,
                                  tokens_per_transfer / link)
        return lambda p, d: usable_utilization(p, d, budget)


    def _rising(self, obs: Observation) -> tuple[float, float] | None:
        """(previous, now) when the router's prompt-token rate reads above its previous tick's, else None
        (read once per tick: the reading becomes the next tick's previous)."""
        if self._rise is not None:
            return self._rise[0]
        tok = obs.router_prompt_tokens_rate
        rise = None
        if _finite(tok):
            prev, self._s.prompt_tokens = self._s.prompt_tokens, tok
            rise = (prev, tok) if prev is not None and tok > prev else None
        self._rise = (rise,)
        return rise

    def _prefill_utilization(self, obs: Observation) -> float:
        """The prefill compute term's utilisation this tick: prefill_utilization, but target_utilization on a rise
        when prefill_headroom_on_rise is set."""
        cfg = self.config
        if cfg.prefill_headroom_on_rise and self._rising(obs) is not None:
            return cfg.target_utilization
        return self._or_target(cfg.prefill_utilization)

    def _or_target(self, u: float | None) -> float:
        """A pool's or term's own utilisation target, else target_utilization."""
        return self.config.target_utilization if u is None else u

    def _steady_prefill(self, tokens: float, floor: float, capacity: Capacity) -> float:
        """Prompt tokens/s the prefill pool sized for the steady load alone moves flat out."""
        fresh = max(tokens, floor) * (1 - self._s.hit)
        replicas = max(math.ceil(capacity.prefill_replicas(fresh) - 1e-9), self.config.prefill_min, 1)
        return replicas * capacity.prefill_saturated / (1 - self._s.hit)

    def _prefill_moving(self, obs: Observation, now: float) -> float | None:
        """Prefill replica-equivalents moving tokens over the next start-up with ``drain_starting``; else None."""
        cfg = self.config
        return moving_replicas(obs.prefill, self._s.prefill_up_at, now, cfg.startup_s) if cfg.drain_starting else None

    @staticmethod
    def _queue_tokens(obs: Observation, isl: float) -> tuple[float, float]:
        """Prompt tokens queued for each pool (vLLM exports queued requests, not tokens:
        the mean ISL turns one into the other). Unknown counts as empty: the queue only
        ever adds replicas."""
        # Without a per-pool gauge, count every queued request as prefill work (conservative).
        q_p = obs.waiting_in("prefill")
        q_p = q_p if _finite(q_p) else 0.0
        q_d = obs.decode_waiting if _finite(obs.decode_waiting) else 0.0
        return q_p * isl, q_d * isl

    def _queued(self, obs: Observation) -> bool:
        return any(_finite(v) and v > 0 for v in (obs.prefill_waiting, obs.decode_waiting, obs.waiting))

    def _may_shrink(self, obs: Observation, pool: str) -> bool:
        """A pool shrinks only while its queue is (nearly) empty; an unknown queue blocks it."""
        state = obs.prefill if pool == "prefill" else obs.decode
        waiting = obs.waiting_in(pool)
        if not _finite(waiting):
            return False
        return waiting <= self.config.release_queue_per_replica * max(state.effective_ready, 1)

    # ------------------------------------------------------------------ clamping
    def _clamp(self, cur: tuple[int, int], want: tuple[int, int], obs: Observation, now: float, expl: dict) -> ScalingDecision:
        cfg, s = self.config, self._s
        notes: list[str] = []
        limited = False
        idle_for = now - (s.last_busy if s.last_busy is not None else now)
        if cfg.scale_to_zero and want == (0, 0) and idle_for >= cfg.idle_before_zero_s:
            s.recs.clear()
            return self._result(cur, (0, 0), now, f"idle for {idle_for:.0f}s: scale to zero", expl)
        p = min(max(want[0], cfg.prefill_min), cfg.prefill_max)
        d = min(max(want[1], cfg.decode_min), cfg.decode_max)
        if (p, d) != want:
            limited = limited or want[0] > cfg.prefill_max or want[1] > cfg.decode_max
            notes.append(f"bounds prefill {cfg.prefill_min}..{cfg.prefill_max}, decode {cfg.decode_min}..{cfg.decode_max}")

        # Pods that cannot start do not get company: cap at the current count.
        for pool, state, idx in (("prefill", obs.prefill, 0), ("decode", obs.decode, 1)):
            if state.pending > 0:
                since = s.pending_since.setdefault(pool, now)
                if now - since >= cfg.pending_timeout_s and (p, d)[idx] > cur[idx]:
                    p, d = (cur[0], d) if idx == 0 else (p, cur[1])
                    limited = True
                    notes.append(f"{pool}: {state.pending} pod(s) pending for {now - since:.0f}s, not adding more")
            else:
                s.pending_since.pop(pool, None)

        # Scale-down stabilisation: act on the highest recommendation in the window.
        terms = expl.get("demand", {}).get("terms", {})
        remember = (p, d) if cfg.stabilize_drain else undrained(terms, p, d, cfg.prefill_min, cfg.decode_min)
        s.recs.append((now, *remember, *(reserved(terms, pool) for pool in ("prefill", "decode"))))
        while s.recs and s.recs[0][0] < now - cfg.scale_down_stabilization_s:
            s.recs.popleft()
        before = (p, d)
        small = cfg.scale_down_stabilization_max_replicas
        # (the learnt margin reads the rate history: only where a pool is being released)
        clear = (clear_fraction(cfg.scale_down_clear_fraction, cfg.scale_down_clear_quantile, s.rate, cfg.horizon_ticks)
                 if p < cur[0] or d < cur[1] else None)
        # (a burst reserve that stood in the window: off one tick, it may be back the next; the window holds it)
        after = [cfg.scale_down_clear_after_burst or not any(r[i] for r in s.recs) for i in (3, 4)]
        if p < cur[0] and (small is None or p <= small) and not (after[0] and is_clear(terms, "prefill", p, clear)):
            p = min(cur[0], max(r[1] for r in s.recs))
        if d < cur[1] and (small is None or d <= small) and not (after[1] and is_clear(terms, "decode", d, clear)):
            d = min(cur[1], max(r[2] for r in s.recs))
        if (p, d) != before:
            notes.append(f"scale-down stabilised over {cfg.scale_down_stabilization_s:.0f}s")
        if cfg.release_only_cleared and clear is not None and (p < cur[0] or d < cur[1]):
            few = cfg.release_only_cleared_max_replicas
            floor = [min(n, max(k, cleared_floor(terms, pool, clear) or 0)) if k < n and (few is None or k <= few)
                     else k for pool, k, n in (("prefill", p, cur[0]), ("decode", d, cur[1]))]
            if (p, d) != tuple(floor):
                p, d = floor
                notes.append(f"released only as far as the load clears {clear:.2f} of each replica")
        rising = self._rising(obs)
        for pool, idx, hold in (("prefill", 0, cfg.hold_prefill_on_rise), ("decode", 1, cfg.hold_decode_on_rise)):
            if hold and rising is not None and (p, d)[idx] < cur[idx]:
                p, d = (cur[0], d) if idx == 0 else (p, cur[1])
                notes.append(f"{pool}: prompt tokens rising ({rising[0]:.0f} -> {rising[1]:.0f}/s), not shrinking")
        # A queue still draining keeps its pool: removing a replica now would only lengthen it.
        for pool, idx in (("prefill", 0), ("decode", 1)):
            if (p, d)[idx] < cur[idx] and not self._may_shrink(obs, pool):
                p, d = (cur[0], d) if idx == 0 else (p, cur[1])
                notes.append(f"{pool}: requests still queued, not shrinking")

        fp, fd = fit_budget(p, d, tp_prefill=cfg.prefill_tp, tp_decode=cfg.decode_tp, budget=cfg.gpu_budget,
                            min_prefill=cfg.prefill_min, min_decode=cfg.decode_min, want_prefill=want[0], want_decode=want[1])
        if (fp, fd) != (p, d):
            limited = True
            notes.append(f"GPU budget {cfg.gpu_budget}: wanted {gpus(p, d, cfg.prefill_tp, cfg.decode_tp)} GPUs")
        reason = f"prefill {cur[0]}->{fp}, decode {cur[1]}->{fd}"
        if notes:
            reason += " (" + "; ".join(notes) + ")"
        return self._result(cur, (fp, fd), now, reason, expl, limited=limited)

    # ------------------------------------------------------------------ helpers
    def _push(self, q: deque, v: float) -> None:
        q.append(float(v))
        while len(q) > self.config.history_len:
            q.popleft()

    def _result(self, cur, new, now, reason, expl, *, limited: bool = False) -> ScalingDecision:
        if new[0] > cur[0]:
            self._s.prefill_up_at = now
        expl["result"] = {"prefill": new[0], "decode": new[1]}
        return ScalingDecision(new[0], new[1], reason, held=False, limited=limited, previous=cur,
                               timestamp=now, explanation=expl)

    def _hold(self, cur, now, key: str, why: str, expl, *, budget: bool = True) -> ScalingDecision:
        """Keep the current sizes; only a GPU budget overrun may still shrink them."""
        cfg = self.config
        p, d = cur
        if budget:
            p, d = fit_budget(p, d, tp_prefill=cfg.prefill_tp, tp_decode=cfg.decode_tp, budget=cfg.gpu_budget,
                              min_prefill=min(cfg.prefill_min, p), min_decode=min(cfg.decode_min, d))
            if (p, d) != cur:
                why += f"; shrunk to fit GPU budget {cfg.gpu_budget}"
        expl["result"] = {"prefill": p, "decode": d}
        return ScalingDecision(p, d, f"held: {why}", held=True, hold_key=key, limited=(p, d) != cur,
                               previous=cur, timestamp=now, explanation=expl)
