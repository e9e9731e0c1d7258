import json
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pdserve.planner.shell.actuator_process_pool import ProcessPool
from pdserve.planner.core.decision import ScalingDecision

pytestmark = pytest.mark.slow


def test_pool_starts_announces_and_stops_workers(tmp_path):
    disc = tmp_path / "discovery.json"
    pool = ProcessPool(model="mock", worker_args=["--mock-speedup", "50", "--tokenizer-mode", "mock"], discovery_file=disc,
                       log_dir=tmp_path)
    try:
        pool.apply(ScalingDecision(1, 2, "up", previous=(0, 0)))
        p, d = pool.pools()
        assert (p.replicas, d.replicas) == (1, 2)
        assert pool.wait_ready(40), [f.read_text()[-500:] for f in tmp_path.glob("*.log")]
        data = json.loads(disc.read_text())
        assert len(data["prefill"]) == 1 and len(data["decode"]) == 2
        assert {t.role for t in pool.targets()} == {"prefill", "decode"}
        victim = pool.workers["decode"][1]
        pool.scale("decode", 1)
        assert victim.proc.poll() is not None  # stopped, not just forgotten
        assert json.loads(disc.read_text())["decode"] == [pool.workers["decode"][0].url]
        with pytest.raises(ValueError, match="decode replicas must be >= 0"):
            pool.scale("decode", -1)
    finally:
        procs = [w.proc for ws in pool.workers.values() for w in ws]
        pool.close()
    assert all(p.poll() is not None for p in procs)
    assert json.loads(disc.read_text()) == {"prefill": [], "decode": []}


# A stand-in worker whose exit after SIGTERM waits until every stand-in has been told to stop (as a drain
# takes its time), and gives up with code 3 after 5 s: stopping them one by one can only end in code 3.
_SLOW_EXIT = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    d, port, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    def on_term(*_):
        (d / f"{port}.term").touch()
        end = time.monotonic() + 5
        while len(list(d.glob("*.term"))) < n:
            if time.monotonic() > end:
                sys.exit(3)
            time.sleep(0.02)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    (d / f"{port}.up").touch()
    time.sleep(3600)
""")


@dataclass
class _SlowExitPool(ProcessPool):
    marks: Path = Path(".")

    def command(self, role: str, port: int) -> list[str]:
        return [sys.executable, "-c", _SLOW_EXIT, str(self.marks), str(port), "3"]


def test_close_tells_every_worker_before_waiting_for_any(tmp_path):
    pool = _SlowExitPool(discovery_file=tmp_path / "discovery.json", stop_grace_s=60.0, marks=tmp_path)
    pool.scale("prefill", 1)
    pool.scale("decode", 2)
    procs = [w.proc for ws in pool.workers.values() for w in ws]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("*.up"))) < 3:  # the handlers are installed
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    pool.close()
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert json.loads((tmp_path / "discovery.json").read_text()) == {"prefill": [], "decode": []}
