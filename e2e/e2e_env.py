"""The pieces the e2e tests assemble: chart install, pod listing, Prometheus targets."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config


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


def _label(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def kubernetes_sd_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Prometheus's Kubernetes SD (role: pod) would discover, as file_sd groups:
    one target per container port, with the same __meta_kubernetes_* labels.

    Debian's prometheus is built without Kubernetes SD, so the e2e lists pods itself;
    the relabelings of the chart's PodMonitors then apply unchanged."""
    groups: list[dict[str, Any]] = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status", {})
        ip = status.get("podIP")
        if not ip:
            continue
        base = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_phase": status.get("phase", ""),
            "__meta_kubernetes_pod_node_name": pod.get("spec", {}).get("nodeName", ""),
        }
        for key, value in (meta.get("labels") or {}).items():
            base[f"__meta_kubernetes_pod_label_{_label(key)}"] = value
            base[f"__meta_kubernetes_pod_labelpresent_{_label(key)}"] = "true"
        for c in pod.get("spec", {}).get("containers", []):
            for port in c.get("ports", []) or []:
                labels = {
                    **base,
                    "__meta_kubernetes_pod_container_name": c["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def write_sd_file(path: Path, pods: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(kubernetes_sd_targets(pods)))
    tmp.replace(path)


@contextlib.contextmanager
def kubernetes_sd(path: Path, list_pods: Callable[[], list[dict[str, Any]]], interval_s: float = 0.5) -> Iterator[None]:
    """Keeps ``path`` (a file_sd file) listing the pods' targets while the block runs: what
    Prometheus's Kubernetes SD would discover (see ``kubernetes_sd_targets``)."""
    write_sd_file(path, [])
    stop = threading.Event()

    def discover() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # the API server may be briefly unavailable; keep going
                write_sd_file(path, list_pods())
            stop.wait(interval_s)

    thread = threading.Thread(target=discover, name="kubernetes-sd", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def service_account_kubeconfigs(cluster: Any) -> Callable[[str, str], Path]:
    """``(namespace, service account) -> kubeconfig`` for the PodRunner, one token per identity."""
    made: dict[tuple[str, str], Path] = {}

    def kubeconfig_for(ns: str, sa: str) -> Path:
        if (ns, sa) not in made:
            made[(ns, sa)] = cluster.kubeconfig_for_service_account(ns, sa)
        return made[(ns, sa)]

    return kubeconfig_for


def podmonitor_scrape_configs(sd_file: Path, release_namespace: str, planner: bool = True) -> list[dict[str, Any]]:
    """Prometheus scrape configs equivalent to the chart's PodMonitors, as the Prometheus
    Operator would generate them: the e2e Prometheus then scrapes exactly what a
    cluster's Prometheus would, with the same relabelings (so the same labels)."""
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        rendered = chart.render({"monitoring": {"podMonitors": True}, "planner": {"enabled": planner}}, name=RELEASE, namespace=release_namespace)
    configs: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(rendered[f"{CHART.name}/templates/podmonitors.yaml"]):
        if not doc:
            continue
        spec = doc["spec"]
        keep: list[dict[str, Any]] = []
        ns_sel = spec.get("namespaceSelector", {})
        if not ns_sel.get("any"):
            names = ns_sel.get("matchNames") or [doc["metadata"]["namespace"]]
            keep.append({"action": "keep", "source_labels": ["__meta_kubernetes_namespace"], "regex": "|".join(names)})
        for key, value in spec["selector"].get("matchLabels", {}).items():
            keep.append({"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{_label(key)}"], "regex": value})
        for expr in spec["selector"].get("matchExpressions", []):
            assert expr["operator"] == "Exists", expr
            keep.append({"action": "keep", "source_labels": [f"__meta_kubernetes_pod_labelpresent_{_label(expr['key'])}"], "regex": "true"})
        for i, ep in enumerate(spec["podMetricsEndpoints"]):
            relabel = keep + [
                {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ep["port"]},
                {"action": "keep", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running"},
            ]
            relabel += [_relabel_config(r) for r in ep.get("relabelings", [])]
            metric_relabel = [_relabel_config(r) for r in ep.get("metricRelabelings", [])]
            configs.append(
                {
                    "job_name": f"{doc['metadata']['name']}-{i}",
                    "scrape_interval": "1s",
                    "metrics_path": ep.get("path", "/metrics"),
                    "honor_labels": bool(ep.get("honorLabels", False)),
                    "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
                    "relabel_configs": relabel,
                    "metric_relabel_configs": metric_relabel,
                }
            )
    return configs


def _relabel_config(r: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor RelabelConfig (camelCase) as Prometheus' relabel_config (snake_case), as the
    Prometheus Operator writes it."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label", "regex": "regex",
            "replacement": "replacement", "action": "action", "separator": "separator", "modulus": "modulus"}
    if unknown := set(r) - set(keys):
        raise ValueError(f"relabeling field(s) the e2e translation does not know: {sorted(unknown)}")
    return {keys[k]: v for k, v in r.items()}
