"""A real Prometheus server (Debian's `prometheus` binary) for tests: empty TSDB in a
temporary directory, loopback only, an ephemeral port, stopped with its process group."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from pdserve.common.procs import stop_group

BINARY = os.environ.get("PDSERVE_PROMETHEUS", shutil.which("prometheus") or "/usr/bin/prometheus")


def available() -> bool:
    return Path(BINARY).is_file() and os.access(BINARY, os.X_OK)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def file_sd(job: str, targets: Path) -> dict[str, Any]:
    """A scrape config reading its targets (and their labels) from a JSON file Prometheus re-reads every second."""
    return {"job_name": job, "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}


class PrometheusServer:
    """`with PrometheusServer(scrape_configs) as prom: prom.query("up")`."""

    def __init__(self, scrape_configs: list[dict[str, Any]] | None = None, scrape_interval: str = "1s", host: str = "127.0.0.1") -> None:
        # host: loopback by default; the kind e2e binds the Docker network's gateway so pods reach it.
        self.host = host
        self.scrape_configs = scrape_configs or []
        self.scrape_interval = scrape_interval
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_config(self) -> None:
        assert self._dir is not None
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": self.scrape_configs,
        }
        Path(self._dir.name, "prometheus.yml").write_text(yaml.safe_dump(config))

    def reload(self, scrape_configs: list[dict[str, Any]]) -> None:
        """Swap the scrape targets (the server is started with --web.enable-lifecycle)."""
        self.scrape_configs = scrape_configs
        self.write_config()
        httpx.post(f"{self.url}/-/reload", timeout=10).raise_for_status()

    def __enter__(self) -> PrometheusServer:
        if not available():
            raise RuntimeError(f"prometheus binary not found at {BINARY} (apt-get install prometheus)")
        self._dir = tempfile.TemporaryDirectory(prefix="pdserve-prom-")
        self.write_config()
        last_error = ""
        for _ in range(3):  # another process may grab the port between probe and bind
            self.port = _free_port(self.host)
            self._spawn()
            if self._wait_ready():
                return self
            last_error = self._log_tail()
            self._stop()
        self._dir.cleanup()
        raise RuntimeError(f"prometheus did not become ready:\n{last_error}")

    def _spawn(self) -> None:
        assert self._dir is not None
        log = open(Path(self._dir.name, "prometheus.log"), "ab")
        self._proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self._dir.name}/prometheus.yml",
                f"--storage.tsdb.path={self._dir.name}/data",
                f"--web.listen-address={self.host}:{self.port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def _log_tail(self) -> str:
        assert self._dir is not None
        return Path(self._dir.name, "prometheus.log").read_text(errors="replace")[-2000:]

    def kill(self) -> None:
        """Chaos: SIGKILL the server (no shutdown, as when its node dies); port and TSDB are kept."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)
        self._proc = None

    def freeze(self) -> None:
        """Chaos: SIGSTOP the server, a hung Prometheus: connections are accepted (the kernel's
        backlog), queries never answered. ``kill`` or ``restart`` end it."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGSTOP)

    def restart(self) -> None:
        """Start again on the same address with the same TSDB (a Prometheus pod back on its volume)."""
        self.kill()
        self._spawn()
        if not self._wait_ready(60.0):
            raise RuntimeError(f"prometheus did not come back on port {self.port}:\n{self._log_tail()}")

    def _wait_ready(self, timeout: float = 120.0) -> bool:
        # Generous: a Prometheus opening its TSDB beside a CI run of the suite twice over took more than 30 s (a
        # flake at 5d9b5da); a server that exits (its port taken) answers at once, so a retry is not delayed.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return False

    def _stop(self) -> None:
        if self._proc is not None:
            stop_group(self._proc)
        self._proc = None

    def __exit__(self, *exc: object) -> None:
        self._stop()
        if self._dir is not None:
            self._dir.cleanup()

    def query(self, expr: str) -> dict[str, Any]:
        """Instant query; returns Prometheus's JSON. Raises ValueError naming a bad query."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body: dict[str, Any] = r.json()
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')} in query {expr!r}")
        return body
