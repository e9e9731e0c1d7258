"""build-binaries.sh decisions that need no compiler: usage, idempotence, stale binaries."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "e2e" / "controlplane" / "build-binaries.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
VERSIONS = {"K8S_VERSION": "v1.99.0", "ETCD_VERSION": "v3.99.0", "KWOK_VERSION": "v0.99.0"}


def _stamp() -> str:
    recipe = re.search(r"^RECIPE=(\d+)$", SCRIPT.read_text(), re.M)
    assert recipe, "RECIPE= line not found in build-binaries.sh"
    return f"k8s=v1.99.0 etcd=v3.99.0 kwok=v0.99.0 recipe={recipe.group(1)}"


def _fake_tools(tmp_path: Path, go_exit: int) -> dict[str, str]:
    """PATH with python3, bash and a `go` that only fails (or reports a version)."""
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(f"#!/bin/sh\n[ \"$1\" = version ] && echo 'go version fake' && exit 0\nexit {go_exit}\n")
    go.chmod(0o755)
    return {**os.environ, **VERSIONS, "PATH": f"{bin_dir}:/usr/bin:/bin"}


def _outdir_with_stubs(tmp_path: Path, stamp: str | None) -> Path:
    out = tmp_path / "bin"
    out.mkdir()
    for name in BINARIES:
        (out / name).write_text("#!/bin/sh\n")
        (out / name).chmod(0o755)
    if stamp is not None:
        (out / "VERSION").write_text(stamp + "\n")
    return out


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_usage_error_without_outdir(tmp_path: Path) -> None:
    proc = _run([], _fake_tools(tmp_path, 1))
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_missing_go_is_named(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": "/nonexistent"}
    proc = subprocess.run(["/bin/bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "Go toolchain" in proc.stderr


def test_matching_stamp_skips_the_build(tmp_path: Path) -> None:
    out = _outdir_with_stubs(tmp_path, _stamp())
    proc = _run([str(out)], _fake_tools(tmp_path, 1))  # any go build would fail
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in proc.stdout
    assert all((out / b).exists() for b in BINARIES)


def test_stale_binaries_are_removed_before_rebuilding(tmp_path: Path) -> None:
    out = _outdir_with_stubs(tmp_path, "k8s=v1.0.0 etcd=v3.0.0 kwok=v0.0.1 recipe=0")
    proc = _run([str(out)], _fake_tools(tmp_path, 1))
    assert proc.returncode == 1
    # The failing step was tried twice, then named.
    assert "retrying etcd" in proc.stdout and "FAILED building etcd" in proc.stdout
    assert not any((out / b).exists() for b in BINARIES)
    assert not (out / "VERSION").exists()
    assert (out / ".partial").read_text().strip() == _stamp()


def _recording_go(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `go` that writes the cache folders it was given (and leaves a file in each), then fails."""
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    log = tmp_path / "go-env.log"
    go = bin_dir / "go"
    go.write_text("#!/bin/sh\n[ \"$1\" = version ] && echo 'go version fake' && exit 0\n"
                  "[ \"$1\" = env ] && exit 0\n"
                  f"echo \"GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE GOFLAGS=$GOFLAGS\" >> {log}\n"
                  "mkdir -p \"$GOCACHE\" \"$GOMODCACHE\" && echo x > \"$GOCACHE/obj\" && echo x > \"$GOMODCACHE/mod\"\n"
                  "exit 1\n")
    go.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS")}
    return {**env, **VERSIONS, "TMPDIR": str(tmp), "PATH": f"{bin_dir}:/usr/bin:/bin"}, log


def test_go_caches_are_temporary_and_removed(tmp_path: Path) -> None:
    # ~4.7 GB of Go caches nothing reads after the build: CI ran out of disk with them kept.
    env, log = _recording_go(tmp_path)
    proc = _run([str(tmp_path / "out")], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    assert calls, "go was never asked to build"
    tmp = tmp_path / "tmp"
    for line in calls:
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        assert fields["GOCACHE"].startswith(f"{tmp}/pdserve-k8s-go."), line
        assert fields["GOMODCACHE"].startswith(f"{tmp}/pdserve-k8s-go."), line
    assert "-modcacherw" in calls[0]
    assert list(tmp.iterdir()) == [], "the temporary Go caches were left behind"


def test_go_caches_set_by_the_user_are_kept(tmp_path: Path) -> None:
    env, log = _recording_go(tmp_path)
    cache, mods = tmp_path / "gocache", tmp_path / "gomod"
    proc = _run([str(tmp_path / "out")], {**env, "GOCACHE": str(cache), "GOMODCACHE": str(mods)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"GOCACHE={cache} GOMODCACHE={mods} " in log.read_text().splitlines()[0]
    assert (cache / "obj").exists() and (mods / "mod").exists()


def test_warm_default_go_caches_are_used(tmp_path: Path) -> None:
    # A machine that already keeps Go caches (this project's own earlier build, say) rebuilds in
    # seconds from them; a cold temporary cache would cost CI minutes of compiling for nothing.
    env, log = _recording_go(tmp_path)
    cache, mods = tmp_path / "home-gocache", tmp_path / "home-gomod"
    for d in (cache, mods):
        d.mkdir()
        (d / "old").write_text("x")
    go = Path(env["PATH"].split(":")[0]) / "go"
    go.write_text(go.read_text().replace(
        "[ \"$1\" = env ] && exit 0\n",
        f"[ \"$1 $2\" = \"env GOCACHE\" ] && echo {cache} && exit 0\n"
        f"[ \"$1 $2\" = \"env GOMODCACHE\" ] && echo {mods} && exit 0\n"))
    proc = _run([str(tmp_path / "out")], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"GOCACHE={cache} GOMODCACHE={mods} " in log.read_text().splitlines()[0]
    assert (cache / "obj").exists() and (mods / "mod").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
