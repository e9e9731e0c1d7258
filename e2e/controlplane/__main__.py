"""`python -m controlplane up` (from e2e/, or with e2e/ on PYTHONPATH): run a local
control plane with fake GPU nodes until Ctrl-C, for poking at it with kubectl."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from .cluster import LocalCluster, missing_binaries
from .fixtures import BIN_ENV, k8s_bin_dir
from .processes import ComponentError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m controlplane", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler and kwok")
    up.add_argument("--bin-dir", type=Path, default=None, help=f"binaries (default ${BIN_ENV} or .cache/k8s/bin)")
    up.add_argument("--workdir", type=Path, default=None, help="PKI, kubeconfigs and logs (default: a temp dir)")
    up.add_argument("--nodes", type=int, default=2, help="fake GPU nodes to create (default 2)")
    up.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.nodes < 0 or args.gpus < 0:
        print("error: --nodes and --gpus must be >= 0", file=sys.stderr)
        return 2
    bin_dir = args.bin_dir or k8s_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        print(f"error: missing in {bin_dir}: {', '.join(missing)}; run `make k8s-bins`", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    cluster = LocalCluster(bin_dir, args.workdir)
    try:
        with cluster:
            nodes = cluster.add_gpu_nodes(args.nodes, gpus=args.gpus) if args.nodes else []
            print(f"control plane up in {cluster.startup_seconds.get('ready', 0):.1f}s at {cluster.server}; "
                  f"nodes: {', '.join(nodes) or 'none'}; logs in {cluster.log_dir}", file=sys.stderr)
            print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
            print("Ctrl-C to stop.", file=sys.stderr, flush=True)
            while not stop.wait(1.0):
                for comp in cluster.components:
                    comp.check_alive()
    except ComponentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("stopped.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
