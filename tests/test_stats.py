"""The one place statistics are computed: checked against values derivable by hand."""

import numpy as np
import pandas as pd
import pytest

from harness import stats


def test_percentiles_use_linear_interpolation():
    values = np.arange(1, 101, dtype=float)  # 1..100
    p50, p90, p99, p999 = stats.percentiles(values)
    assert p50 == pytest.approx(50.5)
    assert p90 == pytest.approx(90.1)
    assert p99 == pytest.approx(99.01)
    assert p999 == pytest.approx(99.901)


def test_latency_summary_reports_milliseconds_and_handles_empty():
    s = stats.latency_summary([0.001, 0.002, 0.003])
    assert s["count"] == 3
    assert s["p50_ms"] == pytest.approx(2.0)
    assert s["max_ms"] == pytest.approx(3.0)
    assert s["min_ms"] == pytest.approx(1.0)
    empty = stats.latency_summary([])
    assert empty["count"] == 0 and np.isnan(empty["p99_ms"])


def test_completion_counts_include_tasks_that_never_completed():
    counts = stats.completion_counts([0, 0, 2], n_tasks=4)
    assert counts.tolist() == [2, 0, 1, 0]
    with pytest.raises(ValueError):
        stats.completion_counts([5], n_tasks=4)


def test_jain_index_bounds():
    assert stats.jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert stats.jain_index([10, 0, 0, 0]) == pytest.approx(0.25)
    fair = stats.fairness_summary([0, 1, 2, 3] * 3, n_tasks=4)
    assert fair["ops_per_task_min"] == fair["ops_per_task_max"] == 3


def test_spread_flags_unstable_repeats():
    stable = stats.spread([100, 101, 99])
    assert stable["n"] == 3 and not stable["unstable"]
    unstable = stats.spread([100, 150, 60])
    assert unstable["unstable"] and unstable["cv"] > stats.UNSTABLE_CV
    assert stats.spread([42.0])["std"] == 0.0


def test_throughput_and_cpu_per_op():
    assert stats.throughput(1000, 2.0) == 500
    assert stats.cpu_per_op_us(0.5, 1000) == pytest.approx(500.0)
    assert np.isnan(stats.cpu_per_op_us(0.5, 0))
    with pytest.raises(ValueError):
        stats.throughput(10, 0)


def test_summarize_samples_groups_by_variant():
    df = pd.DataFrame({"variant": ["a"] * 3 + ["b"] * 2, "latency_s": [0.001, 0.002, 0.003, 0.01, 0.02]})
    out = stats.summarize_samples(df).set_index("variant")
    assert out.loc["a", "count"] == 3 and out.loc["b", "max_ms"] == pytest.approx(20.0)


def test_hdr_histogram_agrees_with_exact_percentiles_to_three_digits():
    rng = np.random.default_rng(1)
    us = rng.integers(100, 100_000, size=20_000)
    h = stats.hdr_histogram(us)
    exact = stats.percentiles(us, [50, 99])
    hs = stats.hdr_summary(h)
    assert hs["count"] == 20_000
    assert hs["p50_ms"] * 1000 == pytest.approx(exact[0], rel=0.01)
    assert hs["p99_ms"] * 1000 == pytest.approx(exact[1], rel=0.01)
