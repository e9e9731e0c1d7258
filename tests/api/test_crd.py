"""The committed CRD YAML and reference are current, structural, and valid Kubernetes objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from pdserve.api import vllm_versions
from pdserve.api.cli import main as crd_main
from pdserve.api.crd import CRD_FILENAME, build_crd, crd_yaml
from pdserve.api.reference import reference_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crd_is_current() -> None:
    for folder in ("crds", "charts/pdserve/crds"):
        committed = (ROOT / folder / CRD_FILENAME).read_text()
        assert committed == crd_yaml(), f"{folder}/{CRD_FILENAME} is stale: run `pdserve crd --out {folder}/`"


def test_committed_reference_is_current() -> None:
    assert (ROOT / "docs/crd-reference.md").read_text() == reference_markdown(), "run `pdserve crd --reference docs/crd-reference.md`"


def test_install_doc_version_table_is_current() -> None:
    doc = (ROOT / "docs/install.md").read_text()
    assert vllm_versions.markdown_table() in doc, "run `make crds` (pdserve crd --versions-doc docs/install.md)"
    for name, info in vllm_versions.VERSIONS.items():
        assert f"| {name}" in doc and info.image in doc


def test_cli_check_mode_detects_staleness(tmp_path: Path) -> None:
    assert crd_main(["--out", str(tmp_path), "--check"]) == 1
    assert crd_main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / CRD_FILENAME).read_text() == crd_yaml()
    assert crd_main(["--out", str(tmp_path), "--check"]) == 0


def test_cli_through_the_pdserve_command(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pdserve.cli", "crd"], capture_output=True, text=True, check=True)
    assert yaml.safe_load(out.stdout)["kind"] == "CustomResourceDefinition"


def _walk(node: dict[str, Any], path: str, visit: Any) -> None:
    visit(node, path)
    for name, child in node.get("properties", {}).items():
        _walk(child, f"{path}.{name}", visit)
    if "items" in node:
        _walk(node["items"], f"{path}[]", visit)
    if isinstance(node.get("additionalProperties"), dict):
        _walk(node["additionalProperties"], f"{path}{{}}", visit)


def test_schema_is_structural() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def visit(node: dict[str, Any], path: str) -> None:
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert "$ref" not in node and "title" not in node, path
        if "anyOf" in node:  # only the int-or-string form is structural
            assert node.get("x-kubernetes-int-or-string") and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        assert node.get("additionalProperties") is not False, path
        if "default" in node:
            assert node["default"] is not None, path

    _walk(schema, "", visit)


def test_crd_shape() -> None:
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == "disaggregatedservices.pdserve.io"
    assert crd["spec"]["names"]["shortNames"] == ["dsvc"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Prefill"] == ".status.prefill.summary"
    assert columns["Decode"] == ".status.decode.summary"
    assert columns["Router"] == ".status.router.ready"
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"] == ".metadata.creationTimestamp"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["kvConnector"]["properties"]["type"]["enum"] == ["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector"]
    assert spec["properties"]["router"]["default"] == {"replicas": 1, "policy": "kv_aware", "disaggThresholdTokens": 0,
                                                       "decodeReuseThresholdTokens": 0, "maxPrefillQueueTokens": 0,
                                                       "weights": {}, "resources": {"limits": {}, "requests": {}}}
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("gpuBudget" in r for r in rules)
    bounds = spec["properties"]["autoscaling"]["properties"]["prefill"]
    assert bounds["x-kubernetes-validations"][0]["rule"] == "self.min <= self.max"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["planner"]["x-kubernetes-preserve-unknown-fields"] is True
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_crd_validates_as_kubernetes_object() -> None:
    kubernetes_validate.validate(build_crd(), "1.33", strict=True)
