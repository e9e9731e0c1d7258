"""Build ``.cache/load-venv``: the load generators (the ``load`` extra, NVIDIA's aiperf) in their own venv (stdlib only).

    python3 tools/setup_load_env.py [--force]

aiperf pins versions of packages pdserve's own venv holds newer (pyzmq, rich, pandas,
prometheus-client, ...), so it gets a venv of its own and runs as a program: the demo's
``--load-engine aiperf`` and the live benchmarks start ``.cache/load-venv/bin/aiperf``.
The list comes from ``pyproject.toml``'s ``load`` extra; a venv whose list did not change
is kept (its stamp holds the list), so a warm run only reads the stamp. The wheels are
kept in the user's cache, ``~/.cache/pdserve/load-wheels`` (``$XDG_CACHE_HOME``, or
``$PDSERVE_WHEEL_CACHE``/load-wheels; pip's own cache does not keep them: the index answers
``no-store``), so a fresh clone on the same machine (CI) installs offline from there. Cold:
about 1.2 GB installed, 1.5-7 minutes here depending on load. Times go to
``.cache/load-venv/setup-times.json``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / ".cache" / "load-venv"
_BASE = os.environ.get("PDSERVE_WHEEL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pdserve"
WHEELS = Path(_BASE) / "load-wheels"


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["load"])


def build(python: str, force: bool) -> dict[str, object]:
    reqs = requirements()
    stamp = TARGET / ".load-ready"
    want = "\n".join(reqs)
    if not force and stamp.exists() and stamp.read_text().strip() == want:
        return {"built": False, "requirements": reqs}
    t0 = time.monotonic()
    if TARGET.exists():
        shutil.rmtree(TARGET)
    subprocess.run([python, "-m", "venv", str(TARGET)], check=True)
    pip = [str(TARGET / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    offline = [*pip, "install", "-q", "--no-index", "--find-links", str(WHEELS), *reqs]
    # From the kept wheels when they are all there (pip download would fetch them again: it took
    # as long as a cold download here); else fetch what is missing and install from the folder.
    t_download = 0.0
    if not WHEELS.is_dir() or subprocess.run(offline, capture_output=True).returncode != 0:
        print(f"+ pip download {' '.join(reqs)} -> {WHEELS}", flush=True)
        subprocess.run([*pip, "download", "-q", "-d", str(WHEELS), *reqs], check=True)
        t_download = time.monotonic() - t0
        subprocess.run(offline, check=True)
    # Smoke: the program starts and names its version.
    version = subprocess.run([str(TARGET / "bin" / "aiperf"), "--version"], check=True, capture_output=True, text=True)
    stamp.write_text(want + "\n")
    return {"built": True, "requirements": reqs, "aiperf_version": version.stdout.strip()[-40:],
            "download_s": round(t_download, 1), "total_s": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter for the venv (default: this one)")
    ap.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    args = ap.parse_args(argv)
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    # Worktrees may share one .cache: one builder at a time.
    with open(TARGET.parent / ".load-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "loadavg": Path("/proc/loadavg").read_text().split()[:3], **build(args.python, args.force)}
    if record["built"]:
        (TARGET / "setup-times.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
