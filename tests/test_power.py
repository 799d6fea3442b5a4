"""Repeats set by power (issue 35, item 3): the rule on hand-made spreads, the plan on hand-made
summaries with known intervals, and the committed table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from harness.core import pooling, power
from harness.core.errors import HarnessError
from harness.judging import claims, findings
from harness.reading import power as power_report


def test_repeats_follow_the_spread_and_the_distance():
    """The smallest n whose 90% half-width t(n-1) sd / sqrt(n) is at most half the distance."""
    n = power.repeats_for(0.10, 0.20)
    assert power.half_width(0.10, n) <= 0.10 < power.half_width(0.10, n - 1)
    assert power.repeats_for(0.20, 0.20) > n          # noisier: more repeats
    assert power.repeats_for(0.10, 0.40) < n          # farther from the edge: fewer
    assert power.repeats_for(0.10, 0.0) is None       # on the edge: no n decides it
    assert power.repeats_for(1.0, 0.01) is None       # beyond any budget (N_MAX)
    assert power.repeats_for(0.0, 0.1) == 2


def test_edges_are_where_the_verdict_changes():
    ratio = {"comparison": "ratio", "reference": 1.0, "band_low": 1.22, "band_high": 1.82}
    assert power.edges(ratio) == [1.0, 1.22, 1.82]
    assert power.distance_to_edge(ratio, math.log(1.4)) == pytest.approx(math.log(1.4 / 1.22))
    assert power.distance_to_edge(ratio, math.log(1.7)) == pytest.approx(math.log(1.82 / 1.7))
    equivalence = {"comparison": "equivalence", "reference": 1.0, "margin": 0.15}
    assert power.edges(equivalence) == pytest.approx([1 / 1.15, 1.15])
    assert power.edges({"comparison": "absolute"}) == []
    no_figure = {"comparison": "ratio", "reference": 1.0, "band_low": None, "band_high": None}
    assert power.edges(no_figure) == [1.0]


def _summary(claim_id: str, ratio: float, sd: float, n: int, a: str = "{x.a}") -> dict:
    se = sd / math.sqrt(n)
    half = float(sps.t.ppf(0.95, n - 1)) * se
    return {"summary_version": 4, "claims": [{
        "claim_id": claim_id, "kind": "measurement", "comparison": "ratio", "a": a, "b": "",
        "estimate": ratio, "ci_low": ratio * math.exp(-half), "ci_high": ratio * math.exp(half), "ci_level": 0.90,
        "n_used": n, "method": "geometric mean, t-interval on log", "verdict": "reproduced"}]}


def test_the_plan_reads_the_runs_spread_and_holds_the_null_to_holm_s_level():
    """`needed` is set by the null at the level Holm decides at, not by the band's edge (which only
    chooses between two decisive words): a row whose band edge is nearer than its null plans from
    the null, and a stricter level asks for more repeats."""
    runs = [pooling.RunRecord(f"2026120{k}T000000Z-full-000{k}", f"boot-{k}", _summary("x-01", r, 0.2, 5), {})
            for k, r in enumerate((1.45, 1.55, 1.50))]
    row = {"claim_id": "x-01", "comparison": "ratio", "reference": 1.0, "band_low": 1.4, "band_high": 2.4,
           "a": "{x.a}", "b": ""}
    level = power.decision_level(24)
    got = power.plan(runs, {"x-01": row}, {"x-01": 5}, level).iloc[0]
    assert got["runs"] == 3 and got["estimate"] == pytest.approx(1.5)
    assert got["sd_log"] == pytest.approx(0.2)                         # se * sqrt(n), exactly
    assert got["distance_log"] == pytest.approx(math.log(1.5))          # to the null, not to 1.4
    assert got["nearest_edge"] == 1.0 and got["band_edge"] == 1.4
    assert got["needed"] == power.repeats_for(0.2, math.log(1.5), level)
    assert got["needed"] > power.repeats_for(0.2, math.log(1.5))        # Holm's level asks for more
    assert got["band_repeats"] == power.repeats_for(0.2, math.log(1.5 / 1.4))
    assert got["band_repeats"] > got["needed"]                           # ... and the band does not set it
    assert got["enough"] == (5 >= got["needed"]) and str(got["needed"]) in got["note"]
    on_edge = power.plan(runs, {"x-01": {**row, "reference": 1.5}}, {"x-01": 5}, level).iloc[0]
    assert on_edge["needed"] is None and "on or too near its edge" in on_edge["note"]
    none = power.plan([], {"x-01": row}, {"x-01": 5}).iloc[0]
    assert none["runs"] == 0 and "no committed run" in none["note"]


def test_the_band_word_a_run_reads_is_forecast_from_the_spread_between_runs():
    """A row whose runs lie below the band's lower edge, spread between runs: the likelier word is
    `size not reproduced`, its predicted share is the normal share beyond the edge moved out by a
    run's half-width, and the committed runs that read it are counted from their own intervals. Far
    from the edge the share nears 1 and the note stays quiet; near it the note says either word can
    come; a band's upper edge is crossed upwards; an estimate across the null from the band gets no
    band word (it reads `not reproduced`)."""
    ratios = (14.0, 16.0, 17.0, 18.5, 20.5)
    runs = [pooling.RunRecord(f"2026120{k}T000000Z-full-000{k}", f"boot-{k}", _summary("x-01", r, 0.115, 6), {})
            for k, r in enumerate(ratios)]
    row = {"claim_id": "x-01", "comparison": "ratio", "reference": 1.0, "band_low": 19.2, "band_high": 60.0,
           "a": "{x.a}", "b": ""}
    got = power.plan(runs, {"x-01": row}, {"x-01": 6}).iloc[0]
    logs = np.log(ratios)
    half = float(sps.t.ppf(0.95, 5)) * 0.115 / math.sqrt(6)
    beyond = sps.norm.cdf((math.log(19.2) - half - np.median(logs)) / np.std(logs, ddof=1))
    assert got["band_edge"] == 19.2 and got["band_word"] == "size not reproduced"
    assert got["band_share"] == pytest.approx(beyond)
    assert 0.5 < got["band_share"] < power.STEADY_SHARE
    assert got["band_seen"] == sum(r * math.exp(half) < 19.2 for r in ratios) == 3   # 14, 16, 17
    assert "within the runs' spread" in got["note"] and "3 of 5 did" in got["note"]

    far = power.plan(runs, {"x-01": {**row, "band_low": 40.0, "band_high": 90.0}}, {"x-01": 6}).iloc[0]
    assert far["band_word"] == "size not reproduced" and far["band_share"] > 0.999 and far["band_seen"] == 5
    assert "within the runs' spread" not in far["note"]

    inside = power.plan(runs, {"x-01": {**row, "band_low": 8.0, "band_high": 14.5}}, {"x-01": 6}).iloc[0]
    assert inside["band_edge"] == 14.5                                  # the upper edge, crossed upwards
    assert inside["band_word"] == "size not reproduced"                 # most runs lie above 14.5 + h
    assert inside["band_seen"] == sum(r * math.exp(-half) > 14.5 for r in ratios)

    opposite = power.plan(runs, {"x-01": {**row, "band_low": 0.2, "band_high": 0.5}}, {"x-01": 6}).iloc[0]
    assert opposite["band_word"] == "" and math.isnan(opposite["band_edge"])   # `not reproduced`: no band word

    one_run = power.plan(runs[:1], {"x-01": row}, {"x-01": 6}).iloc[0]
    assert one_run["band_word"] == "" and math.isnan(one_run["band_share"])   # no spread between runs


def _premise_not_met(claim_id: str) -> dict:
    return {"summary_version": 4, "claims": [{
        "claim_id": claim_id, "kind": "measurement", "comparison": "ratio", "a": "{x.a}", "b": "",
        "estimate": None, "ci_low": None, "ci_high": None, "n_used": 0, "verdict": "premise not met"}]}


def test_a_premise_missed_by_the_latest_runs_is_expected_again_whatever_the_repeats():
    """Two runs gave intervals (enough repeats by their spread), the two after them did not meet the
    premise: the plan keeps the spread but says to expect `premise not met`, naming those runs. A
    later run that meets it again ends the streak."""
    row = {"claim_id": "x-01", "comparison": "ratio", "reference": 1.0, "band_low": 1.4, "band_high": 2.4,
           "a": "{x.a}", "b": ""}
    met = [pooling.RunRecord(f"2026120{k}T000000Z-full-000{k}", f"boot-{k}", _summary("x-01", 2.0, 0.1, 8), {})
           for k in (1, 2)]
    missed = [pooling.RunRecord(f"2026120{k}T000000Z-full-00a{k}", f"boot-{k}", _premise_not_met("x-01"), {})
              for k in (3, 4)]
    plain = power.plan(met, {"x-01": row}, {"x-01": 8}).iloc[0]
    assert plain["enough"] and "premise" not in plain["note"]
    got = power.plan(met + missed, {"x-01": row}, {"x-01": 8}).iloc[0]
    assert got["runs"] == 2 and got["estimate"] == pytest.approx(2.0)
    assert not got["enough"]
    assert got["note"].startswith("the premise was not met in the 2 latest run(s) that measured it (00a3, 00a4)")
    assert "; were it met: " + plain["note"] in got["note"]
    assert "expect `premise not met`" in got["note"]
    again = pooling.RunRecord("20261205T000000Z-full-0005", "boot-5", _summary("x-01", 2.0, 0.1, 8), {})
    assert power.plan(met + missed + [again], {"x-01": row}, {"x-01": 8}).iloc[0]["enough"]
    never = power.plan(missed, {"x-01": row}, {"x-01": 8}).iloc[0]
    assert never["runs"] == 0 and not never["enough"] and "no committed run" in never["note"]


def test_the_decision_level_is_holm_s_strictest_step():
    """A one-sided p below alpha / m is exactly the two-sided 1 - 2 alpha / m interval clearing the null."""
    assert power.decision_level(1) == pytest.approx(0.90)
    assert power.decision_level(24) == pytest.approx(1 - 0.1 / 24)
    n, sd, d = 6, 0.2, 0.3
    p = float(sps.t.sf(d / (sd / math.sqrt(n)), n - 1))
    tests = 24
    cleared = d > power.half_width(sd, n, power.decision_level(tests))
    assert cleared == (p < 0.05 / tests)
    assert power_report.primary_tests(claims.load()) == 24


def test_a_redefined_row_starts_afresh():
    run = pooling.RunRecord("20261201T000000Z-full-0001", "b", _summary("x-01", 1.5, 0.2, 5, a="{x.old}"), {})
    assert not power_report.same_definition(run, {"claim_id": "x-01", "a": "{x.a}", "b": ""})
    assert power_report.same_definition(run, {"claim_id": "x-01", "a": "{x.old}", "b": ""})


def test_the_committed_table_names_every_lesson_and_a_planned_count():
    table = power_report.power_table()
    assert list(table["lesson"]) == [lesson.id for lesson in findings.LESSONS]
    assert list(table["claim_id"]) == [lesson.claims[0] for lesson in findings.LESSONS]
    assert table["planned"].notna().all()
    decided = table[table["needed"].notna()]
    assert len(decided) and (decided["needed"] >= 2).all()
    assert (table["level"] == power.decision_level(power_report.primary_tests(claims.load()))).all()
    short = table[~table["enough"].astype(bool)]
    assert all("inconclusive" in note or "edge" in note or "no committed" in note or "premise not met" in note
               for note in short["note"])
    doc = power_report.POWER_DOC.read_text()
    for lesson in findings.LESSONS:
        assert f"| {lesson.id} | {lesson.claims[0]} |" in doc, lesson.id
    assert np.all([isinstance(n, str) and n for n in table["note"]])


def test_the_plan_of_one_kind_of_processor_reads_only_its_runs():
    """002-cpu's runs are two populations (docs/RESULTS.md): planned from one kind of processor at a
    time, each kind's runs forecast their own band word, and the two kinds' runs make up all."""
    both = power_report.power_table().set_index("lesson")
    intel = power_report.power_table(processor="Intel Xeon").set_index("lesson")
    amd = power_report.power_table(processor="amd").set_index("lesson")
    assert intel.loc["002-cpu", "runs"] + amd.loc["002-cpu", "runs"] == both.loc["002-cpu", "runs"]
    assert intel.loc["002-cpu", "band_word"] == "reproduced"
    assert amd.loc["002-cpu", "band_word"] == "size not reproduced"
    assert min(intel.loc["002-cpu", "band_share"], amd.loc["002-cpu", "band_share"]) > both.loc["002-cpu", "band_share"]
    with pytest.raises(HarnessError, match="no committed run on a processor matching 'arm'"):
        power_report.power_table(processor="arm")


def test_each_kind_of_processor_forecasts_its_own_word_in_the_committed_doc():
    """POWER.md's last table: the forecast over every processor's runs, then each kind's, side by
    side; a lesson with no band word in any group has no row."""
    runs = pooling.committed_runs()
    tables = power_report.by_processor(runs)
    labels = list(tables)
    assert labels[0] == power_report.ALL_PROCESSORS and len(labels) >= 3
    cpu = {label: t.set_index("lesson").loc["002-cpu"] for label, t in tables.items()}
    assert sum(int(cpu[k]["runs"]) for k in labels[1:]) == int(cpu[labels[0]]["runs"])
    assert {str(cpu[k]["band_word"]) for k in labels[1:]} == {"reproduced", "size not reproduced"}
    text = power_report.band_words_text(tables)
    assert "| 002-cpu | " in text and "| 000-mixed |" not in text and "| 001-cursor |" not in text
    doc = power_report.POWER_DOC.read_text()
    assert text in doc
    checks = power_report.forecast_checks(runs)
    assert power_report.forecast_check_text(checks) in doc
    # Every kept run after the second is checked, and the own-kind forecast is the better calibrated
    # for 002-cpu, whose runs are two populations (docs/RESULTS.md).
    cpu = {k: c[c["lesson"] == "002-cpu"] for k, c in checks.items()}
    assert all(len(c) for c in cpu.values())
    misses = {k: abs(c["hit"].sum() - c["share"].sum()) for k, c in cpu.items()}
    assert misses["from its own kind's"] < misses["from every earlier run"]


def test_the_side_by_side_forecast_shows_each_group_s_own_share_and_count():
    def group(word, share, seen, runs):
        return pd.DataFrame([{"lesson": lesson.id, "band_word": word if lesson.id == "002-cpu" else None,
                              "band_share": share, "band_seen": seen, "runs": runs} for lesson in findings.LESSONS])

    text = power_report.band_words_text({"all": group("reproduced", 0.54, 9, 21),
                                         "AMD": group("size not reproduced", 0.84, 12, 14)})
    assert text.splitlines() == ["| lesson | all | AMD |", "|---|---|---|",
                                 "| 002-cpu | `reproduced`: 54% (9 of 21) | `size not reproduced`: 84% (12 of 14) |"]


def test_each_run_is_checked_against_the_forecast_of_the_runs_before_it():
    """Two kinds of processor, alternating in time, one inside 002-cpu's band (×2.3) and one below it
    (×1.3): forecast from every earlier run, the mixture misses runs of both kinds; from the earlier
    runs of the run's own kind, every forecast hits. A run is forecast only from runs before it, and
    only once two of them give intervals."""
    row = claims.load().set_index("claim_id").loc["002-bound20-03"]

    def summary(ratio: float) -> dict:
        s = _summary("002-bound20-03", ratio, 0.09, 8, a=str(row["a"]))
        s["claims"][0]["b"] = str(row["b"])
        return s

    kinds = ["Intel(R) Xeon(R) Processor", "AMD EPYC"]
    runs = [pooling.RunRecord(f"2026120{k}T000000Z-full-000{k}", f"boot-{k}",
                              summary((2.3, 1.3)[k % 2] * (1 + 0.02 * k)), {}, cpu_model=kinds[k % 2])
            for k in range(8)]
    mixed = power_report.forecast_check(runs)
    own = power_report.forecast_check(runs, own_kind=True)
    assert set(mixed["lesson"]) == set(own["lesson"]) == {"002-cpu"}
    assert list(mixed["run_id"]) == [r.run_id for r in runs[2:]]          # two earlier runs at least
    assert list(own["run_id"]) == [r.run_id for r in runs[4:]]            # two earlier runs of its kind
    assert own["hit"].all() and set(own["read"]) == {"reproduced", "size not reproduced"}
    assert not mixed["hit"].all()
    first = mixed.iloc[0]                                                  # forecast from runs 0 and 1 alone
    expected = power.plan(runs[:2], {"002-bound20-03": {**row.to_dict(), "claim_id": "002-bound20-03"}},
                          {"002-bound20-03": 8}).iloc[0]
    assert first["word"] == expected["band_word"] and first["share"] == pytest.approx(expected["band_share"])
    text = power_report.forecast_check_text({"every": mixed, "own": own})
    every = f"6, {mixed['share'].sum():.1f}, {int(mixed['hit'].sum())}"
    assert f"| 002-cpu | {every} | 4, {own['share'].sum():.1f}, 4 |" in text
