"""Load ordering shared by the load-only policies (pure)."""

from __future__ import annotations

from pdserve.router.policies.types import Policy, WorkerView

KV_FULL = 0.97


def load_key(policy: Policy, w: WorkerView) -> tuple[bool, int, int, float]:
    """Sort key, smaller is less loaded: nearly-full KV last, then requests, queued
    prompt tokens and KV usage."""
    return (w.kv_usage >= KV_FULL, policy.active_requests(w), policy.pending_prefill(w), w.kv_usage)


def describe(policy: Policy, w: WorkerView) -> str:
    return (
        f"{policy.active_requests(w)} active, {policy.pending_prefill(w)} queued prompt tokens, "
        f"kv {w.kv_usage:.0%}"
    )
