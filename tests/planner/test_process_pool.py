import json

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
