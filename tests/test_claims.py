"""The claims ledger: its data, its expression language, verdicts that flip when the figures cross
each row's criterion, and its evaluation on a real smoke run."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from harness.core import ledger as ledger_module
from harness.core import stats, store
from harness.experiments import registry
from harness.experiments.fastapi import analysis as fastapi_analysis
from harness.judging import claims

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Unit conversions a derived seed value may use beside the sentence's own numbers (ms per s, us per s).
CONVERSIONS = {1000.0, 1000000.0}
LEDGER = claims.load()
JUDGED_ROWS = LEDGER[(LEDGER["kind"] == "measurement") & (LEDGER["comparison"] != "absolute")]


@pytest.fixture(scope="module")
def ledger():
    return LEDGER


def test_ledger_is_well_formed(ledger):
    assert set(ledger["document"]) == set(claims.DOCUMENTS)
    for doc in claims.DOCUMENTS:  # every seed has judged rows
        assert (JUDGED_ROWS["document"] == doc).any(), doc
    for row in ledger.itertuples():
        assert row.claim_id.startswith(f"{row.document}-"), row.claim_id
        assert row.sentence.strip(), row.claim_id
        if row.kind != "context":
            assert row.role in claims.ROLES, row.claim_id
            assert claims.refs(row.a), f"{row.claim_id}: a reads no metric or parameter"
    # one row per seed figure: no two judged rows compare the same figures
    pairs = JUDGED_ROWS[["a", "b"]].apply(lambda r: tuple(sorted((r.a, r.b))), axis=1)
    dup = pairs[pairs.duplicated(keep=False)]
    assert dup.empty, f"rows compare the same figures: {JUDGED_ROWS.loc[dup.index, 'claim_id'].tolist()}"


def test_one_threshold_per_seed_statement(ledger):
    """Rows of the same kind of figure against a fixed threshold use one threshold (the 'about 200%
    CPU' sentences all read as 'more than one core')."""
    cpu = ledger[(ledger["comparison"] == "ratio") & (ledger["b"] == "") & ledger["a"].str.contains(
        "threads_psycopg.cpu_pct")]
    assert len(cpu) == 3 and cpu["reference"].nunique() == 1


def test_a_seed_near_no_difference_must_be_an_equivalence_row(tmp_path):
    """Issue 35: a ratio row whose seed number lies within 15% of 1 cannot be told from no
    difference by a band: the ledger refuses it as a ratio row, naming it."""
    import csv

    with open(ledger_module.LEDGER_PATH, newline="") as f:
        rows = list(csv.DictReader(f))
    row = next(r for r in rows if r["comparison"] == "ratio" and r["reference"] in ("", "1")
               and r["direction"] == ">" and r["seed_value"])
    row["seed_value"] = "1.1"
    path = tmp_path / "ledger.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(claims.ExpressionError, match=f"{row['claim_id']}.*equivalence claim"):
        claims.load(path)


def test_load_rejects_a_bad_row(tmp_path):
    bad = LEDGER.copy().astype(object)
    i = bad.index[bad["comparison"] == "ratio"][0]
    bad.at[i, "direction"] = "up"
    path = tmp_path / "ledger.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(claims.ExpressionError, match="direction"):
        claims.load(path)


def _derived(unit: str) -> str | None:
    """The arithmetic after ';' in a unit like 'x (a / b; 113.4 / 48.8)'."""
    m = re.search(r";\s*([0-9.()*/+\- ]+)\)\s*$", unit)
    return m.group(1) if m else None


def test_seed_values_come_from_the_sentences(ledger):
    """The ledger holds the seeds' numbers only: a seed value is a number of its sentence, or the
    arithmetic its unit shows, over numbers of the sentence (and unit conversions) only."""
    for row in ledger.itertuples():
        if row.kind == "context" or math.isnan(row.seed_value):
            continue
        numbers = {float(n) for n in _NUMBER.findall(row.sentence.replace(",", ""))}
        expr = _derived(row.seed_unit)
        if expr is None:
            assert row.seed_value in numbers, (f"{row.claim_id}: seed value {row.seed_value} is not a number "
                                               f"of its sentence {row.sentence!r}")
            continue
        used = {float(n) for n in _NUMBER.findall(expr)}
        assert used <= numbers | CONVERSIONS, f"{row.claim_id}: {used - numbers} not in the sentence"
        value = claims.parse(expr, ()).evaluate(lambda name: None)
        assert row.seed_value == pytest.approx(value, rel=1e-3), row.claim_id


def test_expression_language_rejects_anything_but_arithmetic():
    for bad in ['__import__("os").system("true")', "{a.b}.real", "value ** 2", "unknown > 1",
                '"text" == 1', "[1][0]", "lambda: 1", "{not a name} > 1", "value if 1 else 2", ""]:
        with pytest.raises(claims.ExpressionError):
            claims.parse(bad)
    e = claims.parse("0.5 <= ratio <= 2 and {x.y.max_ms} > max(1, {param:x.n.min})")
    assert e.refs == ("x.y.max_ms", "param:x.n.min")


def test_a_single_figure_and_the_experiments_an_expression_reads():
    from harness.core import ledger, pooling

    assert ledger.single_ref(" {pg_models.bound.pool20.rps} ") == "pg_models.bound.pool20.rps"
    for not_one in ("{a.b.c} / {a.b.d}", "2 * {a.b.c}", "", None):
        assert ledger.single_ref(not_one) is None, not_one
    row = {"a": "{pg_models.slow.pool20.rps} / {param:pg_ceiling.clients}", "b": "{mongo_pool.bare.p50_ms}"}
    assert pooling.experiments_read(row) == ("mongo_pool", "pg_ceiling", "pg_models")


# -- verdicts on synthetic per-repeat figures -------------------------------------------------------

# 8 repeats: enough for a row judged on the count of repeats (8 of 8 on one side: sign test p = 1/256)
SMALL = np.array([0.01, -0.01, 0.005, -0.005, 0.0, 0.002, -0.002, 0.001])   # log noise: a tight interval
# an interval wide enough to include anything near
LARGE = np.array([0.4, -0.4, 0.3, -0.3, 0.0, 0.2, -0.2, 0.0])


def _matching_label(premise: str) -> str:
    """A bottleneck label under which the premise holds."""
    p = claims.parse_premise(premise)
    return "synthetic" if p is None or p.negate else p.labels[0]


def _failing_label(premise: str) -> str:
    p = claims.parse_premise(premise)
    return p.labels[0] if p.negate else "synthetic"


def _synthetic_run(tmp_path) -> store.Run:
    """A run directory with a manifest and no experiment: the figures come in as a C1 frame."""
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({"format_version": store.FORMAT_VERSION, "run_id": "synthetic",
                                                 "status": "complete", "experiments": {}, "servers": {}}))
    return store.Run(d)


def _frame(run: store.Run, row: pd.Series, ratio: float, noise: np.ndarray,
           bottleneck: str | list[str] | None = None, below: str | None = None) -> pd.DataFrame:
    """Per-repeat figures for every metric the row reads such that a_k / b_k = ratio * exp(noise_k),
    each labelled with a bottleneck (by default one under which the row's premise holds; a list
    gives one label per repeat), and the figures its premise names: those of its thresholds just
    above their threshold, but figure `below` (or all of them, for `one of`, if it is one of them)
    under it."""
    (a_name,) = claims.refs(row["a"])
    b_names = claims.refs(row["b"])
    premise = claims.parse_premise(row.get("premise") or "")
    if bottleneck is None:
        bottleneck = _matching_label(row.get("premise") or "")
    labels = bottleneck if isinstance(bottleneck, list) else [bottleneck] * len(noise)
    recs = []

    def put(name, k, v):
        exp, _, rest = name.partition(".")
        recs.append({"experiment": exp, "variant": "", "metric": rest, "unit": "", "repeat": k, "value": v,
                     "better": "", "bottleneck": labels[k]})

    for k in range(len(noise)):
        for n in b_names:
            put(n, k, 100.0 * (1 + 0.01 * k))
        for n in (premise.scope if premise else ()):
            if n != a_name and n not in b_names:
                put(n, k, 1.0)
        for t in (premise.thresholds if premise else ()):
            for n in t.figures:
                fails = n == below or (t.any_of and below in t.figures)
                put(n, k, t.at_least - 0.2 if fails else t.at_least + 0.05)
    partial = pd.DataFrame(recs)
    b = claims.per_repeat(run, claims.by_repeat(partial), row["b"]) if row["b"] else {k: 1.0 for k in range(len(noise))}
    for k, e in enumerate(noise):
        put(a_name, k, ratio * b[k] * math.exp(e))
    return pd.DataFrame(recs)


def _evaluate(tmp_path, row: pd.Series, ratio: float, noise=SMALL, bottleneck=None, below=None) -> pd.Series:
    run = _synthetic_run(tmp_path)
    ev = claims.evaluate(run, frame=_frame(run, row, ratio, noise, bottleneck, below),
                         ledger=LEDGER[LEDGER["claim_id"] == row["claim_id"]])
    return ev.iloc[0]


def _verdict(tmp_path, row: pd.Series, ratio: float, noise=SMALL, bottleneck=None, below=None) -> str:
    return _evaluate(tmp_path, row, ratio, noise, bottleneck, below)["verdict"]


def _cases(row: pd.Series) -> list[tuple[float, np.ndarray, str]]:
    ref = row["reference"]
    if row["comparison"] == "equivalence":
        m = 1 + row["margin"]
        return [(ref, SMALL, claims.EQUIVALENT), (ref * m ** 3, SMALL, claims.NOT_REPRODUCED),
                (ref / m ** 3, SMALL, claims.NOT_REPRODUCED), (ref, LARGE, claims.INCONCLUSIVE)]
    up = row["direction"] == ">"
    has_band = not math.isnan(row["band_low"])
    inside = math.sqrt(row["band_low"] * row["band_high"]) if has_band else (ref * 3 if up else ref / 3)
    # a row with no seed number has no band: the direction at best
    cases = [(inside, SMALL, claims.REPRODUCED if has_band else claims.DIRECTION_NO_FIGURE),
             (ref / 3 if up else ref * 3, SMALL, claims.NOT_REPRODUCED), (ref, LARGE, claims.INCONCLUSIVE)]
    if has_band:
        beyond = row["band_high"] * 3 if up else row["band_low"] / 3
        cases.append((beyond, SMALL, claims.SIZE_NOT_REPRODUCED))
        if ref == 1.0:   # an effect row: significant, in the seed's direction, but short of the band
            short = math.sqrt(ref * row["band_low"]) if up else math.sqrt(ref * row["band_high"])
            cases.append((short, SMALL, claims.SIZE_NOT_REPRODUCED))
    return cases


@pytest.mark.parametrize("claim_id", JUDGED_ROWS["claim_id"].tolist())
def test_every_judged_row_flips_with_its_figures(tmp_path, claim_id):
    row = LEDGER.set_index("claim_id").loc[claim_id].copy()
    row["claim_id"] = claim_id
    seen = set()
    for ratio, noise, expected in _cases(row):
        got = _verdict(tmp_path, row, ratio, noise)
        assert got == expected, f"{claim_id}: a / b = {ratio:.4g} (noise {noise.tolist()}): {got}, expected {expected}"
        seen.add(got)
    assert len(seen) >= 3
    premise = claims.parse_premise(row["premise"] or "")
    if premise is not None and premise.labels:  # the figures that reproduce the row, under another bottleneck
        ratio, noise, expected = _cases(row)[0]
        got = _verdict(tmp_path, row, ratio, noise, bottleneck=_failing_label(row["premise"]))
        assert got == claims.PREMISE_NOT_MET, f"{claim_id}: premise {row['premise']!r} not met, yet {got}"
    for figure in (premise.figures() if premise is not None else ()):   # each figure below its threshold
        ratio, noise, expected = _cases(row)[0]
        got = _verdict(tmp_path, row, ratio, noise, below=figure)
        assert got == claims.PREMISE_NOT_MET, f"{claim_id}: {figure} below its threshold, yet {got}"


def test_the_pool_sameness_rows_need_the_pool_reached():
    """Every row that says the pool decides (throughput at the pool bound, the models the same)
    carries a positive premise on the measured pool bound, never on a figure it tests."""
    sameness = [f"002-{regime}-{k}" for regime in ("slow20", "bound20") for k in ("01", "04", "07", "10", "15")]
    for claim_id in sameness:
        premise = claims.parse_premise(_row(claim_id)["premise"])
        assert premise is not None and premise.thresholds, claim_id
        (t,) = premise.thresholds
        assert t.at_least == 0.9 and all(f.endswith(".pool_bound_frac") for f in t.figures), claim_id
        assert t.any_of == claim_id.endswith("-15"), claim_id
        assert not set(t.figures) & set(claims.refs(f"{_row(claim_id)['a']} {_row(claim_id)['b']}")), claim_id


def test_one_model_below_the_pool_bound_reads_premise_not_met(tmp_path):
    """002-slow20-01 (threads at the pool bound) in repeats where one of the other models stays
    below 0.9 of its bound: the pool is not shown deciding, so the row reads `premise not met`,
    naming that model, and not a verdict; with every other model there, it is judged."""
    row = LEDGER.set_index("claim_id").loc["002-slow20-01"].copy()
    row["claim_id"] = "002-slow20-01"
    other = "pg_models.slow.pool20.asyncio_asyncpg.pool_bound_frac"
    got = _evaluate(tmp_path, row, row["reference"], below=other)
    assert got["verdict"] == claims.PREMISE_NOT_MET
    assert "asyncio_asyncpg's pool_bound_frac below 0.9 in 8" in got["reason"], got["reason"]
    assert _verdict(tmp_path, row, row["reference"]) == claims.EQUIVALENT


def test_absolute_rows_are_never_judged(tmp_path):
    rows = LEDGER[(LEDGER["kind"] == "measurement") & (LEDGER["comparison"] == "absolute")]
    assert len(rows)
    for _, row in rows.iterrows():
        assert _verdict(tmp_path, row, 1.0) == claims.NOT_COMPARABLE


def test_a_shown_figure_of_zero_keeps_its_estimate():
    """A shown share can be exactly 0 (the longest stall with no wait for a core, 001-cursor-07):
    no log, so the arithmetic mean, not a NaN (a clean-clone CI run failed on that NaN)."""
    row = _row("001-cursor-07")
    one = claims.judge(row, np.array([0.0]))
    assert one["verdict"] == claims.NOT_COMPARABLE and one["estimate"] == 0.0
    some = claims.judge(row, np.array([0.0, 0.2, 0.4]))
    assert some["estimate"] == pytest.approx(0.2) and some["method"].startswith("arithmetic")
    assert some["ci_low"] < 0.2 < some["ci_high"]
    assert claims.judge(row, np.array([2.0, 8.0]))["estimate"] == pytest.approx(4.0)   # geometric when it can


def test_one_repeat_gives_no_verdict_but_inconclusive(tmp_path):
    row = JUDGED_ROWS[JUDGED_ROWS["comparison"] == "ratio"].iloc[0]
    assert _verdict(tmp_path, row, 1000.0, np.array([0.0])) == claims.INCONCLUSIVE


def _row(claim_id: str) -> pd.Series:
    row = LEDGER.set_index("claim_id").loc[claim_id].copy()
    row["claim_id"] = claim_id
    return row


# -- issue 22: the verdict rules --------------------------------------------------------------------

def test_a_zero_width_interval_is_never_decisive(tmp_path):
    """Every repeat equal: a zero-width interval, no p-value, no verdict (issue 22, point 2)."""
    for claim_id in ("000-rps-01", "001-pool-07"):   # a ratio row and an equivalence row
        row = _row(claim_id)
        r = _evaluate(tmp_path, row, math.sqrt(row["band_low"] * row["band_high"]) if claim_id == "000-rps-01"
                      else 1.0, np.zeros(8))
        assert r["verdict_raw"] == claims.INCONCLUSIVE and r["verdict"] == claims.INCONCLUSIVE, claim_id
        assert r["ci_low"] == r["ci_high"] and "zero-width" in r["reason"], claim_id
    assert stats.log_ratio_summary(np.zeros(5))["zero_width"]
    assert math.isnan(stats.log_ratio_summary(np.zeros(5))["p_greater"])
    assert stats.tost(np.zeros(5), 0.15)["equivalent"] is False


def test_a_bounded_share_is_judged_on_the_count_of_repeats(tmp_path):
    """000-bottleneck-01: a busy share capped at 1, three repeats at the cap: 3 of 3 above 0.9 has an
    exact one-sided p of 0.125, so it is not decisive (it read `reproduced` on [1.0, 1.0] before)."""
    row = _row("000-bottleneck-01")
    r = _evaluate(tmp_path, row, 1.0, np.zeros(3))
    assert r["verdict"] == claims.INCONCLUSIVE and r["p_value"] == pytest.approx(0.125)
    assert "3 of 3" in r["reason"] and "sign test" in r["method"]
    assert math.isnan(r["ci_low"]) and math.isnan(r["ci_high"])   # no interval on a capped figure: the count decides
    ten = _evaluate(tmp_path, row, 1.0, np.zeros(10))   # 10 of 10 at the cap: p = 1/1024, yet no seed number
    assert ten["p_value"] == pytest.approx(1 / 1024) and ten["verdict"] == claims.DIRECTION_NO_FIGURE
    assert stats.sign_test([1.0, 1.0, 1.0], 0.9)["p_greater"] == pytest.approx(0.125)


def test_zeros_are_counted_not_dropped(tmp_path):
    """A zero has no log: the row is judged on the count of repeats past its reference, in which the
    zeros count (issue 22, point 3). Dropped, the two remaining repeats would have reproduced it."""
    row = _row("000-rps-01")
    inside = math.sqrt(row["band_low"] * row["band_high"])
    run = _synthetic_run(tmp_path)
    frame = _frame(run, row, inside, SMALL)
    a_metric = claims.refs(row["a"])[0].partition(".")[2]
    frame.loc[(frame["metric"] == a_metric) & (frame["repeat"] < 6), "value"] = 0.0
    r = claims.evaluate(run, frame=frame, ledger=LEDGER[LEDGER["claim_id"] == "000-rps-01"]).iloc[0]
    assert r["n_used"] == r["n_ran"] == 8
    assert "6 zero(s)" in r["reason"] and r["verdict"] == claims.INCONCLUSIVE
    dropped = claims.judge(row, np.array([inside, inside * 1.01]))
    assert dropped["verdict"] == claims.REPRODUCED   # what dropping the zeros would have said
    pairs = stats.paired_logs({0: 0.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 0.0, 2: 1.0})
    assert pairs["n_pairs"] == 3 and pairs["n_nonpositive"] == 2 and len(pairs["logs"]) == 1


def test_a_missing_figure_is_counted_with_its_reason(tmp_path):
    row = _row("000-rps-01")
    run = _synthetic_run(tmp_path)
    frame = _frame(run, row, math.sqrt(row["band_low"] * row["band_high"]), SMALL)
    a_metric = claims.refs(row["a"])[0].partition(".")[2]
    frame = frame[~((frame["metric"] == a_metric) & (frame["repeat"] == 3))]
    r = claims.evaluate(run, frame=frame, ledger=LEDGER[LEDGER["claim_id"] == "000-rps-01"]).iloc[0]
    assert (r["n_used"], r["n_ran"]) == (7, 8) and "repeat 3" in r["reason"]


def test_equivalence_rows_show_the_90_percent_interval_their_tost_used(tmp_path):
    from scipy import stats as sps

    row = _row("001-pool-07")
    r = _evaluate(tmp_path, row, 1.0, LARGE / 4)
    logs = LARGE / 4 + math.log(1.0)
    half = sps.t.ppf(0.95, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    assert r["ci_level"] == pytest.approx(0.90)
    assert r["ci_low"] == pytest.approx(math.exp(logs.mean() - half), rel=1e-6)
    assert r["ci_high"] == pytest.approx(math.exp(logs.mean() + half), rel=1e-6)
    assert r["verdict"] == claims.EQUIVALENT
    assert r["ci_low"] <= r["estimate"] <= r["ci_high"]


def test_holm_undoes_a_marginal_verdict():
    """Two rows, each with its two one-sided tests: Holm multiplies the smallest p by 4 and the next
    by 3, so a row decided at p = 0.03 is undone (0.09 >= 0.05), one at p = 0.001 stands."""
    ev = pd.DataFrame([
        {"claim_id": "x-01", "verdict_raw": claims.REPRODUCED, "verdict": claims.REPRODUCED, "reason": "",
         "p_value": 0.001, "p_seed": 0.001, "p_opposite": 0.999, "p_adjusted": None},
        {"claim_id": "x-02", "verdict_raw": claims.REPRODUCED, "verdict": claims.REPRODUCED, "reason": "",
         "p_value": 0.03, "p_seed": 0.03, "p_opposite": 0.97, "p_adjusted": None},
        {"claim_id": "x-03", "verdict_raw": claims.NOT_MEASURED, "verdict": claims.NOT_MEASURED, "reason": "",
         "p_value": None, "p_seed": None, "p_opposite": None, "p_adjusted": None}])
    out = claims.adjust(ev)
    assert list(out["verdict"]) == [claims.REPRODUCED, claims.INCONCLUSIVE, claims.NOT_MEASURED]
    assert list(out["verdict_raw"]) == [claims.REPRODUCED, claims.REPRODUCED, claims.NOT_MEASURED]
    assert out.at[0, "p_adjusted"] == pytest.approx(0.004) and out.at[1, "p_adjusted"] == pytest.approx(0.09)
    mc = out.attrs["multiple_comparisons"]
    assert mc["method"] == "holm" and mc["undone"] == ["x-02"] and mc["tested"] == 2 and mc["hypotheses"] == 4
    assert stats.holm([0.01, 0.04, 0.03, float("nan")])[:3] == pytest.approx([0.03, 0.06, 0.06])


def test_directional_p_values_are_one_sided_and_agree_with_the_verdict(tmp_path):
    row = _row("002-fast20-08")   # direction <
    r = _evaluate(tmp_path, row, math.sqrt(row["band_low"] * row["band_high"]), LARGE / 4)
    s = stats.log_ratio_summary(LARGE / 4 + math.log(math.sqrt(row["band_low"] * row["band_high"])),
                                confidence=claims.JUDGED_LEVEL)
    assert r["p_value"] == pytest.approx(s["p_less"]) and r["p_value"] < claims.ALPHA
    assert r["ci_high"] < 1.0 and r["ci_level"] == pytest.approx(0.90)


def test_every_band_comes_from_the_one_rule():
    """Bands are computed by ledger.band, not typed per row (issue 22, point 7)."""
    import csv

    with open(ledger_module.LEDGER_PATH, newline="") as f:
        header = next(csv.reader(f))
    assert "band_low" not in header and "band_high" not in header
    ratio = LEDGER[(LEDGER["kind"] == "measurement") & (LEDGER["comparison"] == "ratio")]
    for row in ratio.itertuples():
        low, high = ledger_module.band(row.seed_value, row.reference, row.direction)
        if math.isnan(row.seed_value):
            assert math.isnan(row.band_low) and math.isnan(row.band_high), row.claim_id
        else:
            assert (row.band_low, row.band_high) == (low, high), row.claim_id
    assert ledger_module.band(101.6, 1.0, ">") == pytest.approx((50.8, 203.2))
    assert ledger_module.band(8.6, 10.0, "<") == pytest.approx((4.3, 10.0))
    assert ledger_module.band(195, 100, ">") == pytest.approx((100.0, 390.0))   # a threshold row: its side
    # an effect row (issue 35): within a factor of 2, never nearer the null than halfway to it
    assert ledger_module.band(1.492, 1.0, ">") == pytest.approx((1.492 / 1.492 ** 0.5, 1.492 * 1.492 ** 0.5))
    assert ledger_module.band(0.6, 1.0, "<") == pytest.approx((0.6 * 0.6 ** 0.5, 0.6 / 0.6 ** 0.5))
    for row in ratio[ratio["reference"] == 1.0].itertuples():   # no effect row's band reaches the null
        if not math.isnan(row.seed_value):
            assert not row.band_low <= 1.0 <= row.band_high, row.claim_id
    with pytest.raises(claims.ExpressionError):
        ledger_module.band(0.5, 1.0, ">")   # the seed's own number on the wrong side of its reference
    by = LEDGER.set_index("claim_id")
    for cid in ("001-pool-02", "001-pool-03", "001-pool-08", "001-pool-09"):   # no invented thresholds
        assert by.at[cid, "reference"] == 1.0, cid


def test_a_row_is_judged_only_where_its_premise_held(tmp_path):
    """002-slow20-04: the seed's slow regime, in which no model was CPU-bound. Client-CPU-bound in 6
    of 10 repeats: `premise not met`, naming the bottleneck; in 4 of 10: judged on the other 6."""
    row = _row("002-slow20-04")
    noise = np.concatenate([SMALL, SMALL[:2]])
    r = _evaluate(tmp_path, row, 1.0, noise, ["client CPU"] * 6 + ["not identified"] * 4)
    assert r["verdict"] == claims.PREMISE_NOT_MET == r["verdict_raw"]
    assert "client CPU in 6" in r["reason"] and r["n_used"] == 0 and r["n_ran"] == 10
    assert "client CPU 6/10" in r["bottleneck_measured"]
    r = _evaluate(tmp_path, row, 1.0, noise, ["client CPU"] * 4 + ["not identified"] * 6)
    assert r["verdict"] == claims.EQUIVALENT and (r["n_used"], r["n_ran"]) == (6, 10)
    assert "held in 6 of 10" in r["reason"]
    # "with 50 connections the threads were CPU-bound": a premise on the threads' label, judged on rps
    limited = _row("002-slow50-01")
    assert claims.parse_premise(limited["premise"]).holds("client_cpu")
    assert _verdict(tmp_path, limited, 1.5, SMALL, "pool") == claims.PREMISE_NOT_MET
    # "the event loop was saturated" tests the loop's CPU: no premise, since the label reads that figure
    assert claims.parse_premise(_row("002-fast20-05")["premise"]) is None


def test_machine_dependent_rows_are_flagged():
    by = LEDGER.set_index("claim_id")
    flagged = set(by.index[by["machine_dependent"]])
    assert {"001-cursor-02", "001-pool-03", "001-pool-08", "001-pool-09", "001-pool-13"} <= flagged


def test_estimates_lie_inside_their_intervals(tmp_path):
    """Every row judged on an interval has a finite one around its estimate. A share capped at 1
    (`bound`) has none by design: it is judged on the count of repeats past the reference, and its
    reason gives that share's interval instead, which must be a proper one inside [0, 1]."""
    counted = []
    for claim_id in JUDGED_ROWS["claim_id"]:
        row = _row(claim_id)
        r = _evaluate(tmp_path, row, _cases(row)[0][0], LARGE)
        assert math.isfinite(r["estimate"]), claim_id
        if math.isnan(row["bound"]):
            assert math.isfinite(r["ci_low"]) and math.isfinite(r["ci_high"]), claim_id
            assert r["ci_low"] <= r["estimate"] <= r["ci_high"], claim_id
            assert r["ci_low"] < r["ci_high"], claim_id   # LARGE noise: never a zero-width interval
        else:
            assert math.isnan(r["ci_low"]) and math.isnan(r["ci_high"]), claim_id
            share = re.search(r"judged on the count, (\d+) of (\d+) .*interval \[([\d.]+), ([\d.]+)\]", r["reason"])
            assert share, f"{claim_id}: {r['reason']}"
            k, n, low, high = int(share[1]), int(share[2]), float(share[3]), float(share[4])
            assert n == len(LARGE) and 0 <= low <= k / n <= high <= 1 and low < high, (claim_id, r["reason"])
            counted.append(claim_id)
    assert counted, "no bounded row: the count branch went untested"


def test_summary_counts_each_verdict_by_seed(tmp_path):
    ev = pd.DataFrame({"document": ["001", "001", "001", "002", "002"], "kind": ["measurement"] * 4 + ["setup"],
                       "verdict": [claims.REPRODUCED, claims.REPRODUCED, claims.INCONCLUSIVE,
                                   claims.NOT_COMPARABLE, claims.SETUP_SAME]})
    t = claims.summary(ev)
    assert t.loc["001", claims.REPRODUCED] == 2 and t.loc["001", claims.INCONCLUSIVE] == 1
    assert t.loc["001", "judged"] == 3 and t.loc["002", "judged"] == 0
    assert t.loc["002", claims.NOT_COMPARABLE] == 1 and claims.SETUP_SAME not in t.columns
    assert not hasattr(claims, "chance_wrong")   # replaced by Holm's adjustment (issue 22, point 6)


# -- a real smoke run ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smoke_frame(smoke_run):
    return claims.collect_frame(smoke_run)


def test_evaluate_every_claim_on_the_smoke_run(smoke_run, smoke_frame, ledger):
    frame, errors = smoke_frame
    assert not errors, f"analysis modules failed: {errors}"
    ev = claims.evaluate(smoke_run, frame=frame)
    assert list(ev["claim_id"]) == list(ledger["claim_id"])
    for row in ev.itertuples():
        assert row.verdict in claims.STATUSES, row.claim_id
        if row.kind == "context":
            assert row.verdict == claims.CONTEXT
            continue
        if row.verdict == claims.NOT_MEASURED:
            assert row.missing, f"{row.claim_id}: not measured without saying why"
        elif row.verdict == claims.PREMISE_NOT_MET:
            assert row.reason and row.n_ran >= 1, row.claim_id
        elif row.kind == "measurement":
            assert 1 <= row.n_used <= row.n_ran, row.claim_id
            if pd.isna(row.estimate):
                # a ratio undefined (0 / 0) in every repeat used has no estimate, says so and decides
                # nothing (`stats.sign_test` counts it on neither side): at the smoke size Locust's 1 s
                # history can read 0 req/s on both sides of 000-rps-01
                assert "undefined (0 / 0)" in row.reason and row.verdict == claims.INCONCLUSIVE, row.claim_id
            else:
                # a measured zero is evidence (a capped share that was 0, judged on the count), so >= 0
                assert row.estimate >= 0, row.claim_id
            assert row.verdict in (row.verdict_raw, claims.INCONCLUSIVE), row.claim_id
        role = ledger.set_index("claim_id").at[row.claim_id, "role"]
        if role in smoke_run.manifest.get("servers", {}):  # FerretDB is never labelled MongoDB
            assert row.server == smoke_run.server_label(role)
    assert "claim_id" in claims.style(ev).to_html()


def _shape(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def test_ledger_metric_names_match_the_analysis_modules(smoke_run, smoke_frame, ledger):
    """Every metric the ledger reads has the shape of a metric an analysis module computes on the
    smoke run (sizes aside: the smoke run's `pool4` stands for the seed's `pool20`). An experiment
    the ledger reads must be registered and must have run: otherwise its rows could not be checked."""
    frame, _ = smoke_frame
    shapes = {_shape(k) for k in claims.by_repeat(frame)}
    # An open-loop rate the generator fell behind on gives no figure; its names still count as the
    # analysis' (a busy machine's send lag at smoke size is not a naming error).
    shapes |= {_shape(k) for k in fastapi_analysis.openloop_figure_names(smoke_run)}
    registered = set(registry.all_experiments())
    problems = []
    for row in ledger[ledger["kind"] != "context"].itertuples():
        for ref in claims.refs(row.a) + claims.refs(row.b):
            name = ref.removeprefix("param:")
            exp = name.split(".", 1)[0]
            if exp not in registered:
                problems.append(f"{row.claim_id}: {exp} is not registered")
            elif smoke_run.experiments.get(exp, {}).get("status") not in ("ok", "partial"):
                problems.append(f"{row.claim_id}: {exp} did not run in the smoke run")
            elif ref.startswith("param:"):
                if name.split(".")[1] not in smoke_run.experiments[exp].get("params", {}):
                    problems.append(f"{row.claim_id}: {exp} has no parameter {name.split('.')[1]}")
            elif _shape(name) not in shapes:
                problems.append(f"{row.claim_id}: no analysis module computes {ref}")
    assert not problems, "\n".join(problems)


def test_error_control_by_lesson_holm_for_primary_rows_bh_for_the_rest():
    """Issue 35: Holm over the primary rows only (one per lesson), Benjamini-Hochberg q over the
    supporting rows. A primary row at p = 0.01 among two primary rows stands (Holm: 0.04 over four
    tests); the same p among many supporting rows stands too, where Holm over all would undo it."""
    def row(cid, p, primary=""):
        return {"claim_id": cid, "verdict_raw": claims.REPRODUCED, "verdict": claims.REPRODUCED, "reason": "",
                "p_value": p, "p_seed": p, "p_opposite": 1 - p, "p_adjusted": None, "primary": primary}
    supporting = [row(f"s-{k:02d}", 0.001 * (k + 1)) for k in range(20)]
    ev = pd.DataFrame([row("lesson-a", 0.01, "a"), row("lesson-b", 0.002, "b"), *supporting])
    out = claims.adjust(ev)
    by = out.set_index("claim_id")
    assert by.at["lesson-a", "verdict"] == claims.REPRODUCED and by.at["lesson-a", "p_adjusted"] == pytest.approx(0.03)
    assert by.at["lesson-a", "error_family"] == "primary" and by.at["s-05", "error_family"] == "supporting"
    # BH over the 40 supporting tests: the k-th smallest p times 40 / k (the p_opposite sides are ~1)
    assert by.at["s-19", "p_adjusted"] == pytest.approx(0.02 * 40 / 20)
    assert by.at["s-19", "verdict"] == claims.REPRODUCED
    assert (claims.adjust(ev.drop(columns=["primary"])).set_index("claim_id").at["s-19", "verdict"]
            == claims.INCONCLUSIVE)   # Holm over all 44 tests: 0.02 x 25 >= 0.05
    mc = out.attrs["multiple_comparisons"]
    assert mc["families"]["primary"]["tested"] == 2 and mc["families"]["supporting"]["tested"] == 20
    assert mc["method"].startswith("holm (primary rows)")


def test_each_lesson_has_its_primary_row_in_the_ledger():
    from harness.judging import findings

    primary = LEDGER[LEDGER["primary"] != ""].set_index("primary")["claim_id"].to_dict()
    assert primary == {lesson.id: lesson.claims[0] for lesson in findings.LESSONS}
