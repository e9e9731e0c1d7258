"""`pdserve operator`: run the kopf operator that reconciles DisaggregatedServices."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from pdserve.operator.names import DEFAULT_PDSERVE_IMAGE, DEFAULT_VLLM_IMAGE, RenderOptions


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdserve operator", description="Reconcile DisaggregatedServices into prefill, decode and router Deployments.")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (needs the cluster-wide ClusterRole)")
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch only this namespace (repeatable); default: all namespaces")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
    p.add_argument("--liveness", metavar="URL", help="serve kopf's health check, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--resync-seconds", type=float, default=60.0, help="full re-apply and status refresh per resource (default 60)")
    p.add_argument("--pdserve-image", default=DEFAULT_PDSERVE_IMAGE, help="image for the router and mock workers")
    p.add_argument("--vllm-image", default=None, help=f"image for every real vLLM worker whose resource sets no engine.image (default: the image of its engine.vllmVersion, e.g. {DEFAULT_VLLM_IMAGE})")
    p.add_argument("--cluster-domain", default="cluster.local", help="DNS suffix for the endpoint URL")
    p.add_argument("--hosted-planner", action="store_true", help="run the planner inside the operator (a kopf daemon per autoscaled resource) instead of as its own process")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.resync_seconds <= 0:
        raise SystemExit("pdserve operator: --resync-seconds must be > 0")
    level = getattr(logging, args.log_level.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kopf logs every handled child event at INFO; keep that for --log-level debug.
    for noisy in ("kubernetes", "urllib3", "aiohttp.access", "kopf.objects"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING) if level > logging.DEBUG else level)
    if args.kubeconfig:
        # kopf's login reads the same file through the kubernetes client.
        os.environ["KUBECONFIG"] = args.kubeconfig

    import kopf

    from pdserve.operator.handlers import HandlerConfig, build_registry, settings
    from pdserve.operator.kube import Kube, load_api_client
    from pdserve.operator.reconcile import Reconciler

    api = load_api_client(args.kubeconfig)
    options = RenderOptions(pdserve_image=args.pdserve_image, vllm_image=args.vllm_image, cluster_domain=args.cluster_domain)
    kube = Kube(api)
    reconciler = Reconciler(kube, options)
    registry = build_registry(reconciler, HandlerConfig(args.resync_seconds, args.hosted_planner), api_client=api)
    clusterwide = not args.namespace
    try:
        asyncio.run(
            kopf.operator(
                registry=registry,
                settings=settings(level, namespaced=not clusterwide),
                standalone=True,  # no peering: reconciliation is idempotent, two replicas do no harm
                clusterwide=clusterwide,
                namespaces=args.namespace,
                liveness_endpoint=args.liveness,
            )
        )
    except KeyboardInterrupt:
        pass
    finally:
        kube.close()
    return 0
