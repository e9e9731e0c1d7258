"""Pods that start: the supported-version table drives flags, env, ports and images; HF token,
env from Secrets, pull secrets, the model cache volume, the non-root identity and RDMA."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest

from pdserve.api import DisaggregatedService
from pdserve.api.crd import build_crd
from pdserve.api.vllm_versions import DEFAULT_VERSION, VERSIONS, VersionName
from pdserve.operator.names import RenderOptions
from pdserve.operator.render import render


def _svc(**spec: Any) -> DisaggregatedService:
    body: dict[str, Any] = {
        "apiVersion": "pdserve.io/v1alpha1",
        "kind": "DisaggregatedService",
        "metadata": {"name": "m", "namespace": "llm", "uid": "u-1"},
        "spec": {"model": {"name": "org/model"}, **spec},
    }
    return DisaggregatedService.from_body(body)


def _deployment(out: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return next(m for m in out if m["kind"] == "Deployment" and m["metadata"]["name"] == f"m-{role}")


def _pod(out: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return _deployment(out, role)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _container(out: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return _pod(out, role)["containers"][0]  # type: ignore[no-any-return]


def _env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c["env"]}


def _flag(c: dict[str, Any], flag: str) -> str:
    return c["args"][c["args"].index(flag) + 1]  # type: ignore[no-any-return]


def test_version_table_is_the_crd_enum_and_default() -> None:
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    version_field = spec["properties"]["engine"]["properties"]["vllmVersion"]
    assert version_field["enum"] == list(VERSIONS) == list(typing.get_args(VersionName))
    assert version_field["default"] == DEFAULT_VERSION == "0.33.0"
    for name, info in VERSIONS.items():
        assert info.image == f"vllm/vllm-openai:v{name}"
        assert set(info.connectors) <= set(info.registered_connectors)
    assert "MooncakeConnector" not in VERSIONS["0.11.0"].registered_connectors


@pytest.mark.parametrize("version", list(VERSIONS))
def test_image_comes_from_the_version_unless_overridden(version: str) -> None:
    out = render(_svc(engine={"vllmVersion": version}))
    assert _container(out, "prefill")["image"] == f"vllm/vllm-openai:v{version}"
    override = render(_svc(engine={"vllmVersion": version}), RenderOptions(vllm_image="mirror.local/vllm:x"))
    assert _container(override, "decode")["image"] == "mirror.local/vllm:x"
    own = render(_svc(engine={"vllmVersion": version, "image": "mine/vllm:1"}), RenderOptions(vllm_image="mirror.local/vllm:x"))
    assert _container(own, "decode")["image"] == "mine/vllm:1"


def test_nixl_side_channel_ports_per_tp_rank_in_0_11_only() -> None:
    tp = {"prefill": {"tensorParallelSize": 2}, "decode": {"tensorParallelSize": 4}}
    old = _container(render(_svc(engine={"vllmVersion": "0.11.0"}, **tp)), "prefill")
    assert [(p["name"], p["containerPort"]) for p in old["ports"] if p["name"].startswith("side-channel")] == [
        ("side-channel", 5600),
        ("side-channel-1", 5601),
        ("side-channel-2", 5602),
        ("side-channel-3", 5603),
    ]
    new = _container(render(_svc(engine={"vllmVersion": "0.33.0"}, **tp)), "prefill")
    assert [(p["name"], p["containerPort"]) for p in new["ports"] if p["name"].startswith("side-channel")] == [("side-channel", 5600)]


def test_one_block_size_and_tokenizer_for_both_pools_and_the_router() -> None:
    out = render(_svc(model={"name": "org/model", "tokenizer": "/cache/huggingface/tok", "tokenizerMode": "mistral"}, engine={"blockSize": 32}))
    for role in ("prefill", "decode"):
        c = _container(out, role)
        assert _flag(c, "--block-size") == "32"
        assert (_flag(c, "--tokenizer"), _flag(c, "--tokenizer-mode")) == ("/cache/huggingface/tok", "mistral")
    router = _container(out, "router")
    assert _flag(router, "--block-size") == "32"
    assert (_flag(router, "--tokenizer"), _flag(router, "--tokenizer-mode")) == ("/cache/huggingface/tok", "mistral")


def test_hf_token_from_secret_reaches_workers_and_router() -> None:
    out = render(_svc(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "tokenSecret": {"name": "hf-token"}}))
    want = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    for role in ("prefill", "decode", "router"):
        assert _env(_container(out, role))["HF_TOKEN"] == want, role


def test_env_value_from_env_from_and_pull_secrets() -> None:
    out = render(
        _svc(
            engine={
                "env": [
                    {"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t", "optional": True}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "HF_HOME", "value": "/elsewhere"},
                ],
                "envFrom": [{"secretRef": {"name": "s3-creds"}}, {"configMapRef": {"name": "tuning"}, "prefix": "VLLM_"}],
            },
            imagePullSecrets=[{"name": "regcred"}],
        )
    )
    c = _container(out, "decode")
    assert c["env"][-3:] == [
        {"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t", "optional": True}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # After the rendered HF_HOME: in a container's env the later entry wins.
        {"name": "HF_HOME", "value": "/elsewhere"},
    ]
    assert c["envFrom"] == [{"secretRef": {"name": "s3-creds"}}, {"configMapRef": {"name": "tuning"}, "prefix": "VLLM_"}]
    for role in ("prefill", "decode", "router"):
        assert _pod(out, role)["imagePullSecrets"] == [{"name": "regcred"}], role


def test_model_cache_read_only_pvc() -> None:
    out = render(_svc(modelCache={"persistentVolumeClaim": "hf-cache", "readOnly": True, "scratch": "20Gi"}))
    for role in ("prefill", "decode", "router"):
        pod, c = _pod(out, role), _container(out, role)
        assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}} in pod["volumes"], role
        assert {"name": "model-cache", "mountPath": "/cache/huggingface", "readOnly": True} in c["volumeMounts"], role
        assert _env(c)["HF_HUB_OFFLINE"]["value"] == "1"
        assert _env(c)["HF_HOME"]["value"] == "/cache/huggingface"
    assert _container(out, "prefill")["resources"]["requests"]["ephemeral-storage"] == "20Gi"


def test_model_cache_host_path_and_default_empty_dir() -> None:
    out = render(_svc(modelCache={"hostPath": "/var/lib/hf"}))
    assert {"name": "model-cache", "hostPath": {"path": "/var/lib/hf", "type": "DirectoryOrCreate"}} in _pod(out, "decode")["volumes"]
    assert "HF_HUB_OFFLINE" not in _env(_container(out, "decode"))
    # A read-write PVC (likely ReadWriteOnce) stays out of the router, which may run on another node.
    rwo = render(_svc(modelCache={"persistentVolumeClaim": "hf-rwo"}))
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "2Gi"}} in _pod(rwo, "router")["volumes"]
    default = render(_svc(modelCache={"size": "40Gi"}))
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "40Gi"}} in _pod(default, "prefill")["volumes"]
    assert _container(default, "prefill")["resources"]["requests"]["ephemeral-storage"] == "40Gi"
    mock = render(_svc(engine={"kind": "mock"}))
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "2Gi"}} in _pod(mock, "prefill")["volumes"]
    assert "ephemeral-storage" not in _container(mock, "prefill")["resources"]["requests"]
    user = render(_svc(prefill={"resources": {"requests": {"ephemeral-storage": "300Gi"}}}))
    assert _container(user, "prefill")["resources"]["requests"]["ephemeral-storage"] == "300Gi"


def test_non_root_identity_the_image_lacks() -> None:
    out = render(_svc())
    pod, c = _pod(out, "prefill"), _container(out, "prefill")
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    env = _env(c)
    assert (env["USER"]["value"], env["LOGNAME"]["value"], env["HOME"]["value"]) == ("vllm", "vllm", "/home/vllm")
    assert c["workingDir"] == "/home/vllm"
    assert {"name": "home", "emptyDir": {}} in pod["volumes"] and {"name": "home", "mountPath": "/home/vllm"} in c["volumeMounts"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_pdserve_image_pods_run_as_the_images_user() -> None:
    """Mock workers and routers run the pdserve image, whose Dockerfile creates uid 10001."""
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    assert "--uid 10001" in dockerfile and "USER 10001:10001" in dockerfile
    out = render(_svc(engine={"kind": "mock"}))
    for role in ("prefill", "router"):
        assert _pod(out, role)["securityContext"]["runAsUser"] == 10001, role


def _uid_without_passwd_entry() -> int:
    for uid in range(54321, 54421):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no free uid")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to switch to a uid without a passwd entry")
def test_getuser_works_for_a_uid_without_passwd_entry() -> None:
    """What torch does at startup (inductor's cache dir: getpass.getuser()), run as a uid that,
    like 1000 in vllm/vllm-openai, has no passwd entry, with exactly the env the pod gets."""
    c = _container(render(_svc()), "decode")
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    # The home emptyDir: world-writable, like an emptyDir volume (pytest's tmp_path sits under a 0700 dir).
    tmp_path = Path(tempfile.mkdtemp(prefix="pdserve-home-", dir="/tmp"))
    tmp_path.chmod(0o777)
    env["HOME"] = str(tmp_path)
    uid = _uid_without_passwd_entry()
    code = "import getpass, os, pathlib; pathlib.Path(os.environ['HOME'], 'probe').write_text('x'); print(getpass.getuser())"
    run = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    shutil.rmtree(tmp_path, ignore_errors=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "vllm"


def test_root_and_rdma() -> None:
    out = render(_svc(engine={"runAsRoot": True}, rdma={"enabled": True, "resources": {"rdma/ib": 1}, "ucxTls": "rc,cuda_copy", "ucxNetDevices": "mlx5_0:1"}))
    pod, c = _pod(out, "decode"), _container(out, "decode")
    assert pod["securityContext"]["runAsUser"] == 0 and pod["securityContext"]["runAsNonRoot"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert c["resources"]["requests"]["rdma/ib"] == c["resources"]["limits"]["rdma/ib"] == "1"
    env = _env(c)
    assert (env["UCX_TLS"]["value"], env["UCX_NET_DEVICES"]["value"]) == ("rc,cuda_copy", "mlx5_0:1")
    plain = _container(render(_svc()), "decode")
    assert "UCX_TLS" not in _env(plain) and "rdma/ib" not in plain["resources"]["requests"]


def test_kv_transfer_config_is_json_with_the_version_role() -> None:
    out = render(_svc(engine={"vllmVersion": "0.33.0"}, kvConnector={"type": "MooncakeConnector"}))
    assert json.loads(_flag(_container(out, "prefill"), "--kv-transfer-config"))["kv_role"] == "kv_producer"
    assert json.loads(_flag(_container(out, "decode"), "--kv-transfer-config"))["kv_role"] == "kv_consumer"


_MODES = [(v, m, "vllm") for v, info in VERSIONS.items() for m in info.tokenizer_modes] + [(v, m, "mock") for v, info in VERSIONS.items() for m in (*info.tokenizer_modes, "mock")]


@pytest.mark.parametrize(("version", "mode", "kind"), _MODES)
def test_router_and_mock_worker_clis_take_the_same_tokenizer_and_block_size(version: str, mode: str, kind: str) -> None:
    """Every tokenizer mode the CRD admits for a version is one the router (and the mock worker, as
    that version) accepts, and both get the same values."""
    from pdserve.router.shell.cli import build_parser as router_parser
    from pdserve.worker.cli import build_parser as worker_parser

    out = render(_svc(model={"name": "org/model", "tokenizer": "org/tok", "tokenizerMode": mode}, engine={"kind": kind, "vllmVersion": version, "blockSize": 64}))
    args = router_parser().parse_args(_container(out, "router")["args"])
    worker = _container(out, "decode")
    assert (args.tokenizer, args.tokenizer_mode, str(args.block_size)) == (_flag(worker, "--tokenizer"), _flag(worker, "--tokenizer-mode"), _flag(worker, "--block-size"))
    assert args.vllm_version == version  # chat preprocessing as the workers' release does it
    if kind == "mock":
        w = worker_parser().parse_args(worker["args"])
        assert (w.tokenizer, w.tokenizer_mode, w.block_size, w.mock_vllm_version) == ("org/tok", mode, 64, version)
