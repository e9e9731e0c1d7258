"""Import every vLLM module the probes use, on the CPU platform (run by setup_env.py)."""

from __future__ import annotations

import importlib
import sys

from common import use_cpu_platform, vllm_version

MODULES = (
    "torch",
    "vllm.engine.arg_utils",
    "vllm.entrypoints.cli.serve",
    "vllm.distributed.kv_events",
    "vllm.v1.core.kv_cache_utils",
)

if __name__ == "__main__":
    print("platform", use_cpu_platform(), "vllm", vllm_version())
    for name in MODULES:
        importlib.import_module(name)
    print("smoke ok:", ", ".join(MODULES), file=sys.stderr)
