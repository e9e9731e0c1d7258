import asyncio

import msgpack
import pytest
import zmq

from pdserve.router.core.block_hasher import BlockHasher
from pdserve.router.shell.kv_events import KvEventFormatError, KvEventSubscriber, parse_event, parse_message
from pdserve.router.core.kv_index import AllBlocksCleared, BlockRemoved, BlockStored, KvIndex


def msg(seq: int, events: list) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), msgpack.packb([1.5, events, 0], use_bin_type=True)]


def test_parse_map_events_as_vllm_sends_them() -> None:
    seq, evs = parse_message(msg(7, [
        {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None, "token_ids": [1] * 32,
         "block_size": 16, "lora_id": None, "medium": "GPU", "group_idx": 0},
        {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
        {"type": "AllBlocksCleared"},
    ]))
    assert seq == 7
    assert evs[0] == BlockStored(block_hashes=(1, 2), token_ids=(1,) * 32, block_size=16, medium="GPU", group_idx=0)
    assert evs[1] == BlockRemoved(block_hashes=(1,), medium="GPU")
    assert evs[2] == AllBlocksCleared()


def test_parse_tagged_arrays_and_bytes_hashes() -> None:
    # vLLM 0.11: msgspec array_like + tag -> ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium]
    h = (2**70 + 5).to_bytes(9, "big")
    ev = parse_event(["BlockStored", [h], None, [3] * 16, 16, None, "GPU"])
    assert ev == BlockStored(block_hashes=(5,), token_ids=(3,) * 16, medium="GPU")
    assert parse_event(["BlockRemoved", [7], "GPU"]) == BlockRemoved(block_hashes=(7,), medium="GPU")
    assert parse_event(["AllBlocksCleared"]) == AllBlocksCleared()


def test_parse_current_release_maps_with_new_fields() -> None:
    # vLLM 0.33: tagged maps, defaults omitted, extra fields the router does not use ignored.
    ev = parse_event({"type": "BlockStored", "block_hashes": [b"\x01" * 32], "parent_block_hash": 9,
                      "token_ids": [1, 2, 3, 4], "block_size": 4, "lora_id": 3, "medium": "CPU",
                      "lora_name": "sql", "extra_keys": [["sql", "salt"]], "group_idx": 1,
                      "kv_cache_spec_kind": "full_attention", "session_id": "s", "locality": "LOCAL",
                      "lookahead_token_ids": None})
    assert ev == BlockStored(block_hashes=(int.from_bytes(b"\x01" * 8, "big"),), parent_block_hash=9,
                             token_ids=(1, 2, 3, 4), block_size=4, lora_id=3, medium="CPU", lora_name="sql",
                             extra_keys=(["sql", "salt"],), group_idx=1, kv_cache_spec_kind="full_attention")
    assert parse_event({"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU", "group_idx": 2}) == \
        BlockRemoved(block_hashes=(1,), medium="GPU", group_idx=2)


@pytest.mark.parametrize(
    ("frames", "fragment"),
    [
        ([b"x"], "3 frames"),
        ([b"", b"\x00", b""], "8 bytes"),
        ([b"", bytes(8), b"\xc1"], "msgpack"),
        ([b"", bytes(8), msgpack.packb(5)], "batch"),
        ([b"", bytes(8), msgpack.packb([0, [{"type": "Nope"}], 0])], "unknown KV event type"),
        ([b"", bytes(8), msgpack.packb([0, [{"type": "BlockRemoved", "block_hashes": "x"}], 0])], "must be a list"),
        ([b"", bytes(8), msgpack.packb([0, [{"type": "BlockRemoved", "block_hashes": [1.5]}], 0])], "int or bytes"),
        ([b"", bytes(8), msgpack.packb([0, [["BlockStored", [1], None, ["a"], 16, None, None]], 0])], "token_ids"),
        ([b"", bytes(8), msgpack.packb([0, [["BlockStored", [1], None, [1], 0, None, None]], 0])], "block_size"),
        ([b"", bytes(8), msgpack.packb([0, [{"type": "BlockStored", "block_hashes": [1], "block_size": 16,
                                             "token_ids": [1], "group_idx": "x"}], 0])], "group_idx"),
    ],
)
def test_bad_messages_are_rejected_clearly(frames, fragment: str) -> None:
    with pytest.raises(KvEventFormatError) as e:
        parse_message(frames)
    assert fragment in str(e.value)


async def test_subscriber_feeds_the_index_over_real_zmq() -> None:
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    index = KvIndex(BlockHasher(2))
    seen = []
    sub = KvEventSubscriber(index, lambda w, n: seen.append((w, n)))
    try:
        sub.sync({"http://w1": f"tcp://127.0.0.1:{port}"})
        # PUB/SUB drops messages until the subscription propagates: publish until seen.
        for i in range(200):
            pub.send_multipart(msg(i, [{"type": "BlockStored", "block_hashes": [10 + i, 11 + i],
                                        "token_ids": [i, i, 7, 7], "block_size": 2}]))
            await asyncio.sleep(0.01)
            if seen:
                break
        assert seen and index.overlaps(index.request_keys([i, i, 7, 7, 8])) == {"http://w1": 2}
        pub.send_multipart([b"garbage"])
        pub.send_multipart(msg(i + 5, [{"type": "AllBlocksCleared"}]))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(index) == 0:
                break
        assert len(index) == 0 and sub.errors == 1 and sub.gaps == 1
        sub.sync({})  # worker gone: its blocks leave the index
        assert index.workers == []
    finally:
        await sub.close()
        pub.close(0)
