"""The pydantic models refuse exactly what the CRD refuses, and accept the examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from pdserve.api import DisaggregatedService, DisaggregatedServiceSpec

from .invalid_cases import INVALID, Invalid, valid_manifest

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


def test_at_least_ten_distinct_invalid_cases() -> None:
    assert len({c.field for c in INVALID}) >= 10


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_valid(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    svc = DisaggregatedService.from_body(doc)
    assert svc.metadata.name == doc["metadata"]["name"]


def test_examples_cover_both_engines_and_autoscaling() -> None:
    specs = [DisaggregatedServiceSpec.model_validate(yaml.safe_load(p.read_text())["spec"]) for p in EXAMPLES]
    assert {s.engine.kind for s in specs} == {"vllm", "mock"}
    assert any(s.autoscaling.enabled and s.engine.kind == "mock" for s in specs)


@pytest.mark.parametrize("name", ["x" * 43, "1-starts-with-digit", "has.dot"])
def test_bad_names_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        DisaggregatedService.from_body(valid_manifest(name))
