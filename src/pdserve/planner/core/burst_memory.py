"""The burst reserve's memory (pure): the short-window peaks a planner keeps for ``peak_window_s``, and the one it
plans prefill for now (``BurstMemory.reserve``).

Each tick records the router's burst gauge, fitted to a burst's arrival rate and duration where the gauge is read at
two budgets (``burst_fit.burst_shape``), with the load's level at that tick. The reserve is the highest remembered
burst that the steady plan would not absorb, unless the bursts are one lone episode or would, recurring as seen, miss
fewer tokens than the SLO's error budget allows (``PolicyConfig``'s burst fields say why each rule is there).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from pdserve.planner.core.burst_fit import burst_shape, lone_episode
from pdserve.planner.core.observation import Observation
from pdserve.planner.core.observation import finite as _finite
from pdserve.planner.core.policy_config import PolicyConfig
from pdserve.planner.core.sizing import absorbed, missed_tokens


@dataclass(frozen=True)
class Peak:
    """One tick's reading of the burst gauge."""
    t: float
    rate: float  # fitted burst arrival rate (or the short-window peak where no fit), prompt tokens/s
    duration: float  # the fitted burst's length in s (inf: a steady stream, or no fit)
    level: bool  # the fitted rate is the load's level, not a burst (burst_level_ratio)
    seen: float  # the router's prompt-token rate window at that tick: the tokens the window saw arrive


@dataclass
class BurstMemory:
    config: PolicyConfig
    peaks: deque[Peak] = field(default_factory=deque)

    def fitting(self, obs: Observation) -> bool:
        """The peak is a fitted burst arrival rate (both gauge readings present)."""
        cfg = self.config
        return (cfg.burst_fit_budget_s is not None and cfg.burst_budget_s is not None
                and _finite(obs.router_prompt_tokens_peak) and _finite(obs.router_prompt_tokens_peak_wide))

    def record(self, obs: Observation, now: float) -> None:
        """This tick's short-window peak into the window ``reserve`` reads (once per tick)."""
        cfg, peaks = self.config, self.peaks
        if cfg.peak_window_s <= 0:
            return
        seen = obs.router_prompt_tokens_rate if _finite(obs.router_prompt_tokens_rate) else 0.0
        seen = max(seen, 0.0)
        if self.fitting(obs):
            assert cfg.burst_budget_s is not None and cfg.burst_fit_budget_s is not None
            # A burst is believed to last at least the wide budget: below that the fit reads one or
            # two long prompts in one second as a "rate" (Mooncake: 12k-token prompts, one second
            # at 290k tokens/s, 16 prefill replicas held for it), and the budget absorbs them anyway.
            rate, duration = burst_shape(obs.router_prompt_tokens_peak, cfg.burst_budget_s,
                                         obs.router_prompt_tokens_peak_wide, cfg.burst_fit_budget_s,
                                         min_duration_s=cfg.burst_fit_budget_s)
            peaks.append(Peak(now, rate, duration, self._level(rate, seen), seen))
        elif _finite(obs.router_prompt_tokens_peak):
            peaks.append(Peak(now, obs.router_prompt_tokens_peak, math.inf, False, 0.0))
        while peaks and peaks[0].t <= now - cfg.peak_window_s:
            peaks.popleft()

    def reserve(self, obs: Observation, now: float, steady: float = 0.0) -> float:
        """The highest short-window prompt-token rate within ``peak_window_s`` (with a burst fit budget: the highest
        fitted burst arrival rate, among the bursts the steady plan, moving ``steady`` prompt tokens/s, would not
        drain in time)."""
        cfg = self.config
        if cfg.peak_window_s <= 0:
            return 0.0
        bursts = [p for p in self.peaks if not p.level]
        now_seen = obs.router_prompt_tokens_rate
        if cfg.burst_on_level and _finite(now_seen):
            # A burst topped the level it was seen on; on today's lower level the same excess tops less.
            bursts = [replace(p, rate=p.rate - max(p.seen - now_seen, 0.0)) if p.seen > 0 else p for p in bursts]
        if cfg.burst_absorb_fraction is None or not self.fitting(obs):
            return max((p.rate for p in bursts), default=0.0)
        budget = cfg.burst_absorb_fraction * cfg.ttft_slo_ms / 1000
        over = [p for p in bursts if not absorbed(p.rate, p.duration, steady, budget)]
        if over and lone_episode([p.t for p in over], now, cfg.lone_burst_s):
            return 0.0
        if over and self._within_miss_budget(over, steady, budget):
            return 0.0
        return max((p.rate for p in over), default=0.0)

    def _within_miss_budget(self, over: list[Peak], steady: float, budget: float) -> bool:
        """The bursts the steady plan does not absorb, recurring as seen, would miss fewer prompt tokens than
        ``burst_miss_budget`` of the SLO's error budget (``1 - attainment``) of the tokens the peak window saw:
        then that plan stands and they spend the error budget instead of a reserve held for the whole window.
        Tokens stand in for requests (``sizing.missed_tokens``); each tick in the window counts ``interval_s``."""
        cfg = self.config
        if cfg.burst_miss_budget is None:
            return False
        arrived = sum(p.seen for p in self.peaks) * cfg.interval_s
        missed = sum(missed_tokens(p.rate, p.duration, steady, budget, p.seen) for p in over)
        return missed <= cfg.burst_miss_budget * (1 - cfg.attainment) * arrived

    def _level(self, rate: float, seen: float) -> bool:
        """The fitted burst rate is the load's level (``burst_level_ratio``): the rate window, reading ``seen``
        prompt tokens/s (0 where unknown), already shows it."""
        ratio = self.config.burst_level_ratio
        return ratio is not None and seen > 0 and rate <= ratio * seen
