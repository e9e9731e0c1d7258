from pdserve.router.core import pd


def test_prefill_request_matches_vllm_nixl_proxy() -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": 50, "max_completion_tokens": 50, "stream": True,
            "stream_options": {"include_usage": True}, "min_tokens": 3, "min_completion_tokens": 2, "temperature": 0.7}
    p = pd.prefill_request(body)
    assert p["max_tokens"] == 1 and p["max_completion_tokens"] == 1
    assert p["stream"] is False
    assert "stream_options" not in p and "min_tokens" not in p and "min_completion_tokens" not in p
    assert p["kv_transfer_params"] == {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                       "remote_block_ids": None, "remote_host": None, "remote_port": None}
    assert p["temperature"] == 0.7 and p["prompt"] == "hi"
    # The client's request is not modified.
    assert body["stream"] is True and body["min_tokens"] == 3 and "kv_transfer_params" not in body


def test_max_completion_tokens_only_set_when_present() -> None:
    assert "max_completion_tokens" not in pd.prefill_request({"prompt": "x"})


def test_decode_request_forwards_params_verbatim() -> None:
    kv = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e1", "remote_block_ids": [1, 2],
          "remote_host": "10.0.0.1", "remote_port": 5600, "remote_request_id": "abc", "tp_size": 1}
    body = {"model": "m", "prompt": "x", "stream": True, "min_tokens": 4}
    d = pd.decode_request(body, kv)
    assert d["kv_transfer_params"] is kv
    assert d["stream"] is True and d["min_tokens"] == 4
    assert pd.decode_request(body, None) == body


def test_continuation_resumes_with_the_remaining_budget() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 10,
            "temperature": 0.5, "stop": ["x"], "min_tokens": 5, "tools": [{"type": "function"}]}
    c = pd.continuation_request(body, [1, 2, 3], [7, 8, 9, 10])
    assert c["prompt"] == [1, 2, 3, 7, 8, 9, 10]
    assert c["max_tokens"] == 6 and c["min_tokens"] == 1
    assert c["stream"] is True and c["stream_options"] == {"include_usage": True}
    assert c["temperature"] == 0.5 and c["stop"] == ["x"]
    assert "messages" not in c and "tools" not in c
    assert pd.remaining_tokens({"max_tokens": 3}, 5) == 0
    assert pd.remaining_tokens({}, 5) is None
    assert "max_tokens" not in pd.continuation_request({"model": "m"}, [1], [2])
