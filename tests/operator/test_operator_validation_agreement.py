"""Differential test: for random specs, the API server (schema + CEL) and the pydantic
models give the same verdict. A spec the server accepts but the operator's models refuse
would be "accepted, then failed silently"."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from api.invalid_cases import valid_manifest
from operator_harness import GROUP, PLURAL, VERSION
from pdserve.api import DisaggregatedService

pytestmark = pytest.mark.controlplane
_names = (f"agree-{i}" for i in itertools.count())

bounds = st.fixed_dictionaries({"min": st.integers(-1, 6), "max": st.integers(-1, 6)})
spec_parts = st.fixed_dictionaries(
    {},
    optional={
        "prefill": st.fixed_dictionaries({"replicas": st.integers(-1, 8), "tensorParallelSize": st.sampled_from([0, 1, 2, 4, 8])}),
        "decode": st.fixed_dictionaries({"replicas": st.integers(-1, 8), "tensorParallelSize": st.sampled_from([0, 1, 2, 3, 8])}),
        "slo": st.fixed_dictionaries({}, optional={"ttftMs": st.sampled_from([-1, 0, 0.5, 500]), "attainment": st.sampled_from([0, 0.5, 1, 1.01])}),
        "kvConnector": st.fixed_dictionaries(
            {}, optional={"type": st.sampled_from(["NixlConnector", "MooncakeConnector", "LMCacheConnectorV1", "Nixl"]), "sideChannelPort": st.sampled_from([80, 1024, 5555, 5600, 7999, 65535, 65536])}
        ),
        # The version table's rules: connectors, TP pairing, side-channel ranges, block sizes, tokenizer modes.
        "engine": st.fixed_dictionaries(
            {},
            optional={
                "vllmVersion": st.sampled_from(["0.11.0", "0.33.0", "0.9.0"]),
                "blockSize": st.sampled_from([0, 8, 16, 24, 128, 256]),
                "args": st.sampled_from([[], ["--max-num-seqs", "8"], ["--block-size", "8"], ["--tokenizer-mode=slow"]]),
                "runAsRoot": st.booleans(),
            },
        ),
        "model": st.fixed_dictionaries({}, optional={"tokenizerMode": st.sampled_from(["auto", "hf", "slow", "mistral", "custom"])}),
        "rdma": st.fixed_dictionaries({"enabled": st.booleans()}, optional={"resources": st.sampled_from([{"rdma/ib": 1}, {"nvidia.com/gpu": 1}, {"ib": 1}])}),
        "autoscaling": st.fixed_dictionaries(
            {"enabled": st.booleans()},
            optional={
                "prefill": bounds,
                "decode": bounds,
                "gpuBudget": st.integers(0, 20),
                "scaleToZero": st.booleans(),
                "intervalSeconds": st.sampled_from([1, 5, 60, 4000]),
            },
        ),
        "prefillResources": st.sampled_from([{"cpu": "500m"}, {"memory": "1.5Gi"}, {"memory": "12X"}, {"cpu": 2}]),
    },
)


def _manifest(parts: dict[str, Any]) -> dict[str, Any]:
    m = valid_manifest(next(_names))
    resources = parts.pop("prefillResources", None)
    for key, value in parts.items():
        m["spec"][key] = {**m["spec"].get(key, {}), **value}
    if resources is not None:
        m["spec"]["prefill"]["resources"] = {"requests": resources}
    return m


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=spec_parts)
def test_api_server_and_models_agree(admin: client.ApiClient, parts: dict[str, Any]) -> None:
    manifest = _manifest(parts)
    try:
        client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, manifest, dry_run="All")
        server_ok, server_msg = True, ""
    except ApiException as e:
        assert e.status == 422, e.body
        server_ok, server_msg = False, e.body
    try:
        DisaggregatedService.from_body(manifest)
        model_ok, model_msg = True, ""
    except ValidationError as e:
        model_ok, model_msg = False, str(e)
    event("accepted" if server_ok else "refused")
    assert server_ok == model_ok, f"server {'accepts' if server_ok else 'refuses'} but models {'accept' if model_ok else 'refuse'}: {manifest['spec']}\n{server_msg}\n{model_msg}"
