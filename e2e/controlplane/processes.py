"""Child processes of the local control plane: start, log, watch, stop.

Every component runs in its own session (process group) so that stopping it also
stops anything it forked, and writes stdout+stderr to one log file that a failed
start quotes back to the user.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when its parent goes away, so a
    test runner killed hard (timeout, OOM) does not leave etcd and friends behind."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ComponentError(RuntimeError):
    """A control-plane component failed to start or exited early."""


def free_port() -> int:
    """An ephemeral loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        binary = Path(self.argv[0])
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise ComponentError(f"{self.name}: binary {binary} is missing or not executable")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                # The death signal fires when the *thread* that forked exits, so it is
                # only safe to arm from the main thread.
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
            )

    def check_alive(self) -> None:
        """Raise with the log tail when the process has exited."""
        if self.process is None:
            raise ComponentError(f"{self.name} was never started")
        code = self.process.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with code {code}; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
            )

    def stop(self, grace_s: float = 10.0) -> None:
        proc = self.process
        if proc is None:
            return
        self.process = None
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # The leader may be gone while children of its group linger.
        _signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until(
    what: str,
    probe: Callable[[], bool],
    timeout_s: float,
    watched: Sequence[Component] = (),
    interval_s: float = 0.2,
) -> None:
    """Poll `probe` until it returns True; fail fast if a watched component dies."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        for comp in watched:
            comp.check_alive()
        try:
            if probe():
                return
        except ComponentError:
            raise
        except Exception as exc:  # the probe's transport errors mean "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise ComponentError(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(interval_s)
