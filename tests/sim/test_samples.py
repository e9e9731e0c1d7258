"""The simulator's inter-token gaps: single samples plus gaps shared by k requests, sorted as one sample set."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdserve.sim.metrics import _dist, sorted_samples

gaps = st.lists(st.floats(1e-4, 0.2, allow_nan=False), max_size=60)


@settings(max_examples=200, deadline=None)
@given(single=gaps, repeats=st.dictionaries(st.integers(2, 6), gaps, max_size=4))
def test_sorted_samples_is_every_sample_sorted(single: list[float], repeats: dict[int, list[float]]) -> None:
    expanded = list(single) + [g for k, gs in repeats.items() for g in gs for _ in range(k)]
    got = sorted_samples(single, repeats)
    assert got.tolist() == sorted(expanded)
    # and the summary of it is the summary of the expanded samples (the mean sums the same sorted array)
    assert _dist(got) == _dist(np.array(expanded))
