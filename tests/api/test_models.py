"""The pydantic models refuse exactly what the CRD refuses, and accept the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from pdserve.api import DisaggregatedService, DisaggregatedServiceSpec
from pdserve.api.vllm_versions import DEFAULT_VERSION

from .invalid_cases import INVALID, VALID, Invalid, Valid, valid_manifest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def test_valid_manifest_parses_with_defaults() -> None:
    svc = DisaggregatedService.from_body(valid_manifest("a"))
    assert svc.spec.kv_connector.type == "NixlConnector"
    assert svc.spec.kv_connector.side_channel_port == 5600
    assert svc.spec.router.policy == "kv_aware"
    assert svc.spec.served_name == "meta-llama/Llama-3.1-8B-Instruct"
    assert svc.spec.to_wire()["kvConnector"] == {"type": "NixlConnector", "sideChannelPort": 5600}


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_spec_refused_naming_the_field(case: Invalid) -> None:
    with pytest.raises(ValidationError) as err:
        DisaggregatedService.from_body(case.manifest("bad"))
    assert case.pydantic_field in str(err.value), str(err.value)


@pytest.mark.parametrize("case", VALID, ids=[c.id for c in VALID])
def test_valid_spec_accepted(case: Valid) -> None:
    DisaggregatedService.from_body(case.manifest("good"))


def test_at_least_ten_distinct_invalid_cases() -> None:
    assert len({c.field for c in INVALID}) >= 10


def services(path: Path) -> list[dict[str, Any]]:
    """The DisaggregatedService documents of an example (some also carry a Secret, PVC, Job)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "DisaggregatedService"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_valid(path: Path) -> None:
    docs = services(path)
    assert docs, f"{path.name} has no DisaggregatedService"
    for doc in docs:
        svc = DisaggregatedService.from_body(doc)
        assert svc.metadata.name == doc["metadata"]["name"]


def test_examples_cover_both_engines_and_autoscaling() -> None:
    specs = [DisaggregatedServiceSpec.model_validate(d["spec"]) for p in EXAMPLES for d in services(p)]
    assert {s.engine.kind for s in specs} == {"vllm", "mock"}
    assert any(s.autoscaling.enabled and s.engine.kind == "mock" for s in specs)
    # A gated model: token from a Secret, weights from a shared cache volume.
    assert any(s.model.token_secret and s.model_cache.persistent_volume_claim for s in specs)


def test_gated_example_references_its_own_secret_and_pvc() -> None:
    docs = list(yaml.safe_load_all((EXAMPLES[0].parent / "gated-model-cache.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    spec = by_kind["DisaggregatedService"]["spec"]
    assert spec["model"]["tokenSecret"]["name"] == by_kind["Secret"]["metadata"]["name"]
    assert spec["model"]["tokenSecret"]["key"] in by_kind["Secret"]["stringData"]
    assert spec["modelCache"]["persistentVolumeClaim"] == by_kind["PersistentVolumeClaim"]["metadata"]["name"]
    job = by_kind["Job"]["spec"]["template"]["spec"]
    assert job["volumes"][0]["persistentVolumeClaim"]["claimName"] == by_kind["PersistentVolumeClaim"]["metadata"]["name"]


@pytest.mark.parametrize("name", ["x" * 43, "1-starts-with-digit", "has.dot"])
def test_bad_names_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        DisaggregatedService.from_body(valid_manifest(name))


def test_readme_resource_is_valid() -> None:
    """The README's DisaggregatedService snippet is what users copy: it must parse."""
    readme = (EXAMPLES[0].parents[1] / "README.md").read_text()
    block = readme.split("## The DisaggregatedService", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(block)
    doc["metadata"].setdefault("namespace", "default")
    svc = DisaggregatedService.from_body(doc)
    # ... and show the current default release, not a stale pin.
    assert svc.spec.engine.vllm_version == DEFAULT_VERSION and svc.spec.engine.image is None


def test_router_weights_reach_the_router_flags_including_the_recent_load_pair() -> None:
    from pdserve.router.shell.config import routing_flags

    body = valid_manifest("w")
    body["spec"]["router"] = {"weights": {"overlap": 4, "recentRequestTokens": 0, "recentHalfLifeSeconds": 30}}
    spec = DisaggregatedService.from_body(body).spec.router.routing(block_size=16)
    assert (spec.weights.overlap_weight, spec.weights.recent_request_tokens, spec.weights.recent_half_life_s) == (
        4, 0, 30)
    flags = routing_flags(spec)
    for flag, value in (("--cost-overlap-weight", "4.0"), ("--cost-recent-request-tokens", "0.0"),
                        ("--cost-recent-half-life-s", "30.0")):
        assert flags[flags.index(flag) + 1] == value
    body["spec"]["router"] = {"weights": {"recentHalfLifeSeconds": 0}}
    with pytest.raises(ValidationError, match="recentHalfLifeSeconds|recent_half_life_seconds"):
        DisaggregatedService.from_body(body)
