"""The live engine runner reads one injected Clock: its model time and its KV-event timestamps."""

from __future__ import annotations

import msgspec
import pytest

from pdserve.common.clock import VirtualClock
from pdserve.worker.engine import Engine, EngineConfig
from pdserve.worker.kv_events import KVEventsConfig, ZmqEventPublisher
from pdserve.worker.metrics import WorkerMetrics
from pdserve.worker.perf import PerfModel, load_profile
from pdserve.worker.runner import EngineRunner
from pdserve.worker.testing import kv_event_subscriber

EPOCH = 1_700_000_000.0


def test_model_time_and_event_timestamps_follow_the_injected_clock() -> None:
    clock = VirtualClock(EPOCH)
    publisher = ZmqEventPublisher(KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                                                 endpoint="tcp://127.0.0.1:*"))
    try:
        engine = Engine(EngineConfig(num_blocks=64), PerfModel(load_profile("llama-3.1-8b-h100")))
        runner = EngineRunner(engine, WorkerMetrics("m", 4096), speedup=10.0, publisher=publisher, clock=clock)
        clock.advance(0.5)
        assert runner.sim_now() == pytest.approx(5.0)  # 0.5 s on the clock, ten times faster in the model
        with kv_event_subscriber(publisher.endpoint) as sub:
            clock.advance(2.0)
            assert runner.reset_prefix_cache()  # vLLM publishes AllBlocksCleared
            assert sub.poll(5000), "no KV event batch"
            _topic, _seq, payload = sub.recv_multipart()
        ts, events = msgspec.msgpack.decode(payload)[:2]
        assert ts == EPOCH + 2.5 and events == [{"type": "AllBlocksCleared"}]
    finally:
        publisher.shutdown()
