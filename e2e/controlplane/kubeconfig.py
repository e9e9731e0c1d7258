"""Kubeconfig files for client-certificate identities."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .pki import CertPair

CLUSTER_NAME = "pdserve-local"


def safe_stem(user: str) -> str:
    """A file-name-safe form of a Kubernetes user name (which may contain ':')."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", user).strip("-")
    if not stem:
        raise ValueError(f"cannot derive a file name from user {user!r}")
    return stem


def write_kubeconfig(path: Path, server: str, ca_cert: Path, client: CertPair, user: str) -> Path:
    """Write a kubeconfig that authenticates as `user` with the given client cert.

    Paths are absolute so the file works from any working directory.
    """
    credentials = {"client-certificate": str(client.cert.resolve()), "client-key": str(client.key.resolve())}
    return _write(path, server, ca_cert, user, credentials)


def write_token_kubeconfig(path: Path, server: str, ca_cert: Path, token: str, user: str) -> Path:
    """Write a kubeconfig that authenticates with a bearer token (e.g. a ServiceAccount's)."""
    if not token:
        raise ValueError("a token kubeconfig needs a non-empty token")
    return _write(path, server, ca_cert, user, {"token": token})


def _write(path: Path, server: str, ca_cert: Path, user: str, credentials: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority": str(ca_cert.resolve())}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
