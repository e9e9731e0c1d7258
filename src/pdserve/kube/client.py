"""One client setup for every pdserve process that talks to the API server.

Order: an explicit kubeconfig, else $KUBECONFIG / ~/.kube/config, else the in-cluster
ServiceAccount. The operator, the planner it hosts and the router's pod discovery all
build their ``ApiClient`` here, so they authenticate the same way in and out of a pod."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes import config as k8s_config


class NoClusterAccess(RuntimeError):
    """Neither a usable kubeconfig nor an in-cluster ServiceAccount."""


def load_api_client(kubeconfig: str | None = None, *, pool_size: int = 16) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError) as first:
        if kubeconfig:
            raise NoClusterAccess(f"cannot use kubeconfig {kubeconfig}: {first}") from first
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException as second:
            raise NoClusterAccess(f"not in a cluster ({second}) and no usable kubeconfig ({first})") from second
    cfg.connection_pool_maxsize = pool_size
    return k8s.ApiClient(cfg)
