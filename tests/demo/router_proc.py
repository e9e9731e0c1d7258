"""A `pdserve router` process on loopback in front of given workers, for the demo's endpoint tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from pdserve.common.procs import stop_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(stack: ExitStack, log_dir: Path, decode_urls: list[str], tokenizer_args: list[str]) -> str:
    """Start the router (stopped by ``stack``) and return its URL once it answers /health and lists a model."""
    port = free_port()
    log_path = log_dir / "router.log"
    log = open(log_path, "w")
    stack.callback(log.close)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdserve.cli", "router", "--host", "127.0.0.1", "--port", str(port),
         *tokenizer_args, "--decode", *decode_urls],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(stop_group, proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200 and \
                    httpx.get(f"{url}/v1/models", timeout=1).json()["data"]:
                return url
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(log_path.read_text()[-2000:])
        time.sleep(0.2)
