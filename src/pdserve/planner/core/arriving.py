"""What arrives now: the request rate the forecast learns from (``arrival_rate``), the prompt-token rate the
drain projection serves (``arriving_tokens``) and when the traffic began (issue 12: the young window).

The planner's load signal is the router's prompt-token counter over a rate window (``Observation.window_s``,
the live PromQL range). Until traffic has flowed for a whole window, the window reaches back before the first
request and its mean reads low (the simulator's first tick sees half a 60 s window of traffic). Two rules for
that young window (``PolicyConfig.arriving_young``):

* ``"peak"`` (as shipped): young counts from the first tick that saw traffic, and while young the router's
  burst gauge (the busiest 2 s since the last tick) stands in. That tick is up to an interval after the first
  arrival, so a full window of traffic still counts as young, and the gauge is a burst's rate, not the load's:
  8B Mooncake at 30 s 95.8k prompt tokens/s where the window's 30 s of traffic averaged 28.4k.
* ``"seen"``: young counts from the first arrival (``TrafficStart.arrival``), and the arriving rate is the
  window's tokens over the traffic actually seen: ``mean x window / elapsed``.

No I/O and no clock: the policy passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.planner.core.observation import Observation
from pdserve.planner.core.observation import finite as _finite

YOUNG_RULES = ("peak", "seen")


@dataclass
class TrafficStart:
    """When the traffic began, as far as the planner can tell.

    The first arrival comes after the last tick that saw no traffic (that tick's window held none), so that
    tick's time is its earliest; with no such tick (the planner's first tick already busy: the simulator's
    first tick is one interval after the first arrival; live, a planner started under load) it is taken to be
    one interval before the first busy tick. Earliest, so the rate over the traffic seen is never over-read
    from a too-short span (it can read low by up to the scrape lag, as the window mean itself does)."""

    tick: float | None = None  # the first tick that saw traffic
    arrival: float | None = None  # the first arrival's earliest time
    idle: float | None = None  # the last tick that saw none, before ``tick``

    def observe(self, now: float, busy: bool, interval_s: float) -> None:
        if self.tick is not None:
            return
        if not busy:
            self.idle = now
            return
        self.tick = now
        self.arrival = self.idle if self.idle is not None else now - interval_s


def arriving_tokens(tokens_now: float, peak: float, window_s: float, now: float, start: TrafficStart, *,
                    signal: str = "rate", young: str = "peak") -> float:
    """Prompt tokens/s arriving now, for the queue projection.

    ``tokens_now``: the rate window's mean (0 where the policy does not use it); ``peak``: the burst gauge
    (NaN: unknown); ``signal`` ``"peak"``: the gauge whenever it is higher (``PolicyConfig.arriving_signal``);
    ``young``: the rule while the window is young (module docstring)."""
    has_peak = _finite(peak)
    if signal == "peak":
        return max(tokens_now, peak) if has_peak else tokens_now
    if young == "seen":
        if start.arrival is None:
            return tokens_now
        elapsed = now - start.arrival
        return tokens_now * window_s / elapsed if 0 < elapsed < window_s else tokens_now
    is_young = start.tick is None or now - start.tick < window_s
    return max(tokens_now, peak) if is_young and has_peak else tokens_now


def arrival_rate(obs: Observation, last_isl: float | None) -> float | None:
    """Requests/s arriving now. Completions lag arrivals by a whole request (and keep
    coming while a burst's queue drains, long after it stopped arriving); the router's
    prompt-token counter does not, so where it exists it is the load, turned into a
    rate with the latest known ISL (``last_isl``: the policy's ISL history) so that rate x ISL
    is the token rate it measured. None: tokens arrive but no ISL is known yet."""
    tokens = obs.router_prompt_tokens_rate
    if not _finite(tokens):
        return obs.request_rate
    if tokens <= 0:
        return 0.0
    isl = obs.mean_isl if _finite(obs.mean_isl) and obs.mean_isl > 0 else last_isl
    if isl is None:
        return None
    return tokens / isl
