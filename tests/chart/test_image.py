"""The Dockerfile and the chart agree: non-root numeric user, `pdserve` entry point."""

from __future__ import annotations

import re

import helm_python as helm

from .conftest import ROOT, of_kind, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _final_stage() -> str:
    return DOCKERFILE.split("\nFROM ")[-1]


def test_image_runs_pdserve_as_a_numeric_non_root_user() -> None:
    stage = _final_stage()
    user = re.search(r"^USER (\d+):(\d+)$", stage, re.M)
    assert user, "USER must be numeric so runAsNonRoot can verify it"
    assert int(user.group(1)) != 0
    assert re.search(r'^ENTRYPOINT \["pdserve"\]$', stage, re.M)
    assert stage.startswith("python:3.11-slim")


def test_chart_runs_the_image_as_its_user(chart: helm.Chart) -> None:
    uid = int(re.search(r"^USER (\d+):", _final_stage(), re.M).group(1))  # type: ignore[union-attr]
    (deploy,) = of_kind(render(chart), "Deployment")
    assert deploy["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid


def test_dockerignore_keeps_the_build_context_to_the_package() -> None:
    lines = [ln for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "*" and {"!pyproject.toml", "!README.md", "!src"} <= set(lines)
    for needed in ("pyproject.toml", "README.md", "src"):
        assert f"COPY {needed}" in DOCKERFILE or "COPY pyproject.toml README.md" in DOCKERFILE
