"""Run a probe (conformance/probes/*.py) inside a vLLM version's conformance venv.

The venvs are built by ``make conformance-env`` (conformance/setup_env.py) under
.cache/conformance/. The main venv never imports vLLM: each check sends JSON to a probe
subprocess and compares what vLLM's own code answered with pdserve's side.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "conformance" / "probes"
CACHE = ROOT / ".cache" / "conformance"
REQUIREMENTS = ROOT / "conformance" / "requirements"
# `make test` / `make conformance` set this: a missing venv is then a failure, not a skip.
REQUIRED = os.environ.get("PDSERVE_CONFORMANCE_REQUIRED") == "1"
PROBE_TIMEOUT_S = 900


def env_versions() -> list[str]:
    return sorted(p.name[len("vllm-"):-len(".txt")] for p in REQUIREMENTS.glob("vllm-*.txt"))


def venv_python(version: str) -> Path:
    venv = CACHE / f"vllm-{version}"
    if not (venv / ".conformance-ready").exists():
        msg = f"no conformance venv for vLLM {version} at {venv}: run `make conformance-env`"
        if REQUIRED:
            pytest.fail(msg)
        pytest.skip(msg)
    return venv / "bin" / "python"


def run_probe(version: str, probe: str, request: dict[str, Any], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """The probe's JSON answer; a probe that crashed fails the test with its traceback."""
    python = venv_python(version)
    # Only vLLM's venv on the path: pdserve must not leak into the judge.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        req = Path(tmp) / "request.json"
        ans = Path(tmp) / "answer.json"
        req.write_text(json.dumps(request))
        proc = subprocess.run([str(python), str(PROBES / probe), str(req), str(ans)], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if proc.returncode != 0 or not ans.exists():
            pytest.fail(f"probe {probe} (vLLM {version}) exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        answer: dict[str, Any] = json.loads(ans.read_text())
    if "probe_error" in answer:
        pytest.fail(f"probe {probe} (vLLM {version}) raised {answer['probe_error']}\n{answer.get('traceback', '')}")
    assert answer["vllm_version"] == version, f"venv for {version} runs vLLM {answer['vllm_version']}"
    return answer
