"""The e2e Prometheus's discovery and scrape configs (pure parts; no cluster needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import e2e_env


def _pod() -> dict:
    return {
        "metadata": {"name": "svc-prefill-1", "namespace": "ml", "labels": {"pdserve.io/service": "svc", "pdserve.io/role": "prefill"}},
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}, {"name": "kv-events", "containerPort": 5557}]}]},
        "status": {"phase": "Running", "podIP": "127.64.1.3"},
    }


def test_discovery_labels_match_kubernetes_sd() -> None:
    groups = e2e_env.kubernetes_sd_targets([_pod(), {"metadata": {"name": "p", "namespace": "ml"}, "status": {}}])
    assert [g["targets"] for g in groups] == [["127.64.1.3:8000"], ["127.64.1.3:5557"]]
    labels = groups[0]["labels"]
    assert labels["__meta_kubernetes_pod_label_pdserve_io_service"] == "svc"
    assert labels["__meta_kubernetes_pod_labelpresent_pdserve_io_role"] == "true"
    assert labels["__meta_kubernetes_pod_container_port_name"] == "http"
    assert labels["__meta_kubernetes_pod_phase"] == "Running"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
def test_scrape_configs_from_the_chart_podmonitors_are_valid(tmp_path: Path) -> None:
    sd = tmp_path / "sd.json"
    e2e_env.write_sd_file(sd, [_pod()])
    configs = e2e_env.podmonitor_scrape_configs(sd, "pdserve-system")
    assert {c["job_name"] for c in configs} == {f"pdserve-{r}-0" for r in ("prefill", "decode", "router", "planner")}
    prefill = next(c for c in configs if c["job_name"] == "pdserve-prefill-0")
    assert {"source_labels": ["__meta_kubernetes_pod_label_pdserve_io_service"], "target_label": "pdserve_service"} in prefill["relabel_configs"]
    assert prefill["metric_relabel_configs"] == [{"source_labels": ["__name__"], "regex": "vllm_(.+)", "target_label": "__name__",
                                                  "replacement": "vllm:$1"}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": configs}))
    result = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
