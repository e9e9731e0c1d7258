"""Fixtures: real `pdserve worker` subprocesses on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pdserve.worker.testing import WorkerHandle, start_worker


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerHandle]:
    with start_worker(
        "meta-llama/Llama-3.1-8B-Instruct",
        speedup=20.0,
        args=["--served-model-name", "llama", "llama-alias", "--max-model-len", "4096",
              "--mock-max-body-bytes", "65536", "--mock-mean-output-tokens", "24"],
    ) as w:
        yield w
