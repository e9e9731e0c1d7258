"""Replicas each pool needs for a load: every bottleneck as its own term, the largest binds.

Pure arithmetic, no state, so the policy, its tests and the benchmark's bound read the
same terms. Each term is a fractional replica count:

* prefill compute: prompt tokens/s to prefill (after prefix-cache hits) over what one
  replica sustains within the TTFT SLO (the profile, derated by headroom), optionally as one
  of a pool of that size (``Capacity.prefill_pool``: pools behind the router queue less);
* KV link, both ends: every prefilled token's KV crosses one prefill instance's link
  and one decode instance's link (``pdserve.common.kvlink``: a transfer holds both), so
  *each* pool needs enough instances that its links carry the KV stream;
* decode compute + KV memory: generated tokens/s over what one decode replica
  sustains within the ITL SLO (the profile's decode points stop where the KV cache
  is full, so memory caps the concurrency behind that number);
* burst reserve: bursts shorter than a replica's start-up cannot be answered by
  scaling, only absorbed by capacity already up: each pool keeps enough, at saturated
  speed (prefill) and link rate (decode), for the highest short-window prompt-token
  rate seen recently (``peak_prompt_tokens``; the policy decides how long "recently" is),
  with headroom (``peak_utilization``) where that rate is a burst's arrival rate;
* burst drain, start-up taken into account: a replica requested now serves only after
  ``startup_s``, so until then the queue keeps growing by whatever arrives beyond the
  pool's current flat-out speed (``arriving_prompt_tokens`` over ``prefill_replicas`` x
  saturated); the queue projected to that moment must then be gone within ``drain_s``,
  at saturated speed, on top of the arrivals. A ramp with an empty queue but more
  arriving than the current pool moves builds that queue too, so this term also asks
  for it before anything is queued. The decode side drains the same way over its links,
  and its links must also carry what the prefill pool sends while *it* drains (both ends:
  a prefill queue drained flat out is a KV stream at the prefill pool's drain rate). With
  ``decode_queue_compute`` the decode queue is decode work as well: its requests' outputs,
  worked off within ``drain_s`` at the SLO capacity on top of the arrivals (a pool whose
  batch is full queues requests for a slot, which no link term sees).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Load:
    rate: float  # requests/s to plan for
    isl: float  # prompt tokens per request
    osl: float  # generated tokens per request
    hit: float = 0.0  # prefix-cache hit ratio, 0..1: hit tokens need neither prefill nor transfer
    prefill_queue_tokens: float = 0.0  # prompt tokens waiting for a prefill replica
    # Prompt tokens of the requests queued at the decode pool (vLLM's waiting requests times the mean ISL): KV that
    # waits for a decode replica's link, and with ``decode_queue_compute`` also decode work waiting for a batch slot.
    decode_queue_tokens: float = 0.0
    prompt_tokens_floor: float = 0.0  # arrival-time prompt tokens/s observed: never plan below it
    peak_prompt_tokens: float = 0.0  # recent short-window peak of arriving prompt tokens/s
    # For the drain projection: prompt tokens/s arriving right now (short window), and the
    # replicas each pool has now (ready or starting: all serve before one requested now).
    arriving_prompt_tokens: float = 0.0
    prefill_replicas: int = 0
    decode_replicas: int = 0
    # Prefill replica-equivalents moving prompt tokens over that start-up (``PolicyConfig.drain_starting``): the ready
    # ones all of it, those still starting only from when they are ready (None: ``prefill_replicas`` all along).
    prefill_moving: float | None = None
    # The peak is the router's delay-bound burst rate (``pdserve.common.burst``, budget > 0):
    # what a pool must *serve* so no wait exceeds the budget, below the rate the burst
    # *arrives* at. The prefill pool kept for it then drains the burst flat out, so its KV
    # reaches the decode links at that pool's saturated rate: size the decode reserve for that.
    peak_is_need: bool = False
    # Plan the reserve at this fraction of each replica's saturated speed and link rate. 1 for
    # a peak read over one short window (it is the burst's top already); below 1 where the peak
    # is a burst's *arrival rate* (``pdserve.planner.core.burst_fit``): a burst that outlasts
    # the TTFT budget at the very rate of its reserve queues without bound, as a link does.
    peak_utilization: float = 1.0
    # Cold start / link (``PolicyConfig.cold_start_link``): while a queue drains, the pool also
    # serves what arrives *now* (the short-window rate), not only the forecast, which lags a
    # ramp and reads a third of the load while the rate window is still filling.
    drain_serves_arriving: bool = False
    # Hysteresis at the link threshold: the decode pool gives up a replica only once the links
    # left carry the KV stream at this fraction of their usable throughput (None: at all of it).
    # The usable share is a Poisson probe's; real arrivals and a forecast that lags a ramp run a
    # link at the threshold into a queue that outlives the next decision (bench/planner, 70B x4).
    link_release: float | None = None
    # A decode queue is decode work too (``PolicyConfig.decode_queue_compute``): the requests waiting in the decode
    # pool (for their KV or for a batch slot) each still generate ``osl`` tokens, so the decode pool is sized to serve
    # the arrivals *and* work that backlog off within the drain time at its SLO capacity, not only to carry its KV
    # over the links. False: the decode queue is read as KV waiting for links alone (before session 29).
    decode_queue_compute: bool = False

    @property
    def prompt_tokens(self) -> float:
        return max(self.rate * self.isl, self.prompt_tokens_floor) * (1.0 - self.hit)


@dataclass(frozen=True)
class Capacity:
    """Per replica (tokens/s), already derated for headroom where the SLO needs it."""

    prefill_slo: float  # within the TTFT SLO
    prefill_saturated: float  # flat out (queue drain)
    decode_slo: float  # generated tokens/s within the ITL SLO
    link: float | None = None  # KV tokens/s one instance's link moves at saturation; None: not modelled
    link_utilization: float = 0.85  # plan links for this fraction (FIFO queueing near saturation)
    # Per-link usable fraction with (senders, receivers) instances (``pdserve.planner.core.link_model``:
    # links held at both ends lose throughput to head-of-line blocking as instances grow).
    # None: ``link_utilization`` for every count, the pair carrying min(P, D) links' worth.
    link_usable: Callable[[int, int], float] | None = None
    # What one prefill replica sends over its link flat out (KV tokens/s) where that differs from
    # ``prefill_saturated`` (None: the same). The latency correction derates the pool's speed for
    # *sizing*; the KV stream a draining pool pushes at the decode links is its real speed.
    prefill_sends: float | None = None
    # A KV stream no pair reachable by ``link_pair`` carries within the wait budget: the first pair of
    # the walk within this fraction of the walk's highest throughput (None: the walk's last pair, its step
    # limit). Past the senders' plateau more receivers carry no more (link_model: 12 senders, 9..64
    # receivers, 184-194k tokens/s, the probe's own spread), so walking on to the limit bought decode
    # replicas for throughput the link model does not show (bench/planner, 8B Mooncake: 65 -> 16).
    link_plateau: float | None = None
    # Per-replica prefill tokens/s within the TTFT SLO as one of a pool of ``n`` (derated like ``prefill_slo``,
    # which is its value at 1): a pool behind the router queues less than its replicas would alone
    # (``pdserve.planner.core.pool_queueing``). None: ``prefill_slo`` whatever the pool's size.
    prefill_pool: Callable[[int], float] | None = None

    def prefill_replicas(self, tokens: float) -> float:
        """Prefill replicas (fractional) whose SLO capacity carries ``tokens``/s: ``tokens / prefill_slo``, or with
        ``prefill_pool`` the point on the pool's throughput ``n x prefill_pool(n)``, linear between whole pools, so
        that its ceiling is the smallest pool that carries the load."""
        if self.prefill_pool is None or not (0 < tokens < math.inf):
            return tokens / self.prefill_slo
        per = self.prefill_pool
        n = max(_ceil(tokens / self.prefill_slo), 1)  # each member carries at least prefill_slo: an upper bound
        at = n * max(per(n), self.prefill_slo)  # the pool's throughput at n, then at each smaller size tried
        while True:
            below = (n - 1) * max(per(n - 1), self.prefill_slo) if n > 1 else 0.0
            if below < tokens:
                return n - 1 + min(max((tokens - below) / (at - below), 1e-6), 1.0)
            n, at = n - 1, below

    def link_throughput(self, p: int, d: int) -> float:
        """KV tokens/s ``p`` prefill and ``d`` decode instances move within the wait budget."""
        if not self.link:
            return math.inf
        if p < 1 or d < 1:
            return 0.0
        if self.link_usable is None:
            return min(p, d) * self.link * self.link_utilization
        return d * self.link_usable(p, d) * self.link

    def link_pair(self, demand: float, p: int, d: int, *, limit: int = 64) -> tuple[int, int]:
        """The fewest instances from (p, d) up whose links carry ``demand`` KV tokens/s: grow
        the side that adds more throughput (ties: decode). ``limit`` steps at most (the
        planner's bounds clamp the result anyway); where no pair on the way carries it, with
        ``link_plateau`` the first one near the best the walk found."""
        p, d = max(p, 1), max(d, 1)
        walk = [(self.link_throughput(p, d), p, d)]
        for _ in range(limit):
            if walk[-1][0] >= demand:
                return p, d
            # the two candidates' throughputs are the walk's next entry: no third evaluation of the chosen one
            more_p, more_d = self.link_throughput(p + 1, d), self.link_throughput(p, d + 1)
            walk.append((more_p, p + 1, d) if more_p > more_d else (more_d, p, d + 1))
            _, p, d = walk[-1]
        if walk[-1][0] >= demand or self.link_plateau is None:
            return p, d
        top = max(have for have, _, _ in walk)
        return next((p, d) for have, p, d in walk if have >= (1 - self.link_plateau) * top)


@dataclass(frozen=True)
class Terms:
    prefill_compute: float
    prefill_link: float
    prefill_drain: float
    decode_compute: float
    decode_link: float
    decode_drain: float
    prefill_peak: float = 0.0
    decode_peak: float = 0.0

    def _terms(self, pool: str) -> list[tuple[str, float]]:
        return [(t, getattr(self, f"{pool}_{t}")) for t in ("compute", "link", "drain", "peak")]

    @property
    def prefill(self) -> int:
        return _ceil(max(v for _, v in self._terms("prefill")))

    @property
    def decode(self) -> int:
        return _ceil(max(v for _, v in self._terms("decode")))

    def binding(self) -> dict[str, str]:
        """Which term decided each pool (for the decision's explanation)."""
        return {pool: max(self._terms(pool), key=lambda kv: kv[1])[0] for pool in ("prefill", "decode")}

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self) | {f"binding_{k}": v for k, v in self.binding().items()}


def size(load: Load, cap: Capacity, *, drain_s: float, startup_s: float = 0.0) -> Terms:
    if not (drain_s > 0):
        raise ValueError(f"drain time must be > 0, got {drain_s}")
    if not (startup_s >= 0):
        raise ValueError(f"start-up time must be >= 0, got {startup_s}")
    tokens = load.prompt_tokens  # prefilled, and their KV transferred, per second
    fresh = 1.0 - load.hit
    arriving = max(load.arriving_prompt_tokens * fresh, tokens)
    cur_p, cur_d = max(load.prefill_replicas, 0), max(load.decode_replicas, 0)
    # Queues as they will be when a replica requested now is ready.
    moving_p = cur_p if load.prefill_moving is None else max(load.prefill_moving, 0.0)
    moves_p = moving_p * cap.prefill_saturated
    q_now = max(load.prefill_queue_tokens, 0.0) * fresh
    q_p = max(q_now + (arriving - moves_p) * startup_s, 0.0) if (q_now > 0 or arriving > moves_p) else 0.0
    # KV the prefill pool sends meanwhile: its queue and the arrivals, at most flat out.
    sends = cap.prefill_sends if cap.prefill_sends is not None else cap.prefill_saturated
    sent = min(moving_p * sends, arriving + (q_now / startup_s if startup_s > 0 else 0.0))
    moves_d = cap.link_throughput(cur_p, cur_d) if cur_d else 0.0
    q_d = max(load.decode_queue_tokens, 0.0) * fresh
    q_d = max(q_d + (sent - moves_d) * startup_s, 0.0) if (q_d > 0 or sent > moves_d) else 0.0
    serve = arriving if load.drain_serves_arriving else tokens
    prefill_out = q_p / drain_s + serve  # what the prefill pool moves, and sends, while it drains
    peak = max(load.peak_prompt_tokens, 0.0) * fresh

    prefill_compute = cap.prefill_replicas(tokens)
    prefill_drain = prefill_out / cap.prefill_saturated if q_p > 0 else 0.0
    peak_u = min(max(load.peak_utilization, 1e-6), 1.0)
    prefill_peak = peak / (cap.prefill_saturated * peak_u)
    decode_compute = load.rate * load.osl / cap.decode_slo
    # The decode backlog as requests (the queue arrives in prompt tokens: vLLM counts requests, the policy scaled them
    # by the mean ISL), each still to generate its output, worked off within the drain time on top of the arrivals.
    q_d_requests = max(load.decode_queue_tokens, 0.0) / load.isl if load.isl > 0 else 0.0
    decode_backlog = ((load.rate + q_d_requests / drain_s) * load.osl / cap.decode_slo
                      if load.decode_queue_compute and q_d_requests > 0 else 0.0)
    # Links, both ends: the pair (P, D) whose links carry each KV stream, starting from what
    # compute asks for each pool (more prefill senders also ease the receivers' links).
    p0, d0 = _ceil(max(prefill_compute, prefill_drain, prefill_peak)), _ceil(decode_compute)
    steady = cap.link_pair(tokens, p0, d0) if cap.link and tokens > 0 else (0, 0)
    if cap.link and tokens > 0 and load.link_release and cur_d > steady[1]:
        keep = cap.link_pair(tokens / load.link_release, p0, d0)[1]
        steady = (steady[0], min(cur_d, max(keep, steady[1])))
    drain = cap.link_pair(q_d / drain_s + prefill_out, p0, d0) if cap.link and (q_d > 0 or q_p > 0) else (0, 0)
    # The burst reserve is sized flat out, like its prefill side: a burst is absorbed at the
    # links' saturated rate, not within the steady wait budget (chosen on the tuning set:
    # with the contention budget the reserve held twice the decode replicas on bursty seed 0
    # and bought no attainment).
    # (planned at the links' utilisation target like the steady stream: a link run flat out
    # through a burst that lasts longer than the budget queues without bound)
    if cap.link and peak > 0:
        link_burst = (p0 * cap.prefill_saturated / (cap.link * cap.link_utilization) if load.peak_is_need
                      else peak / (cap.link * peak_u))
        burst = (p0, _ceil(link_burst))
    else:
        burst = (0, 0)
    # A link term shows only where the links ask for more than compute already does.
    def over(n: int, base: int) -> float:
        return float(n) if n > base else 0.0

    return Terms(
        prefill_peak=max(prefill_peak, over(burst[0], p0)),
        decode_peak=over(burst[1], d0),
        prefill_compute=prefill_compute,
        prefill_link=over(max(steady[0], drain[0]), p0),
        prefill_drain=prefill_drain,
        decode_compute=decode_compute,
        decode_link=over(steady[1], d0),
        decode_drain=max(over(drain[1], d0), decode_backlog),
    )


def absorbed(burst_tokens: float, duration_s: float, steady_tokens: float, budget_s: float) -> bool:
    """A rectangular burst (prompt tokens/s for ``duration_s``) that a pool moving ``steady_tokens``/s
    flat out drains within ``budget_s``: what it queues, ``(burst - steady) x duration``, is at most
    ``steady x budget``. Such a burst needs no reserve above the steady plan (a Poisson stream's
    densest seconds read as one: bench/planner, Azure 70B x1 held a second prefill replica for them)."""
    excess = burst_tokens - steady_tokens
    if excess <= 0:
        return True
    return math.isfinite(duration_s) and excess * max(duration_s, 0.0) <= steady_tokens * budget_s


def missed_tokens(burst_tokens: float, duration_s: float, steady_tokens: float, budget_s: float,
                  background_tokens: float) -> float:
    """Prompt tokens that arrive while a FIFO pool's wait exceeds ``budget_s``, for a rectangular burst
    (``burst_tokens``/s for ``duration_s``, background included) on a pool moving ``steady_tokens``/s flat
    out, with ``background_tokens``/s arriving after the burst. The queue grows at ``burst - steady`` and an
    arrival waits ``queue / steady``: arrivals from ``t* = budget x steady / (burst - steady)`` to the
    burst's end wait past the budget, and so does the background that arrives while the queue the burst
    left drains back to ``steady x budget`` (at ``steady - background``). Zero exactly where ``absorbed``
    holds; infinite where the background alone fills the pool (the queue never drains)."""
    excess = burst_tokens - steady_tokens
    if excess <= 0 or absorbed(burst_tokens, duration_s, steady_tokens, budget_s):
        return 0.0
    if not math.isfinite(duration_s) or background_tokens >= steady_tokens:
        return math.inf
    t_star = budget_s * steady_tokens / excess
    during = burst_tokens * (duration_s - t_star)
    left = excess * duration_s - steady_tokens * budget_s  # queue beyond the budget when the burst ends
    return during + background_tokens * left / (steady_tokens - background_tokens)


# Capacity.link_plateau where the policy sets it (PolicyConfig.cold_start_link): the link model's spread
# along a plateau (12 senders, 9..64 receivers at Mooncake's 0.13 s transfers: 187-194k tokens/s, 3.7 %;
# its bisection alone is 0.36 % of a link per receiver) is within it, one more receiver's share below it
# is not, so the walk stops where the links stop adding throughput, not one noisy step later.
LINK_PLATEAU = 0.05


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9) if math.isfinite(x) else 0
