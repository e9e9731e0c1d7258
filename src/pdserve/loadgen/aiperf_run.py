"""Runs the ``aiperf`` program against a server and follows its per-request export (the I/O shell).

aiperf writes ``profile_export.jsonl`` as records arrive (flushed at least once a second),
so the demo's live view and timeline get each request soon after it finished; the
record's own wall-clock times say when it was sent and when it ended.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pdserve.demo.replay import RequestResult
from pdserve.loadgen import aiperf
from pdserve.loadgen.aiperf import AiperfSettings, Record, Scheduled

# Where `make load-env` puts aiperf, relative to a source checkout.
_CHECKOUT_AIPERF = Path(__file__).resolve().parents[3] / ".cache" / "load-venv" / "bin" / "aiperf"
POLL_S = 0.5


def find_aiperf(explicit: str | None = None) -> str | None:
    """``explicit`` if given; else the one installed beside this Python (``pip install 'pdserve[load]'``),
    on PATH, or built by ``make load-env`` in this checkout."""
    if explicit:
        found = shutil.which(explicit)
        return found
    beside = Path(sys.executable).parent / "aiperf"
    for candidate in (str(beside), shutil.which("aiperf"), str(_CHECKOUT_AIPERF)):
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return candidate
    return None


@dataclass
class AiperfRun:
    """What a run left: the results in request order and aiperf's own summary."""

    results: list[RequestResult]
    start_wall_s: float | None  # the schedule's zero, wall clock
    summary: dict[str, float | str] = field(default_factory=dict)
    artifact_dir: Path | None = None


class _Follower:
    """Reads the lines appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        text = self.partial + text
        lines = text.split("\n")
        self.partial = lines.pop()
        return lines


async def replay(
    settings: AiperfSettings,
    url: str,
    model: str,
    requests: Sequence[Scheduled],
    work_dir: Path,
    on_result: Callable[[Record], None] = lambda rec: None,
    log: Callable[[str], None] = lambda line: None,
) -> AiperfRun:
    """Replays ``requests`` through aiperf; ``on_result(record)`` for each request as aiperf exports it.

    A request aiperf never reported comes back failed, so nothing is lost silently;
    aiperf exiting non-zero raises RuntimeError with the end of its output."""
    by_index = {r.index: r for r in requests}
    work_dir.mkdir(parents=True, exist_ok=True)
    input_file = work_dir / "aiperf_input.jsonl"
    input_file.write_text("\n".join(aiperf.dataset_rows(requests)) + "\n")
    artifacts = work_dir / "aiperf"
    shutil.rmtree(artifacts, ignore_errors=True)
    cmd = aiperf.command(settings, url, model, input_file, artifacts)
    out_path = work_dir / "aiperf_output.txt"
    log("aiperf: " + " ".join(cmd[1:3]) + f" ... ({len(requests)} requests; output in {out_path})")
    records: dict[int, Record] = {}
    follower = _Follower(artifacts / aiperf.RECORDS_FILE)

    def drain() -> None:
        for rec in aiperf.parse_lines(follower.new_lines(), by_index):
            if rec.result.index not in records:
                records[rec.result.index] = rec
                on_result(rec)

    with open(out_path, "wb") as out:
        # Its own session: aiperf starts a dozen service processes, all stopped with the group.
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=out, stderr=asyncio.subprocess.STDOUT,
                                                    stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        try:
            while proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), POLL_S)
                except TimeoutError:
                    pass
                drain()
        finally:
            if proc.returncode is None:
                await _stop(proc)
    drain()
    if proc.returncode != 0:
        tail = out_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"aiperf exited with {proc.returncode}; the end of its output:\n{tail}")
    start = aiperf.schedule_start(list(records.values()))
    results = []
    for req in requests:
        rec = records.get(req.index)
        if rec is None:
            results.append(RequestResult(req.index, req.send_at_s, req.prompt_tokens, error="aiperf returned no record"))
            continue
        if start is not None:
            rec.result.sent_at = rec.sent_wall_s - start
        results.append(rec.result)
    summary_file = artifacts / aiperf.SUMMARY_FILE
    summary = aiperf.summary_stats(summary_file) if summary_file.exists() else {}
    return AiperfRun(results, start, summary, artifacts)


async def _stop(proc: asyncio.subprocess.Process, grace_s: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), grace_s)
    except ProcessLookupError:
        return
    except TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        await proc.wait()


def wall_to_monotonic(wall_s: float) -> float:
    """A wall-clock instant on this process's monotonic clock (the demo's timeline runs on it)."""
    return time.monotonic() - (time.time() - wall_s)
