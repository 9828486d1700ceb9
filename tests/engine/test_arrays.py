"""Small array helpers of the engine: what they return must equal numpy's own routines."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from formcast.engine.arrays import sorted_unique


@given(st.lists(st.integers(-5, 40), max_size=60))
def test_sorted_unique_is_numpy_unique(values):
    array = np.array(values, dtype=np.int64)
    assert np.array_equal(sorted_unique(array), np.unique(array))
