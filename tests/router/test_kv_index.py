from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.router.core.kv_index import BlockRemoved, KvIndex


def test_store_match_walks_chain_until_first_miss() -> None:
    idx = KvIndex()
    idx.store("w1", (1, 2, 3))
    idx.store("w2", (1, 2))
    idx.store("w2", (4,))  # not contiguous from the prompt start
    assert idx.overlaps([1, 2, 3, 4]) == {"w1": 3, "w2": 2}
    assert idx.overlaps([9, 1, 2]) == {}
    assert idx.overlaps([1, 2, 3], ["w2"]) == {"w2": 2}
    assert idx.overlaps([1, 2, 3], ["unknown"]) == {}


def test_remove_clear_and_worker_removal() -> None:
    idx = KvIndex()
    idx.store("w1", (1, 2, 3))
    idx.store("w2", (1, 2, 3))
    idx.remove("w1", (2,))
    assert idx.overlaps([1, 2, 3]) == {"w1": 1, "w2": 3}
    idx.clear("w2")
    assert idx.overlaps([1, 2, 3]) == {"w1": 1}
    assert idx.blocks_of("w2") == 0
    idx.remove_worker("w1")
    assert len(idx) == 0 and idx.workers == ["w2"]
    # A slot freed by a departed worker is reused without leaking its old blocks.
    idx.store("w3", (7,))
    assert idx.overlaps([7]) == {"w3": 1}
    assert idx.holders(7) == {"w3"}


def test_remove_of_unknown_block_or_worker_is_harmless() -> None:
    idx = KvIndex()
    idx.apply("w1", BlockRemoved(block_hashes=(5,)))
    idx.store("w1", (1,))
    idx.apply("w1", BlockRemoved(block_hashes=(5,)))
    idx.remove("w2", (1,))
    assert idx.overlaps([1]) == {"w1": 1}


def _reference(model: dict[str, set[int]], hashes: list[int]) -> dict[str, int]:
    out = {}
    for w, held in model.items():
        n = 0
        for h in hashes:
            if h not in held:
                break
            n += 1
        if n:
            out[w] = n
    return out


events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["store", "remove", "clear", "drop"]),
        st.lists(st.integers(0, 12), max_size=6),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(events, st.lists(st.integers(0, 12), max_size=10))
def test_index_matches_a_naive_model(evs, prompt) -> None:
    idx = KvIndex()
    model: dict[str, set[int]] = {}
    for worker, kind, hashes in evs:
        if kind == "store":
            idx.store(worker, hashes)
            model.setdefault(worker, set()).update(hashes)
        elif kind == "remove":
            idx.remove(worker, hashes)
            model.get(worker, set()).difference_update(hashes)
        elif kind == "clear":
            idx.clear(worker)
            model.get(worker, set()).clear()
        else:
            idx.remove_worker(worker)
            model.pop(worker, None)
    assert idx.overlaps(prompt) == _reference(model, prompt)
    for w, held in model.items():
        assert idx.blocks_of(w) == len(held)
    assert len(idx) == len(set().union(*model.values())) if model else len(idx) == 0
