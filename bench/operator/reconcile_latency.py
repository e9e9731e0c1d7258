#!/usr/bin/env python3
"""Reconcile latency and memory of `pdserve operator` on the local control plane.

Starts etcd + kube-apiserver + controller-manager + scheduler + kwok (built by
`make k8s-bins`), runs the operator as a subprocess under its least-privilege
identity, creates N DisaggregatedServices, and measures:

  * spec change -> Deployment updated latency (a decode replica change seen on the
    Deployment by a watch), one change at a time ("sequential") and all N at once
    ("burst"), p50 / p90 / p99;
  * the operator process's resident memory (RSS, peak) and CPU time.

    .venv/bin/python bench/operator/reconcile_latency.py --resources 50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "e2e"), str(ROOT / "tests" / "operator")]

from kubernetes import client, watch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402

from controlplane.cluster import LocalCluster  # noqa: E402
from controlplane.fixtures import k8s_bin_dir  # noqa: E402
from operator_harness import GROUP, OPERATOR_USER, PLURAL, VERSION, OperatorProcess, api_client, bind_operator_role, eventually, install_crd, load_example  # noqa: E402

NAMESPACE = "bench"
console = Console(stderr=True)


def proc_stats(pid: int) -> dict[str, float]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100.0  # os.sysconf("SC_CLK_TCK") is 100 on Linux
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
        "cpu_s": (int(fields[11]) + int(fields[12])) / ticks,
    }


class DeploymentWatcher:
    """Records every (time, spec.replicas) a watch reports for each Deployment."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.seen: dict[str, list[tuple[float, int]]] = {}
        self.cond = threading.Condition()
        self._stop = False
        self._w = watch.Watch()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        apps = client.AppsV1Api(self.api)
        while not self._stop:
            try:
                for ev in self._w.stream(apps.list_namespaced_deployment, NAMESPACE, timeout_seconds=30):
                    dep = ev["object"]
                    with self.cond:
                        self.seen.setdefault(dep.metadata.name, []).append((time.monotonic(), dep.spec.replicas))
                        self.cond.notify_all()
                    if self._stop:
                        return
            except Exception:  # the cluster is going away, or the watch broke: re-watch unless stopping
                if self._stop:
                    return
                time.sleep(0.2)

    def wait(self, name: str, replicas: int, after: float, timeout_s: float = 120) -> float:
        """When the Deployment was first seen with ``replicas`` at or after ``after``."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                hits = [t for t, r in self.seen.get(name, []) if r == replicas and t >= after]
                if hits:
                    return hits[0]
                if not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"{name} never reached replicas={replicas}")

    def stop(self) -> None:
        self._stop = True
        self._w.stop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(latencies: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in latencies]
    return {"n": len(ms), "p50_ms": pct(ms, 50), "p90_ms": pct(ms, 90), "p99_ms": pct(ms, 99), "mean_ms": statistics.fmean(ms), "max_ms": max(ms)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh cluster folder, removed afterwards (kept, and named, when the run fails: it holds
    the control plane's and the operator's logs)."""
    workdir = Path(tempfile.mkdtemp(prefix="pdserve-bench-op-"))
    try:
        result = measure(args, workdir)
    except BaseException:
        print(f"reconcile_latency: the cluster's and the operator's logs are kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with LocalCluster(k8s_bin_dir(), workdir) as cluster:
        # Every resource needs 2 GPUs (1 prefill + 1 decode, TP 1), 3 after the change.
        cluster.add_gpu_nodes(2, gpus=max(8, 2 * args.resources))
        admin = api_client(cluster.kubeconfig)
        install_crd(admin)
        bind_operator_role(admin)
        client.CoreV1Api(admin).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        op = OperatorProcess(Path(cluster.kubeconfig_for(OPERATOR_USER)), workdir / "operator.log", resync_seconds=args.resync_seconds)
        op.start()
        idle = proc_stats(op.pid)
        custom = client.CustomObjectsApi(admin)
        names = [f"svc-{i:03d}" for i in range(args.resources)]
        watcher = DeploymentWatcher(admin)
        watcher.thread.start()
        t_create = time.monotonic()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("creating resources", total=len(names))
            for name in names:
                body = load_example(ROOT / "examples/mock-disagg.yaml", NAMESPACE, name)
                body["spec"]["autoscaling"] = {"enabled": False}
                custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
                progress.advance(task)
            task = progress.add_task("waiting for Ready", total=len(names))
            for name in names:
                eventually(f"{name} Ready", lambda n=name: any(c["type"] == "Ready" and c["status"] == "True" for c in (custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, n).get("status") or {}).get("conditions", [])), 300, 0.5)
                progress.advance(task)
        all_ready_s = time.monotonic() - t_create
        loaded = proc_stats(op.pid)

        sequential: list[float] = []
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("sequential spec changes", total=len(names))
            for name in names:
                t0 = time.monotonic()
                custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"decode": {"replicas": 2}}})
                sequential.append(watcher.wait(f"{name}-decode", 2, t0) - t0)
                progress.advance(task)
        time.sleep(2)
        burst: list[float] = []
        starts = {}
        for name in names:
            starts[name] = time.monotonic()
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"decode": {"replicas": 1}}})
        for name in names:
            burst.append(watcher.wait(f"{name}-decode", 1, starts[name]) - starts[name])
        settle = time.monotonic()
        quiet_start = proc_stats(op.pid)
        quiet_s = max(10.0, args.resync_seconds * 2)
        time.sleep(quiet_s)
        final = proc_stats(op.pid)
        watcher.stop()
        op.stop()
    return {
        "resources": args.resources,
        "resync_seconds": args.resync_seconds,
        "machine": f"{platform.machine()}, {platform.python_version()}, shared 2-core VM",
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "all_ready_s": round(all_ready_s, 2),
        "sequential": summary(sequential),
        "burst": summary(burst),
        "operator": {
            "rss_idle_mib": round(idle["rss_mib"], 1),
            "rss_with_resources_mib": round(loaded["rss_mib"], 1),
            "rss_final_mib": round(final["rss_mib"], 1),
            "peak_rss_mib": round(final["peak_rss_mib"], 1),
            "cpu_s_total": round(final["cpu_s"], 2),
            "cpu_s_until_all_ready": round(loaded["cpu_s"], 2),
            "idle_cpu_percent": round(100 * (final["cpu_s"] - quiet_start["cpu_s"]) / quiet_s, 2),
            "idle_window_s": quiet_s,
        },
        "_raw": {"sequential_s": sequential, "burst_s": burst, "settle_monotonic": settle},
    }


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    raw = result.pop("_raw")
    (out / "results.json").write_text(json.dumps({**result, "latencies_s": {"sequential": raw["sequential_s"], "burst": raw["burst_s"]}}, indent=2) + "\n")
    s, b, o = result["sequential"], result["burst"], result["operator"]
    md = [
        f"# Operator reconcile latency ({result['resources']} DisaggregatedServices)",
        "",
        "Spec change (`spec.decode.replicas`) to the decode Deployment updated, seen by a watch.",
        f"Local control plane built from source, kwok GPU nodes; {result['machine']}",
        f"(1-minute load average {result['load_average_1m']['before']} before, {result['load_average_1m']['after']} after: other work shared the 2 cores).",
        "",
        "| mode | n | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
        f"| sequential (one change at a time) | {s['n']} | {s['p50_ms']:.0f} | {s['p90_ms']:.0f} | {s['p99_ms']:.0f} | {s['max_ms']:.0f} |",
        f"| burst (all {b['n']} at once) | {b['n']} | {b['p50_ms']:.0f} | {b['p90_ms']:.0f} | {b['p99_ms']:.0f} | {b['max_ms']:.0f} |",
        "",
        f"All {result['resources']} resources Ready {result['all_ready_s']} s after the first create.",
        "",
        "| operator process | value |",
        "|---|---|",
        f"| RSS idle (no resources) | {o['rss_idle_mib']} MiB |",
        f"| RSS with {result['resources']} resources | {o['rss_with_resources_mib']} MiB |",
        f"| peak RSS | {o['peak_rss_mib']} MiB |",
        f"| CPU time until all Ready | {o['cpu_s_until_all_ready']} s |",
        f"| CPU time, whole run | {o['cpu_s_total']} s |",
        f"| CPU while idle ({o['idle_window_s']:.0f} s window, resyncs included) | {o['idle_cpu_percent']} % of a core |",
        "",
        "Reproduce: `make k8s-bins && .venv/bin/python bench/operator/reconcile_latency.py --resources 50`",
        "",
    ]
    (out / "results.md").write_text("\n".join(md))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in (("sequential", raw["sequential_s"]), ("burst", raw["burst_s"])):
        xs = sorted(v * 1000 for v in values)
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=f"{label} (p99 {pct(xs, 99):.0f} ms)")
    ax.set_xlabel("spec change -> Deployment updated (ms)")
    ax.set_ylabel("fraction of changes")
    ax.set_title(f"pdserve operator, {result['resources']} resources")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency_cdf.png", dpi=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resources", type=int, default=50, help="DisaggregatedServices to create (default 50)")
    p.add_argument("--resync-seconds", type=float, default=60.0, help="operator's resync period (default 60, as deployed)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results", help="where to write results.json/.md and latency_cdf.png")
    args = p.parse_args()
    if args.resources < 1:
        p.error("--resources must be >= 1")
    result = run(args)
    write(result, args.out)
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
