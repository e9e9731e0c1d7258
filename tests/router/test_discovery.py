import json
from pathlib import Path

import pytest

from pdserve.router.shell.discovery import (
    DiscoveryError,
    Endpoint,
    FileWatcher,
    KubernetesWatcher,
    normalize_url,
    parse_discovery,
    pods_to_endpoints,
)


def test_parse_discovery_urls_and_objects() -> None:
    eps = parse_discovery({"prefill": ["http://10.0.0.1:8000/"], "decode": [
        {"url": "http://10.0.0.2:8000/v1", "kv_events": "tcp://10.0.0.2:6000"}, "http://10.0.0.2:8000"]})
    assert eps.prefill == (Endpoint("http://10.0.0.1:8000", "tcp://10.0.0.1:5557"),)
    assert [e.url for e in eps.decode] == ["http://10.0.0.2:8000"]  # listed twice, one worker
    assert eps.decode[0].kv_events == "tcp://10.0.0.2:6000"
    assert eps.disaggregated
    assert not parse_discovery({"decode": ["http://a:1"]}).disaggregated


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"prefil": []}, "unknown keys ['prefil']"),
        ({"decode": "http://a:1"}, "'decode' must be a list"),
        ({"decode": [5]}, "decode[0]"),
        ({"decode": ["ftp://a:1"]}, "http://host:port"),
        ({"decode": ["http://a:1/x"]}, "must not have a path"),
        ({"decode": ["http://a:port"]}, "bad port"),
        ({"decode": [{"url": "http://a:1", "kv_events": "udp://x"}]}, "tcp://"),
    ],
)
def test_parse_discovery_errors_name_the_problem(data, fragment: str) -> None:
    with pytest.raises(DiscoveryError, match=None) as e:
        parse_discovery(data)
    assert fragment in str(e.value)


def test_normalize_url() -> None:
    assert normalize_url(" http://h:1/v1/ ") == "http://h:1"


def test_file_watcher_rereads_on_change_and_keeps_last_good(tmp_path: Path) -> None:
    path = tmp_path / "workers.json"
    seen = []
    w = FileWatcher(path, seen.append)
    assert not w.poll() and "cannot stat" in (w.last_error or "")
    path.write_text(json.dumps({"decode": ["http://127.0.0.1:1"]}))
    assert w.poll() and not w.poll()
    path.write_text("{broken")
    assert not w.poll() and "not valid JSON" in (w.last_error or "")
    path.write_text(json.dumps({"prefill": ["http://127.0.0.1:2"], "decode": ["http://127.0.0.1:1", "http://127.0.0.1:3"]}))
    assert w.poll()
    assert [len(e.decode) for e in seen] == [1, 2] and len(seen[-1].prefill) == 1


def pod(name: str, role: str, ip: str | None = "10.1.0.1", ready: bool = True, deleting: bool = False,
        phase: str = "Running") -> dict:
    meta = {"name": name, "labels": {"pdserve.io/service": "svc", "pdserve.io/role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_pods_to_endpoints_keeps_only_ready_live_pods_with_ips() -> None:
    pods = [
        pod("p1", "prefill", "10.0.0.1"),
        pod("d1", "decode", "10.0.0.2"),
        pod("d2", "decode", "10.0.0.3", ready=False),
        pod("d3", "decode", None),
        pod("d4", "decode", "10.0.0.4", deleting=True),
        pod("d5", "decode", "10.0.0.5", phase="Pending"),
        pod("r1", "router", "10.0.0.6"),
        pod("d6", "decode", "fd00::7"),
    ]
    other = pod("o1", "decode", "10.0.0.8")
    other["metadata"]["labels"]["pdserve.io/service"] = "other"
    assert len(pods_to_endpoints([*pods, other], service="svc").decode) == 2
    eps = pods_to_endpoints(pods, http_port=8000, kv_port=5557)
    assert [e.url for e in eps.prefill] == ["http://10.0.0.1:8000"]
    assert [e.url for e in eps.decode] == ["http://10.0.0.2:8000", "http://[fd00::7]:8000"]
    assert eps.decode[0].kv_events == "tcp://10.0.0.2:5557"


def test_kubernetes_watcher_drops_a_pod_as_soon_as_it_terminates() -> None:
    w = KubernetesWatcher("svc", "ns", lambda e: None, loop=None)  # type: ignore[arg-type]
    assert len(w.apply_event("ADDED", pod("d1", "decode", "10.0.0.2")).decode) == 1
    assert len(w.apply_event("ADDED", pod("d2", "decode", "10.0.0.3")).decode) == 2
    assert len(w.apply_event("MODIFIED", pod("d1", "decode", "10.0.0.2", deleting=True)).decode) == 1
    assert len(w.apply_event("DELETED", pod("d2", "decode", "10.0.0.3")).decode) == 0
