"""The conformance venvs cover exactly the supported-version table, each with its own vLLM and torch."""

from __future__ import annotations

from pdserve.api.vllm_versions import VERSIONS
from tests.conformance.vllm_env import REQUIREMENTS, env_versions


def test_every_supported_version_has_a_conformance_env() -> None:
    assert env_versions() == sorted(VERSIONS), "conformance/requirements/vllm-<ver>.txt must match pdserve.api.vllm_versions"


def test_requirements_pin_the_version_and_torch() -> None:
    for version in env_versions():
        lines = [line for line in (REQUIREMENTS / f"vllm-{version}.txt").read_text().splitlines()
                 if line and not line.startswith("#")]
        assert f"vllm=={version}" in lines
        assert any(line.startswith("torch==") for line in lines)
        assert all("==" in line for line in lines), "every package pinned: the list is installed with --no-deps"
        assert not any(line.startswith(("triton==", "xformers==", "flashinfer")) for line in lines), "GPU kernels are not needed"
