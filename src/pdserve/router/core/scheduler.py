"""The route scheduler: where one request goes, for the live router and the simulator (pure).

``plan`` decides the mode (colocated, P/D, or local prefill on the decode worker),
the prefill worker or the decode worker, and the admission verdict; the caller does
the I/O (HTTP, or the simulator's engines) and reports back through the lifecycle
hooks. Rules, in the order the live router applies them:

* no prefill pool configured: colocated, ``local_decode`` policy on the decode pool;
* a prefill pool but no prefill worker up: local (the decode worker prefills);
* fewer uncached tokens on the chosen prefill worker than ``disagg_threshold_tokens``:
  local, since moving the KV would cost more than computing it there;
* a decode worker whose cached prefix (KV events) leaves fewer uncached tokens than
  ``decode_reuse_threshold_tokens``, and fewer than the chosen prefill worker would
  compute: local on the decode pool (its policy picks the worker; P/D if that pick
  does not hold the prefix after all);
* the chosen prefill worker queues more than ``max_prefill_queue_tokens`` prompt tokens
  and the decode worker the local policy picks would finish this prefill sooner (its
  queued plus uncached tokens are fewer): local on that decode worker, whose compute is
  the only capacity that exists at once in a burst (conditional disaggregation on the
  prefill backlog);
* otherwise P/D: the prefill worker now, the decode worker (``pd_decode`` policy) once
  the prefill is done (:meth:`Scheduler.decode_after_prefill`), as vLLM's proxy does;
* with a TTFT SLO, every placement that prefills is checked by admission control on
  the chosen worker's queued prompt tokens (a refusal is a 503 upstream).

A P/D prefill that fails falls back to :meth:`Scheduler.plan_local`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pdserve.router.core.admission import AdmissionControl, Verdict
from pdserve.router.core.build import Pool, PolicySet
from pdserve.router.core.spec import RoutingSpec
from pdserve.router.core.kv_index import KvIndex
from pdserve.router.policies import Decision, Policy, RouteRequest, WorkerView


class Mode(StrEnum):
    COLOCATED = "colocated"  # no prefill pool
    PD = "pd"  # remote prefill, then decode elsewhere
    LOCAL = "local"  # a P/D deployment, but the decode worker prefills this one itself


@dataclass(frozen=True, slots=True)
class PoolViews:
    """Healthy workers per pool when deciding. ``prefill`` is None when no prefill pool is
    configured at all (colocated), an empty sequence when one is but none is up."""

    decode: Sequence[WorkerView]
    prefill: Sequence[WorkerView] | None = None


@dataclass(slots=True)
class RoutePlan:
    mode: Mode
    decode_policy: Policy  # places (and re-places, on retry) the decode side
    prefill: Decision | None = None  # P/D: the prefill worker
    decode: Decision | None = None  # colocated / local: the decode worker (None: no worker up)
    verdict: Verdict | None = None  # None when admission control is off or nothing was placed
    notes: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return self.verdict is None or self.verdict.admit


class Scheduler:
    def __init__(self, spec: RoutingSpec, index: KvIndex | None = None) -> None:
        self.spec = spec
        self.index = index if index is not None else KvIndex()
        self.policies = PolicySet.from_spec(spec, self.index)
        a = spec.admission
        self.admission = AdmissionControl(a.ttft_slo_ms, a.factor, a.prefill_tokens_per_s)

    @property
    def uses_prefixes(self) -> bool:
        """Whether any policy reads block hashes (else callers need not hash prompts)."""
        return self.spec.uses_prefixes

    # ---- decisions ------------------------------------------------------------
    def select(self, policy: Policy, req: RouteRequest, views: Sequence[WorkerView], now: float) -> Decision | None:
        """``policy``'s pick among ``views``, or None when there is none (also for retries)."""
        return policy.select(req, views, now) if views else None

    def plan(self, req: RouteRequest, views: PoolViews, now: float) -> RoutePlan:
        if views.prefill is None:
            return self.plan_local(req, views.decode, now, Mode.COLOCATED)
        pol = self.policies.prefill
        first = self.select(pol, req, views.prefill, now)
        if first is None:
            return self.plan_local(req, views.decode, now, Mode.LOCAL, "no prefill worker up: decode prefills locally")
        threshold = self.spec.disagg_threshold_tokens
        if first.new_prefill_tokens < threshold:
            return self.plan_local(req, views.decode, now, Mode.LOCAL,
                                   f"uncached {first.new_prefill_tokens} < {threshold} tokens: skip P/D")
        if self.spec.decode_reuse_threshold_tokens:
            local = self._decode_reuse(req, views.decode, first, now)
            if local is not None:
                return local
        if self.spec.max_prefill_queue_tokens:
            local = self._prefill_backlog(req, views, first, now)
            if local is not None:
                return local
        return RoutePlan(Mode.PD, self.policies.pd_decode, prefill=first,
                         verdict=self._admit(pol, first, views.prefill))

    def plan_local(self, req: RouteRequest, decode_views: Sequence[WorkerView], now: float,
                   mode: Mode = Mode.LOCAL, note: str | None = None) -> RoutePlan:
        """The decode worker prefills: colocated, P/D skipped, or a failed remote prefill."""
        pol = self.policies.local_decode
        d = self.select(pol, req, decode_views, now)
        plan = RoutePlan(mode, pol, decode=d, verdict=self._admit(pol, d, decode_views) if d else None)
        if note:
            plan.notes.append(note)
        return plan

    def _decode_reuse(self, req: RouteRequest, decode_views: Sequence[WorkerView], first: Decision,
                      now: float) -> RoutePlan | None:
        """Local on the decode pool when a decode worker holds most of the prompt (see the module rules)."""
        threshold = self.spec.decode_reuse_threshold_tokens
        held = self.index.overlaps(req.block_hashes, [w.worker_id for w in decode_views])
        if not held:
            return None
        floor = 1 if req.prompt_tokens else 0  # vLLM recomputes at least the last prompt token
        uncached = max(req.prompt_tokens - max(held.values()) * self.spec.block_size, floor)
        if uncached >= threshold or uncached >= first.new_prefill_tokens:
            return None
        # The local policy weighs that overlap against load; it may pick another worker.
        plan = self.plan_local(req, decode_views, now, Mode.LOCAL)
        if plan.decode is None or plan.decode.new_prefill_tokens >= min(threshold, first.new_prefill_tokens):
            return None
        plan.notes.append(f"decode worker holds the prefix: uncached {plan.decode.new_prefill_tokens} < {threshold} "
                          f"tokens (prefill side {first.new_prefill_tokens}): skip P/D")
        return plan

    def _prefill_backlog(self, req: RouteRequest, views: PoolViews, first: Decision, now: float) -> RoutePlan | None:
        """Local on the decode pool when the prefill worker is backed up (see the module rules).

        Dynamo's disaggregated router prefills remotely only while the prefill queue holds
        fewer than ``max_prefill_queue_size`` requests (ai-dynamo/dynamo
        examples/llm/components/disagg_router.py, ``PyDisaggregatedRouter.prefill_remote``,
        with a TODO to weigh each queued request's size). Here the queue is weighed: the
        prompt tokens queued on the chosen prefill worker (the same ledger admission reads),
        and the decode worker must also be the quicker place: a decode worker that already
        prefills a backlog of its own would only move the wait, and slow its decodes."""
        assert views.prefill is not None
        pview = next((v for v in views.prefill if v.worker_id == first.worker_id), None)
        queued = self.policies.prefill.pending_prefill(pview) if pview is not None else 0
        limit = self.spec.max_prefill_queue_tokens
        if queued <= limit:
            return None
        plan = self.plan_local(req, views.decode, now, Mode.LOCAL)
        if plan.decode is None:
            return None
        dview = next(v for v in views.decode if v.worker_id == plan.decode.worker_id)
        local = self.policies.local_decode.pending_prefill(dview) + plan.decode.new_prefill_tokens
        remote = queued + first.new_prefill_tokens
        if local >= remote:
            return None
        plan.notes.append(f"prefill worker {first.worker_id} queues {queued} > {limit} tokens; "
                          f"{plan.decode.worker_id} finishes this prefill after {local} < {remote} tokens: skip P/D")
        return plan

    def decode_after_prefill(self, req: RouteRequest, decode_views: Sequence[WorkerView],
                             now: float) -> Decision | None:
        return self.select(self.policies.pd_decode, req, decode_views, now)

    def _admit(self, policy: Policy, d: Decision, views: Sequence[WorkerView]) -> Verdict | None:
        if self.admission.slo_s is None:
            return None
        view = next((v for v in views if v.worker_id == d.worker_id), None)
        queued = policy.pending_prefill(view) if view is not None else 0
        return self.admission.check(queued, d.new_prefill_tokens)

    # ---- lifecycle hooks ------------------------------------------------------
    def on_routed(self, policy: Policy, decision: Decision, req: RouteRequest, now: float) -> None:
        """The request was sent to ``decision.worker_id`` (each attempt, retries included)."""
        policy.on_routed(decision, req, now)

    def on_prefill_done(self, policy: Policy, request_id: str, now: float) -> None:
        policy.on_prefill_done(request_id, now)

    def on_finished(self, policy: Policy, request_id: str, worker_id: str, now: float) -> None:
        policy.on_finished(request_id, worker_id, now)

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """A remote prefill of ``tokens`` uncached tokens took ``seconds``: admission learns throughput."""
        self.admission.observe_prefill(tokens, seconds)

    def forget_worker(self, worker_id: str) -> None:
        for p in self.policies.all():
            p.forget_worker(worker_id)

    def policy_of(self, pool: Pool, mode: Mode) -> Policy:
        """The policy that placed a request of ``mode`` on ``pool``."""
        if pool == "prefill":
            return self.policies.prefill
        return self.policies.pd_decode if mode is Mode.PD else self.policies.local_decode
