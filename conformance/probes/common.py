"""Shared set-up for the probes: scripts that run INSIDE a vLLM conformance venv.

A probe imports only vLLM (and its deps), never pdserve: it reads a JSON request
from the file named by argv[1] and writes a JSON answer to the file named by
argv[2] (vLLM's logger writes to stdout, so stdout cannot carry the answer).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")


def use_cpu_platform() -> str:
    """Make vLLM's platform the CPU one before any config is built.

    0.11 ignores VLLM_TARGET_DEVICE=cpu when the installed wheel is a CUDA build
    (platform detection finds no GPU and falls back to UnspecifiedPlatform, whose
    device_type is empty and breaks config parsing); assigning the resolved platform
    works in every version we support.
    """
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
    return type(vllm.platforms.current_platform).__name__


def vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def main(handler: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    with open(sys.argv[1]) as f:
        request = json.load(f)
    try:
        answer = handler(request)
        answer.setdefault("vllm_version", vllm_version())
    except BaseException as err:  # the test shows the probe's own failure, not a JSON error
        answer = {"probe_error": error_text(err), "traceback": traceback.format_exc()}
    with open(sys.argv[2], "w") as f:
        json.dump(answer, f, default=repr)
