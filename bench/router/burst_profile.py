"""``burst.py --profile``: py-spy samples of pdserve's router over its measured bursts, and
where its CPU went by category (the innermost matching frame of each sample)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


# Where the router's CPU goes, by the innermost matching frame of each py-spy sample
# (first rule that matches, scanning from the leaf up). "event loop and sockets" is time
# in uvloop's C code with no Python frame above the loop: epoll, accept, recv, and the
# callbacks' own C work; a socket write made from Python is charged to its caller.
PROFILE_RULES = (
    ("chat template render", ("HfTokenizer._render",)),
    ("tokenize: BPE encode", ("SegmentEncoder.encode", "WordEncoder.encode", "encode_batch_fast")),
    ("tokenize: other", ("ModelTokenizer.chat_ids", "completion_ids")),
    ("request JSON + validation", ("parse_request", "read_body")),
    ("block keys", ("request_keys",)),
    ("policy + scheduler", ("Scheduler.", "Policy.", "KvAware")),
    ("metrics", ("prometheus_client", "metrics.py")),
    ("relay: per streamed chunk (incl. its socket write)", ("_Pipe.__call__",)),
    ("upstream HTTP/1 client: parse", ("Response._feed", "_Conn.data_received")),
    ("upstream HTTP/1 client: send + connect", ("send_with_retries", "Http1Pool")),
    ("relay: stream setup + end", ("relay_stream",)),
    ("handler: other", ("CompletionHandler",)),
    ("aiohttp server (HTTP parsing, response head)", ("aiohttp/",)),
)


# The frames that run the event loop (aiohttp's ``run_app``, the lean server's ``run``): a
# sample whose innermost frame is one of them was in uvloop's C code.
LOOP_RUNNERS = ("run_app ", "run (pdserve/router/shell/lean_server.py")


def profile_start(pid: int | None, folder: Path, tag: str) -> subprocess.Popen | None:
    spy = Path(sys.executable).parent / "py-spy"
    exe = str(spy) if spy.exists() else "py-spy"
    try:
        proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                                 "--nonblocking", "--output", str(folder / f"{tag}.txt")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SystemExit("--profile needs py-spy (pip install py-spy)") from None
    time.sleep(1.0)  # attached before the burst starts
    return proc


def profile_stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    proc.wait(30)


def profile_summary(folder: Path, target: str) -> dict:
    """Share of samples per PROFILE_RULES category, and the 15 hottest leaf frames (``target``: the
    router sampled, as ``burst.py --profile-target`` names it)."""
    cats: dict[str, int] = {}
    leaves: dict[str, int] = {}
    total = 0
    for f in sorted(folder.glob("*.txt")):
        for line in f.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = stack.split(";")
            count = int(n)
            total += count
            leaves[frames[-1]] = leaves.get(frames[-1], 0) + count
            if frames[-1].startswith(LOOP_RUNNERS):  # no Python frame above the loop's C code
                cat = "event loop and sockets (uvloop C)"
            else:
                cat = next((name for fr in reversed(frames) for name, keys in PROFILE_RULES
                            if any(k in fr for k in keys)), "other")
            cats[cat] = cats.get(cat, 0) + count
    share = lambda c: round(100 * c / max(total, 1), 1)  # noqa: E731
    return {"tool": f"py-spy record --rate 250 --nonblocking, {target}'s router over its measured bursts",
            "samples": total,
            "categories_pct": {k: share(v) for k, v in sorted(cats.items(), key=lambda kv: -kv[1])},
            "top_leaf_frames_pct": {k: share(v) for k, v in sorted(leaves.items(), key=lambda kv: -kv[1])[:15]}}
