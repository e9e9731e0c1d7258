"""DisaggregatedService spec -> planner settings (policy config, Prometheus query, profile)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.core.profile import CapacityProfile

# Annotation naming a ConfigMap (key profile.json) with a measured capacity profile.
PROFILE_ANNOTATION = "pdserve.io/capacity-profile"


@dataclass(frozen=True)
class HostedSettings:
    config: PolicyConfig
    prometheus_url: str
    enabled: bool
    perf_profile: str  # engine model used when no measured profile is attached
    profile_configmap: str | None


def settings_from_body(body: dict[str, Any], *, default_prometheus_url: str | None = None,
                       default_interval_s: float | None = None) -> HostedSettings:
    """Validate with the CRD's own models; a bad spec raises ValueError naming the field.

    The defaults (the planner's command-line flags) apply only where the resource does
    not set the field itself.
    """
    from pydantic import ValidationError

    from pdserve.api.resource import DisaggregatedService

    try:
        res = DisaggregatedService.from_body(body)
    except ValidationError as exc:
        raise ValueError(f"invalid DisaggregatedService: {exc}") from exc
    spec, auto = res.spec, res.spec.autoscaling
    raw_auto = ((body.get("spec") or {}).get("autoscaling") or {})
    interval = float(auto.interval_seconds)
    if "intervalSeconds" not in raw_auto and default_interval_s:
        interval = float(default_interval_s)
    prom = auto.prometheus_url
    if "prometheusUrl" not in raw_auto and default_prometheus_url:
        prom = default_prometheus_url
    cfg = PolicyConfig(
        ttft_slo_ms=spec.slo.ttft_ms, itl_slo_ms=spec.slo.itl_ms, attainment=spec.slo.attainment,
        interval_s=interval, predictor=auto.predictor,
        prefill_min=auto.prefill.min, prefill_max=auto.prefill.max,
        decode_min=auto.decode.min, decode_max=auto.decode.max,
        prefill_tp=spec.prefill.tensor_parallel_size, decode_tp=spec.decode.tensor_parallel_size,
        gpu_budget=auto.gpu_budget, scale_down_stabilization_s=float(auto.scale_down_stabilization_seconds),
        scale_to_zero=auto.scale_to_zero,
    )
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return HostedSettings(cfg, prom, auto.enabled, spec.engine.mock_profile,
                          annotations.get(PROFILE_ANNOTATION))


def rate_window(interval_s: float, scrape_interval_s: float = 15.0) -> str:
    """PromQL range for rate(): one planner interval, but at least 4 scrapes."""
    return f"{int(max(interval_s, 4 * scrape_interval_s))}s"


def load_profile_for(settings: HostedSettings, namespace: str, core_api: Any = None) -> CapacityProfile:
    """The attached measured profile, else one derived from the engine model."""
    if settings.profile_configmap:
        import json

        cm = core_api.read_namespaced_config_map(settings.profile_configmap, namespace)
        raw = (cm.data or {}).get("profile.json")
        if raw is None:
            raise ValueError(f"ConfigMap {namespace}/{settings.profile_configmap} has no key profile.json")
        return CapacityProfile.model_validate(json.loads(raw))
    from pdserve.planner.core.profile_model import derive_profile

    # The correction compares the prefill pods' TTFT, front end included, with this profile: derive it likewise.
    return derive_profile(settings.perf_profile, prefill_tp=settings.config.prefill_tp,
                          decode_tp=settings.config.decode_tp, include_frontend=settings.config.correction_pool_ttft)
