"""harness.core.pooling (issue 34): the random-effects estimator on hand-made inputs with known
heterogeneity, the standard error recovered from a stored interval, the choice of runs, and every
committed summary read and pooled. No server is needed."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from harness.core import pooling, stats, verdicts
from harness.core.pooling import NotPoolable, lesson_inputs, pool, pooled_lessons
from harness.judging import findings

ROOT = Path(__file__).resolve().parents[1]
T = lambda df: float(sps.t.ppf(0.95, df))  # noqa: E731 -- the 90% two-sided quantile


# -- the estimator ---------------------------------------------------------------------------------

def test_identical_runs_give_no_heterogeneity_and_a_prediction_interval_close_to_the_interval():
    k = 8
    r = pool([math.log(2.0)] * k, [0.05] * k, [f"r{i}" for i in range(k)])
    assert r.pooled and r.k == k
    assert r.tau2 == pytest.approx(0.0, abs=1e-12) and r.i2 == 0.0
    assert r.estimate == pytest.approx(2.0)
    assert r.log_se == pytest.approx(0.05 / math.sqrt(k))
    assert r.log_ci == pytest.approx((math.log(2) - T(k - 1) * r.log_se, math.log(2) + T(k - 1) * r.log_se))
    # tau^2 = 0: the prediction interval differs from the interval only by t_{k-2} against t_{k-1}
    ci_half = (r.log_ci[1] - r.log_ci[0]) / 2
    pi_half = (r.log_pi[1] - r.log_pi[0]) / 2
    assert pi_half / ci_half == pytest.approx(T(k - 2) / T(k - 1))
    assert 1.0 < pi_half / ci_half < 1.05
    assert r.pi[0] < r.ci[0] < 2.0 < r.ci[1] < r.pi[1]


@pytest.mark.parametrize("method", ["pm", "dl"])
def test_runs_far_apart_widen_the_prediction_interval(method):
    ratios = np.array([2.0, 3.0, 4.5, 7.0, 10.0])
    y, se = np.log(ratios), np.full(ratios.size, 0.03)
    far = pool(y, se, method=method)
    near = pool(np.full(ratios.size, y.mean()), se, method=method)
    assert far.tau2 > 0.1 and far.i2 > 0.95
    assert near.tau2 == pytest.approx(0.0, abs=1e-12)
    width = lambda iv: iv[1] - iv[0]  # noqa: E731
    assert width(far.log_pi) > 2 * width(far.log_ci)         # PI wider than the pooled interval
    assert width(far.log_ci) > 10 * width(near.log_ci)       # the between-run spread widens both
    assert width(far.log_pi) > 10 * width(near.log_pi)
    # within-run errors negligible against the spread: tau^2 ~ the variance between runs
    assert far.tau2 == pytest.approx(np.var(y, ddof=1), rel=0.05)
    assert far.log_estimate == pytest.approx(y.mean(), abs=0.01)


def test_tau2_is_the_estimator_it_names():
    y = np.log([1.5, 2.2, 1.8, 3.0])
    se = np.array([0.05, 0.12, 0.08, 0.2])
    v, w = se ** 2, 1 / se ** 2
    q = float(np.sum(w * (y - np.sum(w * y) / w.sum()) ** 2))
    dl = pool(y, se, method="dl")
    assert dl.method == "DerSimonian-Laird"
    assert dl.q == pytest.approx(q)
    assert dl.tau2 == pytest.approx((q - 3) / (w.sum() - np.sum(w ** 2) / w.sum()))
    assert dl.i2 == pytest.approx((q - 3) / q)
    pm = pool(y, se, method="pm")
    assert pm.method == "Paule-Mandel" and not pm.notes
    wr = 1 / (v + pm.tau2)
    mu = np.sum(wr * y) / wr.sum()
    assert np.sum(wr * (y - mu) ** 2) == pytest.approx(3, abs=1e-6)    # generalised Q = k - 1
    assert pm.log_estimate == pytest.approx(mu)
    assert pm.log_se == pytest.approx(1 / math.sqrt(wr.sum()))
    assert pm.log_pi == pytest.approx((mu - T(2) * math.sqrt(pm.tau2 + pm.log_se ** 2),
                                       mu + T(2) * math.sqrt(pm.tau2 + pm.log_se ** 2)))
    assert sum(pm.weights) == pytest.approx(1.0)


def test_paule_mandel_solves_its_equation_whatever_the_spread():
    rng = np.random.default_rng(34)
    for _ in range(200):
        k = int(rng.integers(2, 8))
        y = rng.normal(0, rng.choice([0.001, 0.05, 0.5]), k)
        se = rng.uniform(0.005, 0.1, k)
        r = pool(y, se)
        if r.q > k - 1:   # heterogeneity beyond chance: tau^2 > 0 and the generalised Q is k - 1
            w = 1 / (se ** 2 + r.tau2)
            mu = np.sum(w * y) / w.sum()
            assert r.tau2 > 0 and np.sum(w * (y - mu) ** 2) == pytest.approx(k - 1, rel=1e-3)
        else:
            assert r.tau2 == 0.0


def test_the_root_finding_fallback_agrees_with_statsmodels():
    from statsmodels.stats.meta_analysis import combine_effects

    y, se = np.log([16.0, 9.0, 8.0, 11.0]), np.array([0.016, 0.012, 0.02, 0.03])
    assert pooling._solve_pm(y, se ** 2) == pytest.approx(combine_effects(y, se ** 2, method_re="pm").tau2, rel=1e-4)
    assert pooling._solve_pm(np.zeros(3), np.full(3, 0.01)) == 0.0


def test_dl_below_zero_is_truncated_to_the_fixed_effect_model():
    y, se = np.log([2.0, 2.01, 1.99]), np.array([0.1, 0.1, 0.1])
    r = pool(y, se, method="dl")
    assert r.tau2 == 0.0 and r.i2 == 0.0
    assert r.log_estimate == pytest.approx(y.mean())
    assert r.log_se == pytest.approx(0.1 / math.sqrt(3))     # never narrower than the fixed-effect one
    assert any("truncated" in n for n in r.notes)


def test_two_runs_give_no_prediction_interval_and_say_why():
    r = pool(np.log([7.85, 11.0]), [0.03, 0.05], ["1f2a", "7af0"])
    assert r.pooled and r.k == 2
    assert r.log_pi is None and r.pi is None
    assert "at least 3" in r.pi_reason and "2 boots" in r.pi_reason
    assert r.ci[0] < 7.85 < 11.0 < r.ci[1]


def test_one_run_is_that_run_not_pooled():
    r = pool([math.log(7.85)], [0.03], ["1f2a"], dfs=[9])
    assert not r.pooled and r.k == 1 and r.method == "single run"
    assert r.tau2 is None and r.i2 is None and r.log_pi is None
    assert "not pooled" in r.pi_reason
    assert r.estimate == pytest.approx(7.85)
    assert r.log_ci == pytest.approx((math.log(7.85) - T(9) * 0.03, math.log(7.85) + T(9) * 0.03))


@pytest.mark.parametrize("bad", [([], []), ([1.0], [0.0]), ([1.0, math.nan], [0.1, 0.1]), ([1.0, 2.0], [0.1])])
def test_pool_refuses_what_it_cannot_pool(bad):
    with pytest.raises(ValueError):
        pool(*bad)


# -- one run's contribution ------------------------------------------------------------------------

def _ratio_row(claim_id: str, logs, level=0.90, **extra) -> dict:
    s = stats.log_ratio_summary(logs, confidence=level)
    return {"claim_id": claim_id, "kind": "measurement", "comparison": "ratio", "estimate": s["ratio"],
            "ci_low": s["ci_low"], "ci_high": s["ci_high"], "ci_level": level, "n_used": s["n"], "n_ran": s["n"],
            "method": "geometric mean, t-interval on log", "verdict": "direction only", "direction": ">",
            "reference": 1.0, "band_low": 55.0, "band_high": 220.0, "margin": None, "bound": None,
            "a": "{mongo_pool.bare.max_ms}", "b": "{mongo_pool.semaphore.max_ms}", **extra}


@pytest.mark.parametrize("level", [0.90, 0.95])
def test_the_standard_error_recovered_from_a_stored_interval_reproduces_it(level):
    logs = np.log([7.1, 8.3, 7.9, 8.8, 7.4, 8.0, 7.7, 8.6, 7.2, 8.1])
    row = _ratio_row("001-pool-13", logs, level)
    y, se = lesson_inputs({"summary_version": 2, "claims": [row]}, "001-pool-13")
    assert y == pytest.approx(logs.mean())
    assert se == pytest.approx(logs.std(ddof=1) / math.sqrt(logs.size))
    assert pooling.interval_from(y, se, row["n_used"], level) == pytest.approx((row["ci_low"], row["ci_high"]))


def test_equivalence_rows_invert_the_tost_interval():
    logs = np.log([0.97, 1.02, 0.99, 1.05, 0.95])
    t = stats.tost(logs, 0.15)
    row = {"claim_id": "e", "comparison": "equivalence", "estimate": math.exp(logs.mean()), "ci_low": t["ci90_low"],
           "ci_high": t["ci90_high"], "ci_level": 0.9, "n_used": 5, "method": "geometric mean; TOST, 90% t-interval",
           "verdict": "equivalent", "margin": 0.15, "reference": 1.0}
    y, se = lesson_inputs({"summary_version": 2, "claims": [row]}, "e")
    assert se == pytest.approx(logs.std(ddof=1) / math.sqrt(5))


def test_a_version_1_row_is_read_at_95_percent():
    logs = np.log([16.0, 17.5, 18.2, 16.4, 17.0])
    s = stats.log_ratio_summary(logs)            # version 1 stored the 95% interval, as `value` and `n`
    row = {"claim_id": "x", "comparison": "ratio", "value": s["ratio"], "ci_low": s["ci_low"],
           "ci_high": s["ci_high"], "n": 5, "verdict": "direction only"}
    y, se = lesson_inputs({"summary_version": 1, "claims": [row]}, "x")
    assert se == pytest.approx(logs.std(ddof=1) / math.sqrt(5))
    upgraded = {"summary_version": 2, "upgraded_from": 1,     # as harness.core.store.upgrade_summary gives it
                "claims": [{**row, "estimate": s["ratio"], "n_used": 5, "ci_level": 0.95}]}
    assert lesson_inputs(upgraded, "x") == pytest.approx((y, se))


@pytest.mark.parametrize("change, why", [
    ({"ci_low": None, "ci_high": None, "n_used": 1}, "no interval"),
    ({"method": "median; exact sign test on the count past the reference", "ci_low": None}, "counts"),
    ({"estimate": None, "verdict": "premise not met"}, "premise not met"),
])
def test_rows_without_an_interval_are_not_poolable(change, why):
    row = {**_ratio_row("r", np.log([2.0, 2.2, 2.1])), **change}
    with pytest.raises(NotPoolable, match=why):
        lesson_inputs({"summary_version": 2, "claims": [row]}, "r")


def test_a_zero_width_interval_is_not_poolable():
    row = _ratio_row("r", np.log([2.0, 2.0, 2.0]))
    with pytest.raises(NotPoolable, match="zero-width"):
        lesson_inputs({"summary_version": 2, "claims": [row]}, "r")


# -- a verdict across runs -------------------------------------------------------------------------

@pytest.mark.parametrize("ci, verdict", [
    ((60.0, 90.0), "reproduced"), ((7.0, 16.0), "size not reproduced"), ((0.8, 16.0), "inconclusive"),
    ((0.5, 0.9), "not reproduced")])
def test_the_pooled_verdict_follows_the_single_run_band_rule(ci, verdict):
    row = {"comparison": "ratio", "direction": ">", "reference": 1.0, "band_low": 55.0, "band_high": 220.0}
    assert pooling.pooled_verdict(row, (math.log(ci[0]), math.log(ci[1]))) == verdict
    no_figure = {**row, "band_low": None, "band_high": None}
    assert pooling.pooled_verdict(no_figure, (math.log(7.0), math.log(16.0))) == "direction, no seed figure"


# -- which runs pool -------------------------------------------------------------------------------

def _summary(run_id: str, ratio: float, sd: float = 0.05, version: int = 2, verdict: str = "direction only"):
    rng = np.random.default_rng(int(ratio * 1000) + ord(run_id[0]))
    logs = math.log(ratio) + sd * rng.standard_normal(10)
    row = _ratio_row("001-pool-13", logs, 0.90 if version == 2 else 0.95, verdict=verdict)
    return {"summary_version": version, "run_id": run_id, "claims": [row]}


def test_pooled_lessons_pools_the_runs_of_one_version_and_rules_each_boot_once():
    runs = [
        pooling.RunRecord("20261201T000000Z-full-aaaa", "boot-1", _summary("a", 17.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261201T010000Z-full-bbbb", "boot-1", _summary("b", 16.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261201T020000Z-full-cccc", "boot-2", _summary("c", 9.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261201T030000Z-full-dddd", "boot-3", _summary("d", 8.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261130T040000Z-full-eeee", "boot-4", _summary("e", 11.0), {"mongo_pool": "v0"}),
        pooling.RunRecord("20261201T050000Z-full-ffff", None, _summary("f", 11.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261130T060000Z-quick-abcd", "boot-5", _summary("g", 3.0), {"mongo_pool": "v1"}),
        pooling.RunRecord("20261201T070000Z-full-0123", "boot-6", _summary("h", 2.0), {"mongo_pool": "v1",
                                                                                          "other": "x"}),
    ]
    runs[-1].summary["claims"][0]["verdict"] = "not measured in this run"
    runs[-1].summary["claims"][0]["estimate"] = None
    df = pooled_lessons(runs, ["001-pool-13", "no-such-row"])
    r = df.iloc[0]
    assert r["runs"] == ("20261201T000000Z-full-aaaa", "20261201T010000Z-full-bbbb", "20261201T020000Z-full-cccc",
                         "20261201T030000Z-full-dddd")
    # boot-1's two runs make one estimate: three boots, four runs
    assert r["k"] == 3 and r["n_runs"] == 4 and r["pooled"] and r["pi_low"] is not None
    assert r["dropped_same_boot"] == 0 and r["run_df"] == 1
    assert r["dropped_other_key"] == 2             # e: another experiment version; g: the quick profile
    assert r["dropped_no_boot"] == 1               # f
    assert r["key"] == ("full", 2, "{mongo_pool.bare.max_ms}", "{mongo_pool.semaphore.max_ms}", "",
                        (("mongo_pool", "v1"),))
    # the pooled interval, judged by the band rule, lies below the band: size not reproduced, which each
    # run's `direction only` (the word before issue 35) covered; the runs' own word is said beside it
    assert r["verdict"] == "size not reproduced"
    assert r["agree_text"] == "4 of 4 runs agree (aaaa, bbbb, cccc, dddd: direction only)" and r["disagreement"] == ""
    assert [p["run_id"][-4:] for p in r["per_run"]] == ["aaaa", "bbbb", "cccc", "dddd"]
    assert sum(p["weight"] for p in r["per_run"]) == pytest.approx(1.0)
    weights = [p["weight"] for p in r["per_run"]]
    assert weights[0] == pytest.approx(weights[1])      # a boot's weight split evenly between its runs
    assert r["tau2"] > 0 and r["pi_high"] - r["pi_low"] > r["ci_high"] - r["ci_low"]
    empty = df.iloc[1]
    assert empty["k"] == 0 and pd.isna(empty["estimate"]) and "no run" in empty["pi_reason"]
    # by rules only, the other version pools too; plain (run_id, boot_id, summary) tuples are accepted
    loose = pooled_lessons([(r.run_id, r.boot_id, r.summary) for r in runs], ["001-pool-13"], match="rules")
    assert loose.iloc[0]["k"] == 4 and loose.iloc[0]["n_runs"] == 5


# -- runs of one boot ------------------------------------------------------------------------------

def test_the_spread_between_runs_of_a_boot_is_found_beyond_their_own_noise():
    """Simulated: 400 boots of 3 runs, each run's estimate = its boot's value + a run effect (sd 0.10)
    + its repeats' error (se 0.05). The moment estimator recovers sigma_run, not sigma_run plus the
    repeats' noise, and not the boots' spread."""
    rng = np.random.default_rng(7)
    boots = []
    for _ in range(400):
        boot = rng.normal(0.0, 0.5)
        boots.append([(boot + rng.normal(0, 0.10) + rng.normal(0, 0.05), 0.05) for _ in range(3)])
    sigma2, df = pooling.within_boot_variance(boots)
    assert df == 800
    assert math.sqrt(sigma2) == pytest.approx(0.10, rel=0.08)
    # runs that agree within their own noise: no spread between them (truncated at 0, never negative)
    quiet = [[(rng.normal(0, 0.05), 0.05) for _ in range(2)] for _ in range(200)]
    assert pooling.within_boot_variance(quiet)[0] < 0.02 ** 2
    assert pooling.within_boot_variance([[(0.0, 0.1), (0.0, 0.1)]]) == (0.0, 1)
    # one run per boot: nothing to estimate it from
    assert pooling.within_boot_variance([[(0.1, 0.05)], [(0.3, 0.05)]]) == (0.0, 0)


def test_a_boots_estimate_is_its_runs_plain_mean_with_both_levels_in_its_standard_error():
    y, se = pooling.boot_mean([(math.log(10.0), 0.02), (math.log(20.0), 0.20)], sigma2_run=0.01)
    assert y == pytest.approx((math.log(10.0) + math.log(20.0)) / 2)     # not pulled to the precise run
    assert se == pytest.approx(math.sqrt(0.01 + 0.02 ** 2 + 0.01 + 0.20 ** 2) / 2)
    assert pooling.boot_mean([(0.5, 0.1)], 0.04) == pytest.approx((0.5, math.sqrt(0.04 + 0.01)))
    with pytest.raises(ValueError):
        pooling.boot_mean([], 0.0)


def _nested(spec):
    """RunRecords from (letter, ratio, boot) triples, one version, hours apart in the given order."""
    return [pooling.RunRecord(f"20261201T{i:02d}0000Z-full-{c * 4}", f"boot-{b}", _summary(c, ratio, sd=0.03),
                              {"mongo_pool": "v1"}) for i, (c, ratio, b) in enumerate(spec)]


def test_one_run_more_on_a_boot_moves_its_estimate_not_the_boots_count():
    """Before 5 December the newest run of a boot replaced its older ones: a run on a boot already
    pooled swapped that boot's figure wholesale. Now it joins its boot's mean."""
    base = _nested([("a", 10.0, 1), ("b", 14.0, 2), ("c", 20.0, 3)])
    more = base + [pooling.RunRecord("20261201T090000Z-full-dddd", "boot-3", _summary("d", 30.0, sd=0.03),
                                     {"mongo_pool": "v1"})]
    before = pooled_lessons(base, ["001-pool-13"]).iloc[0]
    after = pooled_lessons(more, ["001-pool-13"]).iloc[0]
    assert (before["k"], before["n_runs"], after["k"], after["n_runs"]) == (3, 3, 3, 4)
    assert before["run_df"] == 0 and before["sigma2_run"] == 0.0
    # boot 3's estimate is now the mean of 20 and 30 (log scale), not 30
    boot3 = math.exp((math.log(20.0) + math.log(30.0)) / 2)
    assert after["estimate"] == pytest.approx(math.exp((math.log(10) + math.log(14) + math.log(boot3)) / 3), rel=0.03)
    # the two runs of boot 3 differ far beyond their own noise: sigma_run ~ |log(30/20)| / sqrt(2)
    assert after["run_df"] == 1 and math.sqrt(after["sigma2_run"]) == pytest.approx(math.log(1.5) / math.sqrt(2),
                                                                                    rel=0.1)
    assert "runs of one boot spread" in " ".join(after["notes"])
    # and a new run's range widens by it
    assert after["log_pi_high"] - after["log_pi_low"] > after["log_ci_high"] - after["log_ci_low"]


def test_with_one_run_per_boot_the_pooling_is_the_one_run_per_boot_model():
    runs = _nested([("a", 10.0, 1), ("b", 14.0, 2), ("c", 20.0, 3)])
    r = pooled_lessons(runs, ["001-pool-13"]).iloc[0]
    inputs = [lesson_inputs(x.summary, "001-pool-13") for x in runs]
    # a new run's range adds a typical run's own sampling variance: the median of the runs' se^2
    plain = pool([y for y, _ in inputs], [s for _, s in inputs],
                 new_run_var=float(np.median([s ** 2 for _, s in inputs])))
    assert r["new_run_se"] ** 2 == pytest.approx(float(np.median([s ** 2 for _, s in inputs])), rel=1e-12)
    assert r["log_estimate"] == pytest.approx(plain.log_estimate, rel=1e-12)
    assert (r["log_ci_low"], r["log_ci_high"]) == pytest.approx(plain.log_ci, rel=1e-12)
    assert (r["log_pi_low"], r["log_pi_high"]) == pytest.approx(plain.log_pi, rel=1e-12)


def test_one_boot_of_several_runs_shows_its_newest_run():
    runs = _nested([("a", 10.0, 1), ("b", 14.0, 1)])
    r = pooled_lessons(runs, ["001-pool-13"]).iloc[0]
    assert r["k"] == 1 and not r["pooled"] and r["runs"] == ("20261201T010000Z-full-bbbb",)
    assert r["dropped_same_boot"] == 1 and r["estimate"] == pytest.approx(14.0, rel=0.05)


def _runs(*words: str) -> dict[str, str]:
    return {f"20261201T00000{i}Z-full-{c * 4}": w for i, (c, w) in enumerate(zip("abcdef", words))}


def test_runs_agree_when_they_say_what_the_pooled_verdict_says_not_merely_its_class():
    assert pooling.agreement("reproduced", _runs("reproduced", "reproduced")) == (2, "2 of 2 runs agree")
    # a pooled interval of few runs can reach the band each run's own missed (001-bulk over f1b4, 4beb and
    # b875: two runs `size not reproduced`, pooled `reproduced`): the size is what they disagree on, so
    # they do not count as agreeing, and each is named with its word
    assert (pooling.agreement("reproduced", _runs("size not reproduced", "size not reproduced", "reproduced"))
            == (1, "1 of 3 runs agree (aaaa, bbbb: size not reproduced)"))
    assert (pooling.agreement("not reproduced", _runs("not reproduced", "reproduced", "inconclusive"))
            == (1, "1 of 3 runs agree (bbbb: reproduced; cccc: inconclusive)"))
    # `direction only` (before issue 35) covered both `size not reproduced` and `direction, no seed figure`,
    # never `reproduced`
    assert (pooling.agreement("size not reproduced", _runs("direction only", "size not reproduced"))
            == (2, "2 of 2 runs agree (aaaa: direction only)"))
    assert pooling.agreement("direction, no seed figure", _runs("direction only"))[0] == 1
    assert pooling.agreement("reproduced", _runs("direction only"))[0] == 0
    assert pooling.says_the_same("size not reproduced", "direction only")
    assert not pooling.says_the_same("size not reproduced", "direction, no seed figure")


def test_runs_of_one_class_that_differ_on_the_size_are_said_to_disagree():
    runs = [(f"2026120{i}T000000Z-full-{c * 4}", f"b{i}", _summary(c, ratio, sd=0.03, verdict=v))
            for i, (c, ratio, v) in enumerate([("a", 30.0, "size not reproduced"), ("b", 36.0, "size not reproduced"),
                                               ("c", 60.0, "reproduced")], start=1)]
    r = pooled_lessons(runs, ["001-pool-13"]).iloc[0]
    assert r["k"] == 3
    assert "disagree" in r["disagreement"] and "cccc reproduced (holds)" in r["disagreement"]
    assert r["agree_text"].startswith(f"{r['agree']} of 3 runs agree (")


def test_rules_versions_do_not_mix_and_disagreement_is_said():
    runs = [("20261130T000000Z-full-aaaa", "b1", _summary("a", 17.0, version=1)),
            ("20261201T000000Z-full-bbbb", "b2", _summary("b", 8.0, verdict="direction only")),
            ("20261202T000000Z-full-cccc", "b3", _summary("c", 1.02, sd=0.2, verdict="inconclusive"))]
    r = pooled_lessons(runs, ["001-pool-13"]).iloc[0]
    assert r["k"] == 2 and r["dropped_other_key"] == 1 and r["pi_low"] is None
    assert "at least 3" in r["pi_reason"]
    assert "disagree" in r["disagreement"] and "bbbb direction only (holds)" in r["disagreement"]
    # two runs give no verdict across them: each run's own is said instead
    assert r["verdict"] == verdicts.TOO_FEW_BOOTS and r["agree"] is None
    assert r["agree_text"] == "each run: bbbb direction only; cccc inconclusive"


def test_two_runs_get_no_verdict_across_them_where_three_do():
    """Each run's interval lies below the band (size not reproduced); two runs' pooled interval, at
    t_1 = 6.31, would reach the band and read `reproduced` (001-bulk with f1b4 and 851b). A third run
    narrows it, and the band rule decides."""
    def run(c, ratio, boot):
        return (f"2026120{boot}T000000Z-full-{c * 4}", f"b{boot}",
                _summary(c, ratio, sd=0.03, verdict="size not reproduced"))

    two = [run("a", 30.0, 1), run("b", 45.0, 2)]
    for _, _, s in two:
        assert s["claims"][0]["ci_high"] < 55.0             # each run: below the band
    r = pooled_lessons(two, ["001-pool-13"]).iloc[0]
    assert r["k"] == 2 and r["pooled"] and r["ci_high"] > 55.0
    assert pooling.pooled_verdict(two[0][2]["claims"][0], (r["log_ci_low"], r["log_ci_high"])) == "reproduced"
    assert r["verdict"] == verdicts.TOO_FEW_BOOTS and r["agree"] is None
    assert r["agree_text"] == "both runs: size not reproduced"
    three = pooled_lessons(two + [run("c", 36.0, 3)], ["001-pool-13"]).iloc[0]
    assert three["k"] == 3 and three["ci_high"] < 55.0
    assert three["verdict"] == "size not reproduced" and three["agree_text"] == "3 of 3 runs agree"


def test_a_single_run_is_shown_as_that_run():
    s = _summary("a", 7.85)
    r = pooled_lessons([("20261201T000000Z-full-aaaa", "b1", s)], ["001-pool-13"]).iloc[0]
    row = s["claims"][0]
    assert r["k"] == 1 and not r["pooled"] and r["method"] == "single run"
    assert (r["estimate"], r["ci_low"], r["ci_high"]) == pytest.approx((row["estimate"], row["ci_low"], row["ci_high"]))
    assert r["verdict"] == row["verdict"] and r["tau2"] is None and "not pooled" in r["pi_reason"]


# -- every committed summary -----------------------------------------------------------------------

def _committed_dirs() -> list[Path]:
    return sorted(p for sub in ("history", "reference") for p in (ROOT / "data" / sub).iterdir() if p.is_dir())


@pytest.mark.parametrize("run_dir", _committed_dirs(), ids=lambda p: p.name)
def test_every_committed_summary_is_read(run_dir):
    run = pooling.read_run(run_dir)        # fails on a summary or manifest it cannot read
    assert run.summary.get("claims"), f"{run_dir.name}: no claims rows"
    for row in run.summary["claims"]:
        try:
            y, se = lesson_inputs(run.summary, row["claim_id"])
        except NotPoolable:
            continue
        assert math.isfinite(y) and se > 0
        got = pooling.row_input(run.summary, row["claim_id"])      # the round trip on the stored interval
        assert pooling.interval_from(y, se, got.n, got.level) == pytest.approx((row["ci_low"], row["ci_high"]),
                                                                              rel=1e-9)


@pytest.mark.parametrize("match", pooling.MATCHES)
def test_pooled_lessons_runs_over_every_committed_summary(match):
    runs = pooling.committed_runs(ROOT)
    assert len(runs) == len(_committed_dirs())
    ids = sorted({r["claim_id"] for run in runs for r in run.summary["claims"]})
    df = pooled_lessons(runs, ids, match=match)
    assert list(df["claim_id"]) == ids and list(df.columns) == list(pooling.COLUMNS)
    got = df[df["k"] > 0]
    assert len(got) > 40
    assert (got["ci_low"] <= got["estimate"]).all() and (got["estimate"] <= got["ci_high"]).all()
    with_pi = got[got["k"] >= 3]
    assert (with_pi["pi_low"] <= with_pi["ci_low"]).all() and (with_pi["ci_high"] <= with_pi["pi_high"]).all()
    assert got[got["k"] < 3]["pi_low"].isna().all()


def test_a_redefined_row_does_not_pool_with_its_old_definition():
    """A row whose figures the ledger redefined (001-cursor-02: wall-clock stall, then own CPU) is
    another measurement: runs of the old definition are left out, counted."""
    old = _summary("a", 17.0)
    old["claims"][0]["a"] = "{mongo_pool.bare.p99_ms}"
    runs = [("20261201T000000Z-full-aaaa", "b1", old), ("20261202T000000Z-full-bbbb", "b2", _summary("b", 16.0)),
            ("20261203T000000Z-full-cccc", "b3", _summary("c", 15.0))]
    r = pooled_lessons(runs, ["001-pool-13"], match="rules").iloc[0]
    assert r["k"] == 2 and r["dropped_other_key"] == 1 and "aaaa" not in " ".join(r["runs"])


def test_a_run_already_read_makes_the_same_record_as_its_directory():
    run_dir = _committed_dirs()[-1]
    from harness.core import store
    summary, manifest = store.load_summary(run_dir), store.load_manifest(run_dir)
    assert pooling.record(summary, manifest, run_dir.name) == pooling.read_run(run_dir)


# -- the forest plot (harness.reading.forest) -------------------------------------------------------

def test_a_forest_plot_draws_each_run_the_pooled_diamond_and_the_prediction_interval():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.reading import forest

    runs = [(f"2026120{i}T000000Z-full-{c * 4}", f"b{i}", _summary(c, est))
            for i, (c, est) in enumerate((("a", 7.9), ("b", 11.0), ("c", 17.1)), 1)]
    pooled = pooled_lessons(runs, ["001-pool-13"]).iloc[0].to_dict()
    row = {**runs[0][2]["claims"][0], "band_low": 55.0, "band_high": 220.0}
    fig, ax = plt.subplots()
    forest.draw(ax, pooled, row, "001-pool")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:3] == ["aaaa (90%, n=10)", "bbbb (90%, n=10)", "cccc (90%, n=10)"]
    assert labels[3:] == ["pooled, 3 machines", "a new run (90%)"]
    assert ax.get_xscale() == "log" and pooled["verdict"] in ax.get_xlabel()
    assert forest.band_of(row) == (55.0, 220.0)
    assert forest.band_of({"comparison": "equivalence", "margin": 0.15, "reference": 1.0}) == \
        pytest.approx((1 / 1.15, 1.15))
    assert forest.band_of({"comparison": "ratio"}) is None
    fig2, empty = plt.subplots()
    forest.draw(empty, None, None, "002-cpu")
    assert not empty.axison and "no run gives an interval" in [t.get_text() for t in empty.texts]
    # one run pooled, a run of the same versions without an interval: the caption names it
    fig3, one = plt.subplots()
    forest.draw(one, {**pooled, "pooled": False, "per_run": pooled["per_run"][:1],
                      "not_poolable": {"20261204T000000Z-full-dddd": "no estimate (premise not met)"}}, row, "x")
    assert one.get_xlabel().replace("\n", " ") == ("one run: its own interval; dddd: no estimate (premise not "
                                                     "met)")
    plt.close(fig)
    plt.close(fig2)
    plt.close(fig3)


def test_a_newest_run_without_an_interval_is_not_replaced_by_older_runs_of_other_code():
    """The newest run measured the row but met no premise: older runs of another version do not
    stand in for it (the README's pooled column would name a run of other code)."""
    unmet = _summary("n", 8.0)
    unmet["claims"][0].update(verdict="premise not met", estimate=None, ci_low=None, ci_high=None, n_used=0)
    runs = [pooling.RunRecord("20261201T000000Z-full-aaaa", "boot-1", _summary("a", 9.0), {"mongo_pool": "v1"}),
            pooling.RunRecord("20261201T010000Z-full-bbbb", "boot-2", _summary("b", 8.0), {"mongo_pool": "v1"}),
            pooling.RunRecord("20261203T000000Z-full-cccc", "boot-3", unmet, {"mongo_pool": "v2"})]
    r = pooled_lessons(runs, ["001-pool-13"]).iloc[0]
    assert r["k"] == 0 and r["dropped_other_key"] == 2 and "nothing to pool" in r["pi_reason"]
    assert "20261203T000000Z-full-cccc" in r["not_poolable"]
    # the reader is told why nothing pools: what the runs of that key said
    assert r["pi_reason"].endswith("premise not met in 1 of the 1 runs of these experiment versions and rules (1 boot)")
    assert "premise not met in 1 of the 1 runs" in findings.pooled_text(r)
    older = pooled_lessons(runs[:2], ["001-pool-13"]).iloc[0]
    assert older["k"] == 2 and older["pooled"]       # without the newer run, the two pool as before


def test_history_prints_two_boots_without_a_range_and_three_with_one():
    """`harness history --lessons` reads the pooled frame, where a missing prediction interval is NaN,
    not None: two boots once printed "a new run: nan to nan"."""
    from harness.reading import history

    def run(c, ratio, boot):
        return (f"2026120{boot}T000000Z-full-{c * 4}", f"b{boot}",
                _summary(c, ratio, sd=0.03, verdict="size not reproduced"))

    two = pooled_lessons([run("a", 30.0, 1), run("b", 45.0, 2)], ["001-pool-13"]).to_dict("records")[0]
    # in a frame where another lesson has a range, the column is float and this row's is NaN
    (line,) = history.pooled_lines({**two, "pi_low": math.nan, "pi_high": math.nan})
    assert "nan" not in line and "a new run:" not in line
    assert "over 2 machines" in line and "need 3 machines; both runs: size not reproduced" in line
    three = pooled_lessons([run("a", 30.0, 1), run("b", 45.0, 2), run("c", 36.0, 3)],
                           ["001-pool-13"]).to_dict("records")[0]
    (line,) = history.pooled_lines(three)
    assert "over 3 machines" in line and "a new run: " in line and "nan" not in line
    assert line.endswith("size not reproduced, 3 of 3 runs agree")


def test_a_lesson_no_run_gives_an_interval_for_says_what_its_runs_said():
    reason = pooling.no_interval_reason([("boot-1", "premise not met"), ("boot-1", "premise not met"),
                                         ("boot-2", "premise not met"), ("boot-3", "not measured")])
    assert reason == ("nothing to pool: premise not met in 3, not measured in 1 of the 4 runs of these "
                      "experiment versions and rules (3 boots)")
    assert pooling.no_interval_reason([]) == "no run of the newest run's key gives an interval for this row"


def test_an_arithmetic_mean_interval_is_not_pooled_on_the_log_scale():
    """A repeat that gave zero leaves the figure an arithmetic mean with a linear t-interval (001-cursor-07
    in 91e7: 0.089 [0.005, 0.172]); read as a log interval it would get a wrong standard error."""
    s = _summary("a", 0.0886)
    s["claims"][0].update(method="arithmetic mean, t-interval", ci_low=0.005, ci_high=0.172, ci_level=0.95)
    with pytest.raises(NotPoolable, match="arithmetic-mean"):
        lesson_inputs(s, "001-pool-13")


# Lessons whose pool cannot be checked yet: 002-pool's primary row gained a positive premise (the
# pool bound reached), so only runs judged under it pool, and the runs judged before pool apart.
RESTARTED = {"002-pool"}


def test_a_new_runs_range_holds_the_committed_runs_left_out_one_at_a_time():
    """Each lesson's 90% range for a new run, checked on the committed runs it pools (the README's
    pool: the newest versions and rules), each run left out in turn against the range the others
    give with that run's own noise: at least 85% inside, for every lesson with three runs to leave
    out (all but RESTARTED). Left out of the range, a run's own noise is what made 001-cursor's range
    miss 10 of its 26 runs."""
    from harness.core.pooling import committed_runs, leave_one_out
    from harness.judging import findings

    runs = committed_runs()
    unchecked = set()
    for lesson in findings.LESSONS:
        got = leave_one_out(runs, lesson.claims[0])
        if got["checked"] < 3:
            unchecked.add(lesson.id)
            continue
        assert got["coverage"] >= 0.85, got
    assert unchecked <= RESTARTED, unchecked
    narrow = leave_one_out(runs, "001-cursor-02", own_noise=False)
    assert narrow["coverage"] < 0.85, narrow


def test_a_row_whose_premise_changed_pools_apart():
    """A row's premise is part of its definition: a run that judged it under another premise is
    another row, as one with other figures is."""
    old = _summary("a", 17.0)
    new = copy.deepcopy(old)
    for c in new["claims"]:
        c["premise"] = "not client CPU; at least 0.9 of {x.y.pool_bound_frac}"
    a = pooling.RunRecord("20261201T000000Z-full-aaaa", "boot-1", old, {"mongo_pool": "v1"})
    b = pooling.RunRecord("20261202T000000Z-full-bbbb", "boot-2", new, {"mongo_pool": "v1"})
    row_a, row_b = old["claims"][0], new["claims"][0]
    assert pooling._key(a, row_a, "version") != pooling._key(b, row_b, "version")
    assert pooling._key(a, row_a, "profile") == pooling._key(b, row_b, "profile")
