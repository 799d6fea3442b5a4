"""One rule per question about a number (harness/core/num.py), as compare, show, history, claims and
findings all read them."""

import math

import numpy as np

from harness.core import num


def test_known_is_any_value_but_none_and_nan():
    assert [num.known(v) for v in (None, math.nan, np.float64("nan"))] == [False, False, False]
    assert all(num.known(v) for v in (0, 0.0, math.inf, True, False, "x", np.float64(2.5)))


def test_finite_is_a_real_finite_number_never_a_bool_or_a_text():
    assert num.finite(3) == 3.0 and num.finite(np.int64(3)) == 3.0 and num.finite(np.float64(0.5)) == 0.5
    for v in (None, math.nan, math.inf, -math.inf, True, False, np.bool_(True), "3", [1]):
        assert num.finite(v) is None, v


def test_sig3_prints_three_significant_figures_thousands_separated():
    assert [num.sig3(v) for v in (72000.4, 1000, 11.34, 0.04213)] == ["72,000", "1,000", "11.3", "0.0421"]
