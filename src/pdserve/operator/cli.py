"""`pdserve operator`: reconcile DisaggregatedServices and host their planners (kopf), leader-elected."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import TYPE_CHECKING

from pdserve.kube.constants import LEASE_NAME
from pdserve.operator.names import (
    DEFAULT_PDSERVE_IMAGE,
    DEFAULT_VLLM_IMAGE,
    RenderOptions,
)

if TYPE_CHECKING:
    from pdserve.kube.lease import LeaseConfig


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdserve operator", description="Reconcile DisaggregatedServices into prefill, decode and router Deployments, and run the planner of each autoscaled one.")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (needs the cluster-wide ClusterRole)")
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch only this namespace (repeatable); default: all namespaces")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
    p.add_argument("--liveness", metavar="URL", help="serve a health check, e.g. http://0.0.0.0:8080/healthz (kopf's when leading)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--resync-seconds", type=float, default=60.0, help="full re-apply and status refresh per resource (default 60)")
    p.add_argument("--pdserve-image", default=DEFAULT_PDSERVE_IMAGE, help="image for the router and mock workers")
    p.add_argument("--vllm-image", default=None, help=f"image for every real vLLM worker whose resource sets no engine.image (default: the image of its engine.vllmVersion, e.g. {DEFAULT_VLLM_IMAGE})")
    p.add_argument("--cluster-domain", default="cluster.local", help="DNS suffix for the endpoint URL")
    pl = p.add_argument_group("planner (one kopf daemon per resource with spec.autoscaling.enabled)")
    pl.add_argument("--no-planner", action="store_true", help="never plan: replicas stay as written in each resource")
    pl.add_argument("--prometheus-url", help="Prometheus for resources whose spec.autoscaling.prometheusUrl is empty")
    pl.add_argument("--planner-interval", type=float, help="seconds between decisions, unless a resource sets spec.autoscaling.intervalSeconds")
    pl.add_argument("--planner-dry-run", action="store_true", help="decide and write status.planner, never the replicas")
    pl.add_argument("--metrics-port", type=int, default=0, help="serve the planner's pdserve_planner_* metrics on this port (0: off)")
    pl.add_argument("--planner-no-warm-start", action="store_true",
                    help="start each planner cold: without replaying its history from Prometheus first")
    le = p.add_argument_group("leader election (a Lease: only its holder runs kopf, so replicas: 2 is safe)")
    le.add_argument("--no-leader-elect", action="store_true", help="run kopf at once without a Lease (one replica only)")
    le.add_argument("--lease-name", default=LEASE_NAME)
    le.add_argument("--lease-namespace", default=None, help="default: $POD_NAMESPACE, else 'default'")
    le.add_argument("--lease-identity", default=None, help="default: $POD_NAME, else host-pid-random")
    le.add_argument("--lease-duration", type=float, default=15.0, help="a follower takes over this long after the leader's last renewal")
    le.add_argument("--lease-renew-deadline", type=float, default=10.0, help="the leader stops after failing to renew this long")
    le.add_argument("--lease-retry", type=float, default=2.0, help="seconds between tries to acquire or renew")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.resync_seconds <= 0:
        raise SystemExit("pdserve operator: --resync-seconds must be > 0")
    if args.planner_interval is not None and args.planner_interval <= 0:
        raise SystemExit("pdserve operator: --planner-interval must be > 0")
    level = getattr(logging, args.log_level.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kopf logs every handled child event at INFO; keep that for --log-level debug.
    for noisy in ("kubernetes", "urllib3", "aiohttp.access", "kopf.objects"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING) if level > logging.DEBUG else level)
    if args.kubeconfig:
        # kopf's login reads the same file through the kubernetes client.
        os.environ["KUBECONFIG"] = args.kubeconfig

    from pdserve.kube.lease import LeaseConfig, default_identity

    lease = None
    if not args.no_leader_elect:
        lease = LeaseConfig(
            name=args.lease_name,
            namespace=args.lease_namespace or os.environ.get("POD_NAMESPACE") or "default",
            identity=args.lease_identity or default_identity(),
            duration_s=args.lease_duration,
            renew_deadline_s=args.lease_renew_deadline,
            retry_s=args.lease_retry,
        )
        if (bad := lease.invalid()) is not None:
            raise SystemExit(f"pdserve operator: {bad}")
    try:
        return asyncio.run(_serve(args, level, lease))
    except KeyboardInterrupt:
        return 0


async def _serve(args: argparse.Namespace, level: int, lease: LeaseConfig | None) -> int:
    import kopf

    from pdserve.kube.api import Kube
    from pdserve.kube.client import load_api_client
    from pdserve.kube.lease import LeaderElector
    from pdserve.operator.handlers import HandlerConfig, build_registry, settings
    from pdserve.operator.leading import lead_then_run
    from pdserve.operator.reconcile import Reconciler
    from pdserve.planner.hosting.options import HostOptions

    api = load_api_client(args.kubeconfig)
    kube = Kube(api)
    options = RenderOptions(pdserve_image=args.pdserve_image, vllm_image=args.vllm_image, cluster_domain=args.cluster_domain)
    planner = None if args.no_planner else HostOptions(prometheus_url=args.prometheus_url, interval_s=args.planner_interval,
                                                      dry_run=args.planner_dry_run, warm_start=not args.planner_no_warm_start)
    if planner is not None and args.metrics_port:
        from prometheus_client import start_http_server

        from pdserve.planner.hosting.daemon import METRICS

        start_http_server(args.metrics_port, registry=METRICS.registry)
    registry = build_registry(Reconciler(kube, options), HandlerConfig(args.resync_seconds, planner), api_client=api)
    clusterwide = not args.namespace
    elector = LeaderElector(kube, lease) if lease is not None else None

    async def run_kopf(stop: asyncio.Event) -> None:
        await kopf.operator(
            registry=registry,
            settings=settings(level, namespaced=not clusterwide),
            # The Lease, not kopf's peering, decides who runs: this process runs kopf only while it holds it.
            standalone=True,
            clusterwide=clusterwide,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
            stop_flag=stop,
        )

    try:
        return await lead_then_run(elector, run_kopf, args.liveness)
    finally:
        kube.close()
