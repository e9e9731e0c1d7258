"""The planner's latency correction: observed / profile-expected mean latency per pool.

Pure: the ratios and when each pool last engaged live here, the policy feeds observations
and asks which factor to apply. A ratio above 1 (the pool slower than its profile) is
applied only once the pool's tail nears the SLO (below that the SLO holds anyway and the
extra replicas would be waste), and then for ``hold_s`` after the tail last did: the
replicas it added are what brought the tail down, so letting go the next tick plans them
away again and the tail climbs back (a limit cycle; bench/planner, 70B TP4 Azure 4x).

The TTFT a client sees is more than the prefill the profile models: both engines' front ends, the KV
transfer and the decode side's first step add a fixed latency that does not scale with capacity.
A ratio over the whole TTFT reads that as a slower engine (8B 1-GPU, 1.5k-token prompts: ~100 ms
observed against the profile's 49 ms at light load, the ratio pinned at its 1.5 bound), and the
first tail near the SLO, a burst's queue, then engages that phantom 1.5x on every term for
``hold_s``. With ``learn_offset`` that fixed part is measured where it is all there is, in windows
whose prefill load is light (``light_utilization`` of the replicas' flat-out rate: the profile's
queueing wait is then small), and taken off the observed TTFT before the ratio. The offset is the
median excess of the last ``offset_windows`` light windows: one light window can still carry a
queue's tail (a burst's requests completing after it), another a long prompt that lifts the mean
ISL the profile is read at but not the observed median. A ratio below 1 is then left unapplied:
what remains below 1 is that noise (0.7..0.97 on 8B bursty at light load), and applied it shrank
the burst reserve to 4 prefill replicas between bursts that need 5. With ``prefill_floor`` (the policy's
``prefill_ratio_floor``, 0.85 by default since session 25) a prefill ratio under 1
is applied down to that floor: against the pool model (``pool``) what is left under 1 is the profile's own error.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from pdserve.planner.core.observation import Observation
from pdserve.planner.core.observation import finite as _finite
from pdserve.planner.core.profile import CapacityProfile


@dataclass
class LatencyCorrection:
    bounds: tuple[float, float]
    engage: float  # fraction of the SLO the tail must reach before a ratio above 1 applies
    hold_s: float
    prefill: float = 1.0  # smoothed latency ratios
    decode: float = 1.0
    engaged_at: dict[str, float] = field(default_factory=dict)  # pool -> last time its tail neared the SLO
    learn_offset: bool = False
    light_utilization: float = 0.2
    offset_windows: int = 20
    light_excess_ms: deque = field(default_factory=deque)  # observed minus expected TTFT, light windows
    # The fixed TTFT path known up front instead (None: not modelled): front ends, hand-off and the decode
    # side's first step, in ms; the KV transfer is added per request from the profile's link.
    ttft_path_ms: float | None = None
    # Read the prefill ratio from the prefill engines' own TTFT (``Observation.prefill_ttft_mean_s``) where
    # the observation has it: what the prefill profile models, without the fixed path beyond it.
    pool_ttft: bool = False
    # Expect the pool's TTFT, not a lone replica's, at the per-replica load (``PolicyConfig.prefill_pool_queueing``):
    # the same model the sizing reads, so the ratio is against what the pool was sized for.
    pool: bool = False
    # Apply a prefill ratio under 1 down to this floor (None: never under 1 with the fixed path modelled, see factor).
    prefill_floor: float | None = None
    # The decode ratio's bounds where they differ from ``bounds`` (None: the same). The decode ratio reads the ITL,
    # which no queue in front of the pool inflates, so it can be trusted further than the prefill one.
    decode_bounds: tuple[float, float] | None = None
    # Read the decode ratio as a line in the per-replica decode load (``decode_ratio_at``), fitted over the last
    # ``curve_windows`` windows, not as one number: an engine whose decode step grows faster with its batch than the
    # profile's reads near 1 with the pool large and far above it with the pool small, and the one number read at a
    # large pool released replicas into a batch the profile under-stated (bench/planner cross_engine.py, held-out 70B
    # Azure 4x from 600 s on Dynamo's engine: 0.93 at 4 decode replicas, 2.8 two minutes after releasing to 1).
    decode_curve: bool = False
    curve_windows: int = 40
    decode_points: deque = field(default_factory=deque)  # (per-replica decode tokens/s, observed / profile ITL)
    # Leave the prefill ratio as it is for this long (s) after the prefill pool last held more than
    # ``backlog_per_replica`` requests waiting per ready replica (None: read every window, as before). A backlog's
    # requests complete with its wait in their TTFT for up to a rate window after the queue is gone, and that wait is
    # the pool having been short, not slow: read as a ratio it pins the prefill ratio at its bound, and the tail the
    # same backlog raised engages it for ``hold_s`` (bench/planner, held-out 70B Azure 4x from 600 s: the cold start's
    # 700-request queue read 1.25 -> 1.5, five prefill replicas held where the best schedule found runs two or three).
    backlog_s: float | None = None
    backlog_per_replica: float = 1.0
    _backlog_at: float | None = field(default=None, repr=False)  # when the prefill pool last held a backlog
    # The line through ``decode_points`` as (mean load, mean ratio, slope), fitted once per window in ``update``
    # (the policy reads it ~40 times a tick, bisecting for the load where it meets the SLO); None: no line to read.
    _decode_line: tuple[float, float, float] | None = field(default=None, repr=False)

    @property
    def decode_limits(self) -> tuple[float, float]:
        """The decode ratio's bounds: ``decode_bounds``, else the shared ``bounds``."""
        return self.decode_bounds or self.bounds

    def expected_path_ms(self, profile: CapacityProfile, kv_tokens: float) -> float:
        """What a request's TTFT holds beyond its prefill on an idle pair (0 where not modelled)."""
        if self.ttft_path_ms is None:
            return 0.0
        link = profile.kv_link.tokens_per_s if profile.kv_link is not None else 0.0
        return self.ttft_path_ms + (1000 * kv_tokens / link if link > 0 else 0.0)

    @property
    def ttft_offset_ms(self) -> float:
        return max(statistics.median(self.light_excess_ms), 0.0) if self.light_excess_ms else 0.0

    def update(self, obs: Observation, profile: CapacityProfile, hit: float) -> None:
        """Ratio of observed to profile-expected mean latency at the observed load, smoothed."""
        lo, hi = self.bounds
        self._note_backlog(obs)  # every window, also one with nothing completed: a cold start's first
        rate = obs.request_rate
        if not (_finite(rate) and rate > 0):
            return
        ready_p, ready_d = obs.prefill.effective_ready, obs.decode.effective_ready
        # With pool_ttft a window without the engines' TTFT (no prefill completed in it) leaves the ratio as it is:
        # the client's TTFT is another quantity, not a stand-in.
        ttft_s = obs.prefill_ttft_mean_s if self.pool_ttft else obs.ttft_mean_s
        if _finite(ttft_s) and not self.after_backlog(obs) and _finite(obs.mean_isl) and ready_p > 0:
            load = rate * obs.mean_isl * (1 - hit) / ready_p
            exp = profile.expected_ttft_ms(obs.mean_isl, load, ready_p if self.pool else 1)
            if exp and exp > 0:
                if not self.pool_ttft:
                    exp += self.expected_path_ms(profile, obs.mean_isl * (1 - hit))
                seen = ttft_s * 1000
                if self.learn_offset:
                    flat_out = profile.prefill_saturated(obs.mean_isl)
                    if flat_out and load <= self.light_utilization * flat_out:
                        self.light_excess_ms.append(seen - exp)
                        while len(self.light_excess_ms) > self.offset_windows:
                            self.light_excess_ms.popleft()
                    seen = max(seen - self.ttft_offset_ms, 0.0)
                self.prefill = 0.5 * self.prefill + 0.5 * min(max(seen / exp, lo), hi)
        if _finite(obs.itl_mean_s) and _finite(obs.mean_isl) and _finite(obs.mean_osl) and ready_d > 0:
            exp = profile.expected_itl_ms(obs.mean_isl + obs.mean_osl / 2, rate * obs.mean_osl / ready_d)
            if exp and exp > 0:
                dlo, dhi = self.decode_limits
                raw = min(max(obs.itl_mean_s * 1000 / exp, dlo), dhi)
                self.decode = 0.5 * self.decode + 0.5 * raw
                if self.decode_curve:
                    self.record_decode(rate * obs.mean_osl / ready_d, raw)

    def _note_backlog(self, obs: Observation) -> None:
        """Remember when the prefill pool last held a backlog: more than ``backlog_per_replica`` waiting per ready
        replica. A queue that is unknown is no backlog (the reading is then as before)."""
        waiting = obs.waiting_in("prefill")
        if self.backlog_s is not None and _finite(waiting) and \
                waiting > self.backlog_per_replica * max(obs.prefill.effective_ready, 1):
            self._backlog_at = obs.timestamp

    def after_backlog(self, obs: Observation) -> bool:
        """The prefill pool held a backlog within ``backlog_s`` of this observation, so its TTFT is the backlog's
        wait (never with ``backlog_s`` None)."""
        return (self.backlog_s is not None and self._backlog_at is not None
                and obs.timestamp - self._backlog_at <= self.backlog_s)

    def record_decode(self, load: float, ratio: float) -> None:
        """One window's (per-replica decode tokens/s, bounded ITL ratio) into the line ``decode_ratio_at`` reads."""
        self.decode_points.append((load, ratio))
        while len(self.decode_points) > self.curve_windows:
            self.decode_points.popleft()
        self._decode_line = self._fit_decode_line()

    def _fit_decode_line(self) -> tuple[float, float, float] | None:
        """The least-squares line through the recent windows' (load, ratio) as (mean load, mean ratio, slope); None
        with fewer than six windows, loads that span less than 1.5x, or a ratio that falls with load (noise, not a
        batch cost)."""
        pts = list(self.decode_points)
        if len(pts) < 6:
            return None
        xs = [x for x, _ in pts]
        if min(xs) <= 0 or max(xs) < 1.5 * min(xs):
            return None
        n, mx = len(pts), sum(xs) / len(pts)
        my = sum(y for _, y in pts) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        return (mx, my, slope) if slope > 0 else None

    def decode_ratio_at(self, load: float) -> float | None:
        """The decode ratio at a per-replica decode load (tokens/s) on the line fitted through the recent windows'
        (load, ratio) (``_fit_decode_line``), within the decode bounds; None without a line to read (``decode_curve``
        off, or no line fitted)."""
        if not self.decode_curve or self._decode_line is None:
            return None
        mx, my, slope = self._decode_line
        lo, hi = self.decode_limits
        return min(max(my + slope * (load - mx), lo), hi)

    def factor(self, pool: str, tail_s: float, slo_ms: float, now: float) -> float:
        """The divisor for the pool's capacity now (1: the profile as it is)."""
        ratio = self.prefill if pool == "prefill" else self.decode
        if ratio < 1:
            if pool == "prefill" and self.prefill_floor is not None:
                return max(ratio, self.prefill_floor)
            # (With the fixed path modelled too: the M/M/1 profile over-states the queueing wait at high load,
            # 0.69 on 70B x4 at 450 s, and applied that shrank prefill under a rising load.)
            return 1.0 if (self.learn_offset or self.ttft_path_ms is not None or self.pool_ttft) and pool == "prefill" else ratio
        # Unknown tail latency counts as near: then trust the measured ratio.
        if not _finite(tail_s) or tail_s * 1000 >= self.engage * slo_ms:
            self.engaged_at[pool] = now
            return ratio
        at = self.engaged_at.get(pool)
        return ratio if at is not None and now - at < self.hold_s else 1.0
