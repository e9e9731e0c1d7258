"""Build one venv per supported vLLM version for the conformance tests (stdlib only).

``python3 conformance/setup_env.py`` creates ``.cache/conformance/vllm-<ver>/`` (git-ignored)
from ``conformance/requirements/vllm-<ver>.txt``: a complete pinned list installed with
``--no-deps``. vLLM's and torch's declared dependencies would pull GPU kernels (xformers,
flashinfer, triton, ray, ...) that nothing here imports; the list holds the ``vllm`` and
``torch`` wheels from PyPI, the CUDA runtime libraries torch's shared objects link
against (``import torch`` fails without them even on a CPU-only machine), and the pure
packages the imported vLLM modules need.

Disk: CI ran out of space here (~25 GB written by a cold ``make test``). After install,
what a machine without a GPU can never load is removed (``prune.py``: vLLM's CUDA kernel
modules, NVIDIA libraries no shared object of the venv links), and the GPU math and
communication libraries torch links but never calls here (cuBLAS, NCCL, ...) are replaced
by stand-ins that abort if called (``cuda_stubs.py``; needs gcc and nm, else they stay);
the names and bytes go to ``setup-times.json``. The wheels of the list are downloaded once into the user's cache,
``~/.cache/pdserve/conformance-wheels`` (``$XDG_CACHE_HOME``, or ``$PDSERVE_WHEEL_CACHE``;
pip's own HTTP cache does not keep them here: the index answers ``no-store``), so another
checkout on the machine reuses them, and installed from there offline -- except NVIDIA's
(``nvidia-*``, ~5 GB zipped for both versions, a third of it pruned right after install):
each is installed straight from the index (pip deletes the wheel) and pruned, one at a
time, so the peak is the venvs plus one wheel, and a cold machine
(CI), which gains nothing from a cache on its own disk, does not carry them. A venv whose
list and prune recipe did not change is kept (its stamp holds both), so a warm run only
checks stamps.

Each venv is smoke-tested by importing what the probes use; the times go to
``.cache/conformance/setup-times.json``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cuda_stubs  # conformance/*.py (this script's folder is on sys.path)
import prune

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "conformance" / "requirements"
CACHE = ROOT / ".cache" / "conformance"
# The downloaded wheels (~2 GB) live in the user's cache, not the checkout's: a fresh clone
# on the same machine (CI, a second worktree) reuses them instead of fetching them again;
# the venvs stay per checkout under .cache/ (git-ignored). PDSERVE_WHEEL_CACHE overrides.
WHEELS = Path(os.environ.get("PDSERVE_WHEEL_CACHE")
              or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pdserve" / "conformance-wheels")
SMOKE = ROOT / "conformance" / "probes" / "smoke.py"
# Bump when what is pruned changes: the stamp holds it, so the venvs get rebuilt.
PRUNE_RECIPE = 2


def supported_versions() -> list[str]:
    """The versions with a requirements file; tests check that this equals the operator's table."""
    return sorted(p.name[len("vllm-"):-len(".txt")] for p in REQUIREMENTS.glob("vllm-*.txt"))


def venv_dir(version: str) -> Path:
    return CACHE / f"vllm-{version}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def _pins(req: Path) -> list[str]:
    return [line.strip() for line in req.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _transient(pin: str) -> bool:
    """NVIDIA's wheels (~5 GB zipped for both versions) are not kept: see the module docstring."""
    return pin.lower().replace("_", "-").startswith("nvidia-")


def build(version: str, python: str, force: bool) -> dict[str, object]:
    req = REQUIREMENTS / f"vllm-{version}.txt"
    target = venv_dir(version)
    stamp = target / ".conformance-ready"
    want = f"{_digest(req)} prune={PRUNE_RECIPE}"
    if not force and stamp.exists() and stamp.read_text().strip() == want:
        return {"version": version, "built": False, "addons": add_ons(target)}
    t_rm = time.monotonic()
    if target.exists():
        shutil.rmtree(target)
    t0 = time.monotonic()
    _run([python, "-m", "venv", str(target)])
    pip = [str(target / "bin" / "python"), "-m", "pip"]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    pins = _pins(req)
    kept = [p for p in pins if not _transient(p)]
    # `pip download` skips files already in the folder: only missing wheels are fetched.
    _run([*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(WHEELS), *kept], env=env)
    t_download = time.monotonic() - t0
    _run([*pip, "install", "-q", "--no-deps", "--no-index", "--find-links", str(WHEELS), *kept], env=env)
    site = next((target / "lib").glob("python*/site-packages"))
    pruned: dict[str, int] = {}
    for p in prune.cuda_kernel_modules(site):
        pruned[str(p.relative_to(site))] = p.stat().st_size
        p.unlink()
    libs = prune.NvidiaLibs(prune.outside_nvidia(site))
    # GPU-only libraries torch links become stand-ins (cuda_stubs.py) where gcc and nm are here.
    stubs, stubbed = cuda_stubs.available(), dict[str, int]()
    todo = [p for p in pins if _transient(p)]
    while todo:
        pin = todo.pop(0)
        before = _stamps(site / "nvidia")
        _install_transient(pip, pin, env, again=pin in libs.pruned.values())
        # What this install wrote (a reinstall also rewrites files kept or stubbed before).
        new = {p for p, st in _stamps(site / "nvidia").items() if before.get(p) != st}
        for p in libs.add(new, pin):
            pruned[str(p.relative_to(site))] = p.stat().st_size
            p.unlink()
        if stubs:
            for p in sorted(q for q in new if q.exists() and cuda_stubs.STUBBED.match(q.name)):
                stubbed[str(p.relative_to(site))] = cuda_stubs.stub(p)
        todo += [r for r in libs.missing() if r not in todo]
    t_install = time.monotonic() - t0
    _run([str(target / "bin" / "python"), str(SMOKE)], env={**os.environ, "PYTHONPATH": ""})
    stamp.write_text(want + "\n")
    add_ons(target)
    return {"version": version, "built": True, "download_s": round(t_download, 1), "install_s": round(t_install - t_download, 1),
            "total_s": round(time.monotonic() - t0, 1),
            "removed_old_venv_s": round(t0 - t_rm, 1), "venv_bytes": _du(target),
            "kept_wheels_bytes": sum(w.stat().st_size for w in _kept_wheels(kept)),
            "pruned_bytes": sum(pruned.values()), "pruned": dict(sorted(pruned.items())),
            "stubbed_bytes_saved": sum(stubbed.values()) if stubs else "no gcc/nm: real libraries kept",
            "stubbed": stubbed}


def _install_transient(pip: list[str], pin: str, env: dict[str, str], again: bool) -> None:
    """Install one wheel straight from the index: pip keeps it in a temporary folder only
    (``pip download`` then ``install`` would hold it twice: its temporary copy and the saved one)."""
    _run([*pip, "install", "-q", "--no-deps", "--only-binary=:all:", *(["--force-reinstall"] if again else []), pin], env=env)


def _stamps(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in prune.shared_objects(folder)} if folder.is_dir() else {}


def _kept_wheels(pins: list[str]) -> list[Path]:
    """The cached wheel files of these pins (names normalised as in wheel file names)."""
    found = []
    for pin in pins:
        name, _, ver = pin.partition("==")
        stem = re.sub(r"[-_.]+", "_", name).lower() + "-" + ver
        found += [w for w in WHEELS.glob("*.whl") if w.name.lower().startswith(stem + "-")]
    return found


def add_ons(target: Path) -> list[str]:
    """Install ``requirements/addon-*.txt`` (pinned, --no-deps) into a built venv, each once per
    list digest: small packages every version needs (OpenTelemetry) go in without a rebuild."""
    done = []
    for req in sorted(REQUIREMENTS.glob("addon-*.txt")):
        stamp = target / f".{req.stem}-ready"
        want = _digest(req)
        if stamp.exists() and stamp.read_text().strip() == want:
            continue
        pip = [str(target / "bin" / "python"), "-m", "pip"]
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        _run([*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(WHEELS), "-r", str(req)], env=env)
        _run([*pip, "install", "-q", "--no-deps", "--no-index", "--find-links", str(WHEELS), "-r", str(req)], env=env)
        stamp.write_text(want + "\n")
        done.append(req.stem)
    return done


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="append", help="only this vLLM version (repeatable)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the venvs (default: this one)")
    ap.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    args = ap.parse_args(argv)
    versions = args.version or supported_versions()
    if not versions:
        print(f"no requirements files under {REQUIREMENTS}", file=sys.stderr)
        return 1
    CACHE.mkdir(parents=True, exist_ok=True)
    # Several worktrees share one .cache: one builder at a time.
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        t0 = time.monotonic()
        runs = [build(v, args.python, args.force) for v in versions]
        record = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_s": round(time.monotonic() - t0, 1),
                  "loadavg": Path("/proc/loadavg").read_text().split()[:3], "runs": runs}
    # Keep the last build's times (the cold numbers) apart from warm stamp checks.
    name = "setup-times.json" if any(r["built"] for r in runs) else "setup-warm.json"
    (CACHE / name).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
