"""Peak and final disk use of a setup command while it runs (stdlib only: it runs before any venv).

    git clone -q . /tmp/pdserve-cold && cd /tmp/pdserve-cold && mkdir -p /tmp/cold-home /tmp/cold-tmp
    HOME=/tmp/cold-home XDG_CACHE_HOME=/tmp/cold-home/.cache TMPDIR=/tmp/cold-tmp \\
      python3 bench/setup/disk_peak.py --watch . --watch /tmp/cold-home --watch /tmp/cold-tmp \\
      --out /tmp/cold_conformance_env.json -- make conformance-env

A CI run of ``make test`` failed with "No space left on device" (issues ci). This polls the
bytes under every ``--watch`` folder (``du -sbc``: each file once, hard links once) every
``--interval`` seconds while the command runs and writes the largest total seen, the total
at the end and each folder's share, with the command, commit, date and machine load. A poll
can miss a peak shorter than the interval.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from resultmeta import Run, write_result  # noqa: E402


def du(paths: list[Path]) -> dict[str, int]:
    """Bytes per folder; the last entry is the total, each file counted once across all."""
    out = subprocess.run(["du", "-sbc", *map(str, paths)], capture_output=True, text=True).stdout
    rows = [line.split("\t", 1) for line in out.splitlines() if "\t" in line]
    return {name: int(size) for size, name in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--watch", type=Path, action="append", required=True, help="a folder whose bytes count (repeatable)")
    ap.add_argument("--interval", type=float, default=3.0, help="seconds between polls")
    ap.add_argument("--out", type=Path, required=True, help="JSON result")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to measure")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command after --")
    for p in args.watch:
        p.mkdir(parents=True, exist_ok=True)
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    t0 = time.monotonic()

    def poll() -> None:
        while not done.is_set():
            samples.append((round(time.monotonic() - t0, 1), du(args.watch)["total"]))
            done.wait(args.interval)

    run = Run()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    rc = subprocess.run(command).returncode
    done.set()
    poller.join()
    final = du(args.watch)
    samples.append((round(time.monotonic() - t0, 1), final["total"]))
    peak_at, peak = max(samples, key=lambda s: s[1])
    record = {"measured_command": command, "returncode": rc, "interval_s": args.interval, "samples": len(samples),
              "peak_bytes": peak, "peak_at_s": peak_at, "final_bytes": final.pop("total"), "final_bytes_by_folder": final}
    write_result(args.out, record, run)
    print(f"peak {peak / 1e9:.2f} GB at {peak_at} s, final {record['final_bytes'] / 1e9:.2f} GB -> {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
