"""The one place statistics are computed: checked against values derivable by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from harness.core import stats


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
    unstable = stats.spread([100, 150, 60, 120, 80])
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


# -- across repeats (scipy.stats) -------------------------------------------------------------------

def test_summarise_gives_a_t_interval_on_the_log():
    from scipy import stats as sps

    values = [100.0, 110.0, 90.0, 105.0]
    s = stats.summarise(values)
    logs = np.log(values)
    half = sps.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    assert s["n"] == 4 and s["median"] == pytest.approx(102.5)
    assert s["ci_low"] == pytest.approx(np.exp(logs.mean() - half))
    assert s["ci_high"] == pytest.approx(np.exp(logs.mean() + half))
    assert s["cv"] == pytest.approx(np.std(values, ddof=1) / np.mean(values))


def test_stability_needs_five_repeats_and_a_cv_of_ten_percent():
    noisy = [100, 150, 60, 120, 80]
    assert stats.summarise(noisy)["unstable"]
    few = stats.summarise(noisy[:3])
    assert not few["unstable"] and few["stability"].startswith(stats.TOO_FEW)
    steady = stats.summarise([100, 101, 99, 100, 102])
    assert not steady["unstable"] and "stable" in steady["stability"]
    assert stats.spread(noisy[:3])["unstable"] is False   # the old helper follows the same rule
    assert stats.spread(noisy)["unstable"] is True


def test_summarise_without_a_log_falls_back_to_the_arithmetic_interval():
    s = stats.summarise([0.0, 1.0, 2.0])
    assert s["method"].startswith("arithmetic") and s["ci_low"] < 1.0 < s["ci_high"]
    assert stats.summarise([])["n"] == 0


def test_paired_ratio_pairs_by_repeat():
    # drift shared by both sides within a repeat cancels in the paired ratio
    a = {0: 200.0, 1: 400.0, 2: 300.0, 3: 250.0}
    b = {0: 100.0, 1: 200.0, 2: 150.0, 3: 125.0, 9: 1.0}  # repeat 9 has no partner: ignored
    r = stats.paired_ratio(a, b)
    assert r["n"] == 4 and r["ratio"] == pytest.approx(2.0)
    assert r["ci_low"] == pytest.approx(2.0) and r["ci_high"] == pytest.approx(2.0)
    # every repeat equal: a zero-width interval is no test (issue 22): no p-value, flagged
    assert r["zero_width"] and np.isnan(r["p_value"]) and np.isnan(r["p_greater"])
    noisy = stats.paired_ratio([2.0, 2.2, 1.8], [1.0, 1.0, 1.0])
    assert noisy["ci_low"] < 2.0 < noisy["ci_high"] and noisy["detectable_ratio"] > 1.0
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0, 2.0], [1.0])


def test_pairs_without_a_log_are_counted_not_dropped_silently():
    r = stats.paired_ratio({0: 2.0, 1: 0.0, 2: 4.0, 3: 3.0}, {0: 1.0, 1: 1.0, 2: 0.0, 3: float("nan")})
    assert r["n"] == 1 and r["n_pairs"] == 3 and r["n_nonpositive"] == 2 and r["n_undefined"] == 1


def test_one_sided_p_values_match_the_interval():
    from scipy import stats as sps

    logs = np.log([1.10, 1.05, 1.12, 1.02, 1.08])
    r = stats.log_ratio_summary(logs, confidence=0.90)
    t = logs.mean() / (logs.std(ddof=1) / np.sqrt(5))
    assert r["p_greater"] == pytest.approx(sps.t.sf(t, 4)) and r["p_less"] == pytest.approx(sps.t.cdf(t, 4))
    assert r["p_value"] == pytest.approx(2 * min(r["p_greater"], r["p_less"]))
    assert (r["p_greater"] < 0.05) == (r["ci_low"] > 1.0)   # one-sided 5% <=> the 90% interval clears 1


def test_sign_test_counts_repeats_with_exact_binomial_p_values():
    s = stats.sign_test([1.0, 1.0, 1.0], 0.9)
    assert (s["above"], s["below"]) == (3, 0) and s["p_greater"] == pytest.approx(0.125)
    assert s["p_less"] == pytest.approx(1.0) and s["share_low"] > 0 and s["share_high"] == 1.0
    z = stats.sign_test([0.0, 0.0, 2.0, 3.0, 0.0, float("nan")], 1.0)   # zeros count below, NaN on neither side
    assert (z["n"], z["above"], z["below"]) == (6, 2, 3)
    assert z["p_less"] == pytest.approx(sum(math.comb(6, k) for k in range(3, 7)) / 64)


def test_holm_adjusts_by_hand_and_never_lowers_a_p_value():
    raw = [0.01, 0.04, 0.03, 0.005]
    adj = stats.holm(raw)
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 -> max(0.04, 0.06) = 0.06
    assert adj.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert all(a >= r for a, r in zip(adj, raw))
    assert np.isnan(stats.holm([float("nan"), 0.01])[0]) and stats.holm([float("nan"), 0.01])[1] == 0.01


def test_the_estimate_is_the_centre_of_its_interval_not_the_median():
    """The median may lie outside the interval of the geometric mean; the estimate never does."""
    values = [1.0] * 5 + [2.0] * 4
    s = stats.summarise(values)
    assert s["estimate"] == pytest.approx(np.exp(np.mean(np.log(values))))
    assert s["ci_low"] <= s["estimate"] <= s["ci_high"]
    assert s["median"] == 1.0 and s["median"] < s["ci_low"]
    rng = np.random.default_rng(3)
    for _ in range(50):
        x = rng.lognormal(0, 1, size=int(rng.integers(2, 8)))
        s = stats.summarise(x)
        assert s["ci_low"] <= s["estimate"] <= s["ci_high"]


def test_detectable_effect_shrinks_with_more_repeats():
    assert stats.detectable_log_effect(0.1, 10) < stats.detectable_log_effect(0.1, 3)
    assert np.isnan(stats.detectable_log_effect(0.1, 1))


def test_tost_equivalence_inside_the_margin_only():
    tight = np.log([1.01, 0.99, 1.0, 1.02, 0.98])
    assert stats.tost(tight, 0.1)["equivalent"]
    shifted = np.log([1.3, 1.31, 1.29, 1.3, 1.32])
    assert not stats.tost(shifted, 0.1)["equivalent"]
    wide = np.log([1.3, 0.7, 1.2, 0.8, 1.0])
    assert not stats.tost(wide, 0.1)["equivalent"]
    with pytest.raises(ValueError):
        stats.tost(tight, 0.0)
    assert stats.tost(shifted, 0.1)["p_outside"] < 0.05   # the 90% interval lies wholly above the margin
    assert stats.tost(tight, 0.1)["p_outside"] > 0.5
    assert stats.tost(tight, 0.1)["confidence"] == pytest.approx(0.90)


def test_failures_are_censored_at_the_timeout_not_dropped():
    ok = [0.010] * 90
    dropped = stats.latency_summary(ok)
    censored = stats.censored_latency_summary(ok, failed=10, timeout_s=5.0)
    assert censored["count"] == 100 and censored["failed"] == 10 and censored["failed_pct"] == 10.0
    assert censored["p99_ms"] == pytest.approx(5000.0) and dropped["p99_ms"] == pytest.approx(10.0)
    assert censored["censored"] and censored["censored_from_pct"] == pytest.approx(90.0)
    counted = stats.censored_latency_summary(ok, failed=10)   # failures counted, latency unknown
    assert counted["count"] == 90 and counted["failed"] == 10 and not counted["censored"]


# -- closed-loop windows: latency without the window-edge selection -------------------------------

def test_edge_weights_undo_the_chance_of_lying_inside_the_window():
    assert stats.edge_weights([0.0, 0.5, 1.0, 1.5], 2.0).tolist() == [1.0, pytest.approx(4 / 3), 2.0, 4.0]
    with pytest.raises(ValueError):
        stats.edge_weights([2.0], 2.0)      # as long as the window: never wholly inside it
    with pytest.raises(ValueError):
        stats.edge_weights([0.1], 0.0)


def test_weighted_percentiles_count_each_value_its_weight_times():
    values, weights = np.array([3.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0])
    qs = [10.0, 25.0, 50.0, 75.0, 99.0]
    repeated = np.percentile([1.0, 2.0, 3.0, 3.0], qs, method="inverted_cdf")
    assert stats.weighted_percentiles(values, weights, qs).tolist() == repeated.tolist()
    assert np.isnan(stats.weighted_percentiles([], [], [50.0])).all()
    with pytest.raises(ValueError):
        stats.weighted_percentiles([1.0, 2.0], [1.0])


def test_weighted_mean_and_its_standard_error():
    x = np.array([1.0, 2.0, 3.0, 6.0])
    mean, se = stats.weighted_mean(x, np.ones(4))
    assert mean == pytest.approx(3.0) and se == pytest.approx(x.std() / 2)
    mean, _ = stats.weighted_mean([1.0, 3.0], [3.0, 1.0])
    assert mean == pytest.approx(1.5)
    assert all(math.isnan(v) for v in stats.weighted_mean([], []))


def test_window_latency_summary_weighs_long_requests_up():
    lat = [0.1, 0.1, 1.5]
    s = stats.window_latency_summary(lat, window_s=2.0)   # weights 2/1.9, 2/1.9, 4
    w = np.array([2 / 1.9, 2 / 1.9, 4.0])
    assert s["mean_ms"] == pytest.approx(1000 * (w @ lat) / w.sum())
    assert s["mean_ms"] > stats.latency_summary(lat)["mean_ms"]
    assert s["p50_ms"] == pytest.approx(1500.0)   # 1.5 s holds 4 / 6.1 of the weight (plain: 100 ms)
    assert stats.latency_summary(lat)["p50_ms"] == pytest.approx(100.0)
    assert s["count"] == 3 and s["max_ms"] == pytest.approx(1500.0) and s["weight_max"] == pytest.approx(4.0)
    empty = stats.window_latency_summary([], 2.0)
    assert empty["count"] == 0 and math.isnan(empty["mean_ms"]) and math.isnan(empty["mean_se_ms"])


def closed_loop_windows(seed: int, clients: int = 200, mean_s: float = 0.1, sigma: float = 1.0,
                        window_s: float = 2.0, windows: int = 15, warmup_s: float = 5.0) -> pd.DataFrame:
    """A known closed loop: `clients` clients each sending requests back to back (no think time), iid
    lognormal latencies of mean `mean_s` (sigma 1: cv^2 = 1.72, the heavy tail of asyncpg's unfair
    pool in the reference run, cv^2 0.6-1.9), cut into windows of `window_s` as pg_workload cuts
    them: throughput counts the requests that END inside, the latency samples are those that start
    AND end inside. Per window: Little's law ratio (mean latency over clients / throughput) from the
    plain and the edge-weighted mean, and the weighted mean's relative standard error."""
    rng = np.random.default_rng(seed)
    horizon = warmup_s + windows * window_s
    lat = rng.lognormal(math.log(mean_s) - sigma ** 2 / 2, sigma, size=(clients, int(3 * horizon / mean_s)))
    ends = np.cumsum(lat, axis=1)
    starts = ends - lat
    assert (ends[:, -1] > horizon).all()
    rows = []
    for i in range(windows):
        open_at = warmup_s + i * window_s
        close_at = open_at + window_s
        predicted = clients / (((ends >= open_at) & (ends <= close_at)).sum() / window_s)
        inside = lat[(starts >= open_at) & (ends <= close_at)]
        mean, se = stats.weighted_mean(inside, stats.edge_weights(inside, window_s))
        rows.append({"plain": inside.mean() / predicted, "weighted": mean / predicted, "rel_se": se / mean})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_edge_weights_make_a_heavy_tailed_closed_loop_obey_littles_law(seed):
    """The window keeps a request of latency L with probability (T - L) / T, so the plain mean of a
    heavy-tailed closed loop falls ~9% short of Little's law's N / X (as asyncpg's did, 0.89-0.94);
    weighted by T / (T - L) it meets the law: the median window within 0.97-1.03, and every window
    within the analysis' per-window tolerance (0.03 + 1.96 relative standard errors)."""
    t = closed_loop_windows(seed)
    tolerance = 0.03 + 1.96 * t["rel_se"]
    assert t["plain"].median() < 0.94 and ((t["plain"] - 1).abs() > tolerance).mean() > 0.5, t
    assert 0.97 <= t["weighted"].median() <= 1.03, t
    assert ((t["weighted"] - 1).abs() <= tolerance).all(), t
