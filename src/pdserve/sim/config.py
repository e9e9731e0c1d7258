"""What to simulate: topology, pool sizes, profiles, scheduling knobs, KV link, SLOs."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pdserve.router.core.spec import RoutingSpec
from pdserve.sim.metrics import Slo

Topology = Literal["colocated", "chunked", "disagg"]

DEFAULT_PROFILE = "llama-3.1-8b-h100"
# Publish -> receive lag of a KV event batch on the live stack: median 0.45 ms (p90 3.3 ms)
# in bench/sim/results/kv_event_lag.json (bench/sim/kv_event_lag.py, loopback, mock worker).
DEFAULT_KV_EVENT_LAG_S = 0.0005


class SimConfigError(ValueError):
    """A configuration that cannot be simulated; the message names the problem."""


class SimConfig(BaseModel):
    """One serving configuration.

    * ``colocated``: ``instances`` engines, continuous batching without chunking:
      waiting prompts are admitted whole into the next step next to the running
      decodes, so every decode in that step waits for the whole prefill (vLLM v1
      with chunked prefill off; vLLM v0 ran the prefill as a separate step first,
      which stalls decodes the same way).
    * ``chunked``: ``instances`` engines with Sarathi-style chunked prefill: every
      step carries the running decodes plus prompt chunks up to ``token_budget``.
    * ``disagg``: ``prefill_instances`` prefill-only engines and ``decode_instances``
      decode engines; each prompt's KV moves over the instances' KV links
      (``kv_link_gbps`` per instance, ``serial`` after prefill or ``layerwise``
      overlapped with the last prefill step).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topology: Topology = "disagg"
    instances: int = Field(4, ge=0, description="engines for colocated / chunked")
    prefill_instances: int = Field(2, ge=0)
    decode_instances: int = Field(2, ge=0)
    profile: str = Field(DEFAULT_PROFILE, description="pdserve.worker.perf profile name")
    prefill_profile: str | None = Field(None, description="profile of prefill engines (default: profile)")
    decode_profile: str | None = Field(None, description="profile of decode engines (default: profile)")
    tp: int | None = Field(None, ge=1, description="tensor-parallel size override for all engines")
    prefill_tp: int | None = Field(None, ge=1)
    decode_tp: int | None = Field(None, ge=1)
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="the router's spec, as the live router takes it (policy, decode policy, weights, P/D threshold, "
        "admission); its block_size is the engines' (``block_size`` below). ``policy=`` / ``decode_policy=`` "
        "are accepted as shorthands for routing.policy / routing.decode_policy",
    )
    max_num_seqs: int = Field(256, ge=1)
    token_budget: int = Field(512, ge=16, description="chunked prefill: max_num_batched_tokens")
    decode_token_budget: int | None = Field(
        None, ge=16,
        description="disagg: the decode engines' max_num_batched_tokens (vLLM's --max-num-batched-tokens on the "
        "decode pool). A decode engine that prefills a prompt itself (P/D skipped) runs it in chunks of at most "
        "this many tokens, each in one step with its decodes: it bounds the ITL those decodes see. None = 8192 (or "
        "token_budget when larger), as for every P/D engine",
    )
    max_model_len: int = Field(131072, ge=16)
    block_size: int | None = Field(
        None, ge=1,
        description="KV block size in tokens; None = 16 (vLLM's default), or the trace's own prefix-block size "
        "(512 for Mooncake hash_ids): finer blocks add per-block work without adding prefix information",
    )
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    kv_link_gbps: float = Field(100.0, gt=0, description="KV link bandwidth per instance, Gbit/s")
    kv_transfer: Literal["serial", "layerwise"] = "serial"
    kv_lease_s: float = Field(480.0, gt=0, description="prefill side holds blocks this long at most (vLLM default)")
    ingress_s: float = Field(
        0.0, ge=0,
        description="host/network time from the client's send to the engine's queue (HTTP hops through the "
        "router, the routing decision, request parsing); TTFT still counts from the send. 0 = not modelled",
    )
    pd_handoff_s: float = Field(
        0.0, ge=0,
        description="disagg: host/network time from the prefill's end to the decode engine's KV pull "
        "(prefill response to the router, the decode request, the side-channel round trip), on top of the "
        "KV bytes' link time. 0 = not modelled",
    )
    step_host_s: float = Field(
        0.0, ge=0,
        description="host time added to every engine step beyond the profile's modelled step time (e.g. the "
        "live mock's event-loop timer granularity and token delivery). 0 = not modelled",
    )
    # What the router sees. By default what the live router sees: worker gauges from
    # /metrics scrapes every --scrape-interval (0.5 s) and KV events one batch per engine
    # step (vLLM's ZMQ EventBatch), applied after the publish -> subscriber lag.
    view_refresh_s: float = Field(
        0.5, ge=0,
        description="router sees engine gauges (running, waiting, KV usage) as of scrapes this far apart, like the "
        "live router's --scrape-interval; 0 = instantaneous",
    )
    kv_event_lag_s: float = Field(
        DEFAULT_KV_EVENT_LAG_S, ge=0,
        description="a step's KV events reach the router's index this long after the step ends (one batch per step, "
        "as vLLM publishes them over ZMQ); 0 = at the step's end",
    )
    exact_views: bool = Field(
        False,
        description="the router sees every engine's state at the instant it decides (no scrape staleness, no event "
        "lag): an idealised router, for comparison",
    )
    startup_delay_s: float = Field(60.0, ge=0, description="autoscaling: new instance warm-up")
    gpu_seconds_from_s: float = Field(
        0.0, ge=0,
        description="count GPU-seconds from this time only (an evaluation that replays history before its scored "
        "window pays for the window, not the history); 0 = every instance's whole lifetime",
    )
    first_tick_s: float | None = Field(
        None, ge=0,
        description="autoscaling: when the autoscaler first ticks, then every interval (default: one interval after "
        "the first arrival); the planner's metric scrapes keep their phase to the ticks. Sets the phase of both "
        "against the traffic, which an evaluation may hold fixed across replays of different length or vary to "
        "measure what the phase alone changes",
    )
    slo: Slo = Field(default_factory=Slo)
    seed: int = 0
    max_sim_time_s: float | None = Field(None, gt=0, description="stop the clock here (default: no limit)")

    @model_validator(mode="before")
    @classmethod
    def _routing_shorthands(cls, data: Any) -> Any:
        # SimConfig(policy="kv_aware") reads better in benchmarks than a nested spec.
        if isinstance(data, dict) and ("policy" in data or "decode_policy" in data):
            data = dict(data)
            base = data.get("routing") or RoutingSpec()
            if isinstance(base, dict):
                base = RoutingSpec(**base)
            short = {k: data.pop(k) for k in ("policy", "decode_policy") if k in data}
            data["routing"] = replace(base, **short)
        return data

    @property
    def policy(self) -> str:
        return self.routing.policy.value

    @model_validator(mode="after")
    def _check_counts(self) -> SimConfig:
        if self.topology == "disagg":
            if self.prefill_instances < 1 or self.decode_instances < 1:
                raise ValueError(
                    f"disagg needs >= 1 prefill and >= 1 decode instance, got "
                    f"{self.prefill_instances}P{self.decode_instances}D"
                )
        elif self.instances < 1:
            raise ValueError(f"{self.topology} needs instances >= 1, got {self.instances}")
        return self

    # Resolved per-pool settings --------------------------------------------
    def pool_profile(self, pool: str) -> tuple[str, int | None]:
        """(profile name, TP override) for ``pool`` in {"colocated", "prefill", "decode"}."""
        if pool == "prefill":
            return self.prefill_profile or self.profile, self.prefill_tp or self.tp
        if pool == "decode":
            return self.decode_profile or self.profile, self.decode_tp or self.tp
        return self.profile, self.tp

    @property
    def label(self) -> str:
        if self.topology == "disagg":
            return f"{self.prefill_instances}P{self.decode_instances}D"
        return f"{self.topology}:{self.instances}"


_SPEC = re.compile(r"^(?:(?P<topo>colocated|chunked)[:x]?(?P<n>\d+)|(?P<p>\d+)p(?P<d>\d+)d)$", re.I)


def parse_layout(spec: str) -> dict[str, object]:
    """``"colocated:4"``, ``"chunked:4"`` or ``"2p1d"`` -> SimConfig fields."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise SimConfigError(
            f"bad configuration {spec!r}: expected 'colocated:N', 'chunked:N' or 'XpYd' (e.g. '2p1d')"
        )
    if m.group("topo"):
        return {"topology": m.group("topo").lower(), "instances": int(m.group("n"))}
    return {"topology": "disagg", "prefill_instances": int(m.group("p")), "decode_instances": int(m.group("d"))}
