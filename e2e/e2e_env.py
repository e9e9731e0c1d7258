"""The pieces the e2e tests assemble: chart install, pod listing, Prometheus targets."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from podrunner import PodRunner

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "pdserve"
EXAMPLE = ROOT / "examples" / "mock-disagg.yaml"
RELEASE = "pdserve"
SYSTEM_NS = "pdserve-system"
HTTP_PORT = 8000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def example_service(namespace: str, prometheus_url: str) -> dict[str, Any]:
    """examples/mock-disagg.yaml with the knobs an e2e run must turn.

    The SLOs and the simulated GPU are chosen so that a load one Python client can
    generate needs several replicas per pool (an H100 would absorb it in one), and the
    intervals are shortened so scaling happens within minutes.
    """
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["namespace"] = namespace
    spec = body["spec"]
    spec["engine"]["mockProfile"] = "opt-13b-a100"
    spec["engine"]["mockSpeedup"] = 1
    spec["slo"].update({"ttftMs": 400, "itlMs": 25})
    spec["autoscaling"].update(
        {"intervalSeconds": 5, "prometheusUrl": prometheus_url, "scaleDownStabilizationSeconds": 10}
    )
    return body


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, interval_s: float = 0.5, describe: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r}) {describe()}")


def pod_lister(core: client.CoreV1Api, namespaces: list[str]) -> Callable[[], list[dict[str, Any]]]:
    def list_pods() -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        for ns in namespaces:
            raw = core.list_namespaced_pod(ns, _preload_content=False)
            pods.extend(json.loads(raw.data)["items"])
        return pods

    return list_pods


def write_targets(runner: PodRunner, path: Path, planner_port: int | None) -> None:
    """Prometheus file_sd targets with the labels the chart's PodMonitors produce."""
    groups: list[dict[str, Any]] = []
    seen: set[str] = set()
    for run in runner.processes():
        role = run.env.get("PDSERVE_ROLE")
        if run.subcommand == "router":
            role = "router"
        if run.subcommand not in ("worker", "router") or run.pod in seen:
            continue
        seen.add(run.pod)
        labels = run.labels
        groups.append(
            {
                "targets": [f"{run.pod_ip}:{HTTP_PORT}"],
                "labels": {
                    "namespace": run.namespace,
                    "pod": run.pod,
                    "pdserve_service": labels.get("pdserve.io/service", ""),
                    "pdserve_role": labels.get("pdserve.io/role", role or ""),
                },
            }
        )
    if planner_port:
        groups.append({"targets": [f"127.0.0.1:{planner_port}"], "labels": {"job": "pdserve-planner", "namespace": SYSTEM_NS}})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def scrape_configs(targets_file: Path) -> list[dict[str, Any]]:
    return [
        {
            "job_name": "pdserve",
            "scrape_interval": "1s",
            "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
        }
    ]
