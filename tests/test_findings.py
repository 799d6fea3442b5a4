"""The lessons (harness.judging.findings): one row per seed lesson, read from a summary.json, and each lesson
pooled over the committed runs. The tables made from them: tests/test_answer.py. No server is
started here."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from harness.core import pooling, store, verdicts
from harness.core.errors import HarnessError
from harness.judging import findings

REPO_ROOT = Path(__file__).resolve().parent.parent
LEDGER = REPO_ROOT / "harness" / "core" / "claims_ledger.csv"
FERRETDB = "FerretDB v1.24.2 on PostgreSQL 15.18 (reports server version 7.0.42)"


def _claim(claim_id: str, verdict: str, estimate: float | None, lo: float | None, hi: float | None, *,
           seed_unit: str = "x (a / b)", comparison: str = "ratio", n_used: int = 10, n_ran: int = 10,
           ci_level: float = 0.95, server: str = FERRETDB, p_value: float = 0.01,
           p_adjusted: float = 0.01) -> dict:
    """One claim row in summary.json's version-2 shape (p_adjusted = p_value by default: an adjustment
    that did not widen the verdict's interval)."""
    return {"claim_id": claim_id, "seed": claim_id[:3], "kind": "measurement", "comparison": comparison,
            "section": "", "sentence": "", "verdict": verdict, "verdict_raw": verdict, "seed_value": 1.0,
            "seed_unit": seed_unit, "a_median": None, "b_median": None, "estimate": estimate, "ci_low": lo,
            "ci_high": hi, "ci_level": ci_level, "n_used": n_used, "n_ran": n_ran, "reason": "",
            "p_value": p_value, "p_adjusted": p_adjusted, "detectable": None, "band_low": None, "band_high": None,
            "margin": None, "reference": 1.0, "direction": ">", "premise": "", "bottleneck_measured": "",
            "machine_dependent": False, "server": server, "interpreter": "CPython 3.11.7", "missing": ""}


def _summary(claims: list[dict]) -> dict:
    return {"summary_version": 2, "run_id": "20990101T000000Z-full-test", "metrics": [], "claims": claims,
            "multiple_comparisons": {"method": "holm", "alpha": 0.05, "tested": len(claims), "undone": 0},
            "verdict_counts": [], "timing": {}, "calibration": {}}


SYNTHETIC = _summary([
    _claim("001-pool-13", "reproduced", 104.0, 80.5, 131.0),
    _claim("001-pool-01", "reproduced", 20.0, 18.0, 22.0),
    _claim("001-pool-06", "not reproduced", 0.5, 0.4, 0.6),
    _claim("001-models-02", "not reproduced", 1.49, 1.26, 1.77, n_used=4, n_ran=5),
    _claim("001-cursor-02", "inconclusive", 9.5, 7.0, 13.0, seed_unit="ms"),
    _claim("002-fast50-01", "equivalent", 1.02, 0.97, 1.07, comparison="equivalence", ci_level=0.90,
           server="PostgreSQL 15.18"),
])


def _rows() -> dict[str, dict]:
    return {r["lesson"]: r for r in findings.lesson_rows(store.upgrade_summary(SYNTHETIC))}


def test_lessons_are_the_seeds_verify_lines_and_seed_000s_two():
    by_seed: dict[str, list[findings.Lesson]] = {}
    for lesson in findings.LESSONS:
        by_seed.setdefault(lesson.seed, []).append(lesson)
    assert {s: len(v) for s, v in by_seed.items()} == {"000": 2, "001": 5, "002": 5}
    for lesson in by_seed["001"] + by_seed["002"]:
        assert lesson.words.startswith("Verify: "), lesson.id
    assert len({lesson.id for lesson in findings.LESSONS}) == len(findings.LESSONS)


def test_every_lesson_rests_on_measurement_rows_of_the_ledger():
    with LEDGER.open(newline="") as f:
        ledger = {r["claim_id"]: r for r in csv.DictReader(f)}
    for lesson in findings.LESSONS:
        assert lesson.claims, lesson.id
        for cid in lesson.claims:
            assert cid in ledger, f"{lesson.id}: {cid} is not in the claims ledger"
            assert ledger[cid]["kind"] == "measurement", f"{lesson.id}: {cid} is not a measurement row"
            assert ledger[cid]["document"] == lesson.seed, f"{lesson.id}: {cid} is another seed's row"
        assert set(lesson.means) == {"holds", "fails", "open"}, lesson.id
        assert all(s.strip().endswith(".") for s in lesson.means.values()), lesson.id


_FIGURE_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _agrees(shown: str, value: float) -> bool:
    """`shown` (as typed, "2.32" or "1,734") is `value` rounded to the digits it shows."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return float(shown.replace(",", "")) == round(value, digits)


def test_each_lessons_seed_figure_agrees_with_the_ledgers_seed_value():
    """The seed's figure is typed as prose beside the lesson; the ledger holds it as a number. The
    ratio the prose shows (the number before "×", else any of its numbers) must be the ledger's seed
    value of the lesson's first row, rounded as shown, so the two cannot drift apart."""
    with LEDGER.open(newline="") as f:
        ledger = {r["claim_id"]: r for r in csv.DictReader(f)}
    problems = []
    for lesson in findings.LESSONS:
        raw = ledger[lesson.claims[0]]["seed_value"]
        if not raw:   # a direction-only claim has no seed number, and its prose must say so
            if _FIGURE_NUMBER.search(lesson.seed_figure):
                problems.append(f"{lesson.id}: the ledger has no seed value, the prose shows a number")
            continue
        ratio = re.search(f"({_FIGURE_NUMBER.pattern})×", lesson.seed_figure)
        shown = [ratio.group(1)] if ratio else _FIGURE_NUMBER.findall(lesson.seed_figure)
        if not any(_agrees(s, float(raw)) for s in shown):
            problems.append(f"{lesson.id}: {lesson.seed_figure!r} does not show {lesson.claims[0]}'s {raw}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("verdict, cls", [("reproduced", "holds"), ("equivalent", "holds"),
                                          ("direction only", "holds"), ("size not reproduced", "holds"),
                                          ("direction, no seed figure", "holds"), ("not reproduced", "fails"),
                                          ("inconclusive", "open"), ("premise not met", "open"),
                                          ("not comparable", "open"), ("not measured in this run", "open")])
def test_verdict_classes(verdict, cls):
    assert findings.verdict_class(verdict) == cls


def test_a_row_takes_its_figure_verdict_and_sentence_from_its_first_claim():
    rows = _rows()
    pool = rows["001-pool"]
    assert pool["verdict"] == "reproduced"
    assert pool["figure"] == "×104 [80.5, 131] (95%, n=10)"
    assert pool["server"] == "FerretDB v1.24.2 on PostgreSQL 15.18"
    assert pool["means"] == next(lx for lx in findings.LESSONS if lx.id == "001-pool").means["holds"]
    # the other rows are counted, the ones the run lacks as not measured
    assert pool["rows"] == {"reproduced": 2, "not reproduced": 1, "not measured in this run": 7}

    models = rows["001-models"]
    assert models["verdict"] == "not reproduced"
    assert models["figure"] == "×1.49 [1.26, 1.77] (95%, n=4 of 5)"
    assert models["means"] == next(lx for lx in findings.LESSONS if lx.id == "001-models").means["fails"]

    cursor = rows["001-cursor"]
    assert cursor["figure"] == "9.5 ms [7, 13] (95%, n=10)"
    assert cursor["means"] == next(lx for lx in findings.LESSONS if lx.id == "001-cursor").means["open"]

    client = rows["002-client"]
    assert client["figure"] == "×1.02 [0.97, 1.07] (90%, n=10)" and client["server"] == "PostgreSQL 15.18"


def test_a_premise_not_met_shows_what_was_measured_instead():
    claim = _claim("002-bound20-03", "premise not met", None, None, None, n_used=0, server="PostgreSQL 15.18")
    claim.update(bottleneck_measured="client CPU + pool 10/10", ci_level=None)
    row = {r["lesson"]: r for r in findings.lesson_rows(store.upgrade_summary(_summary([claim])))}["002-cpu"]
    assert row["verdict"] == "premise not met"
    assert row["figure"] == "— (n=0 of 10; bottleneck measured: client CPU + pool 10/10)"
    assert row["means"] == next(lx for lx in findings.LESSONS if lx.id == "002-cpu").means["open"]


def test_a_lesson_the_run_did_not_measure_says_so():
    row = _rows()["000-mixed"]
    assert row["verdict"] == "not measured in this run"
    assert row["figure"] == "—" and row["server"] == ""
    assert row["means"] == next(lx for lx in findings.LESSONS if lx.id == "000-mixed").means["open"]


def test_the_interval_at_the_verdicts_level_clears_the_null_exactly_when_the_verdict_is_decisive():
    """A 90% interval wholly below 1 whose row Holm left `inconclusive` (adjusted p 0.16) is shown
    beside the interval at the level the adjusted test used, which reaches past 1; the same row
    with an adjusted p under 5% keeps that interval below 1."""
    def row(p_adjusted: float, verdict: str) -> dict:
        claim = _claim("000-mixed-01", verdict, 0.518, 0.451, 0.596, n_used=3, n_ran=3, ci_level=0.90,
                       p_value=0.0026, p_adjusted=p_adjusted)
        return {r["lesson"]: r for r in findings.lesson_rows(store.upgrade_summary(_summary([claim])))}["000-mixed"]

    undone = row(0.164, "inconclusive")
    lo, hi, level = undone["at_verdict"]
    assert lo < 0.451 and hi > 1 > 0.596 and level == pytest.approx(1 - 0.10 * 0.0026 / 0.164)
    assert undone["figure"].startswith("×0.518 [0.451, 0.596] (90%, n=3); [") and "at the verdict's 99.84%" \
        in undone["figure"]
    kept = row(0.026, "direction, no seed figure")
    lo, hi, level = kept["at_verdict"]
    assert lo < 0.451 and hi < 1 and level == pytest.approx(0.99)
    assert row(0.0026, "direction, no seed figure")["at_verdict"] is None   # not widened: none shown


def test_each_lesson_shows_its_two_options_with_their_medians_and_units():
    claim = _claim("002-fast20-15", "reproduced", 2.71, 2.46, 2.99, server="PostgreSQL 15.18")
    claim.update(a="{pg_models.fast.pool20.asyncio_asyncpg.p99_ms}", b="{pg_models.fast.pool20.asyncio_psycopg.p99_ms}",
                 a_median=671.0, b_median=244.0)
    summary = _summary([claim])
    summary["metrics"] = [{"experiment": "pg_models", "variant": f"fast.pool20.{m}", "metric": "p99_ms", "unit": "ms"}
                          for m in ("asyncio_asyncpg", "asyncio_psycopg")]
    tail = {r["lesson"]: r for r in findings.lesson_rows(store.upgrade_summary(summary))}["002-tail"]
    assert tail["sides"] == "medians: asyncpg 671 ms against psycopg async 244 ms"


def test_the_pooled_column_says_how_many_boots_and_never_pools_one_run():
    assert findings.pooled_text(None).startswith("— (no committed run")
    one = {"k": 1, "pooled": False, "runs": ("20990101T000000Z-full-abcd",)}
    assert findings.pooled_text(one) == "1 run (abcd): its own interval; pooling needs runs from 2 machines"
    # a run of the same versions whose row gave no interval (another boot, a premise not met) is named
    unmet = {**one, "not_poolable": {"20990102T000000Z-full-ef01": "no estimate (premise not met)"}}
    assert findings.pooled_text(unmet) == ("1 run (abcd): its own interval; pooling needs runs from 2 machines; "
                                           "ef01 not pooled: no estimate (premise not met)")
    three = {"k": 3, "pooled": True, "estimate": 2.5, "ci_low": 2.1, "ci_high": 3.0, "pi_low": 1.6, "pi_high": 3.9,
             "verdict": "reproduced", "agree_text": "3 of 3 runs agree"}
    assert findings.pooled_text(three) == ("2.5 [2.1, 3] over 3 machines; a new run: 1.6 to 3.9 (90% prediction); "
                                          "**reproduced**, 3 of 3 runs agree")
    # runs of one boot count once: the text says both counts
    assert findings.pooled_text({**three, "n_runs": 5, "agree_text": "5 of 5 runs agree"}).startswith(
        "2.5 [2.1, 3] over 5 runs on 3 machines; a new run:")
    two = {**three, "k": 2, "pi_low": None, "pi_reason": "a prediction interval needs 3 runs"}
    assert "no prediction interval (a prediction interval needs 3 runs)" in findings.pooled_text(two)
    # two boots: no verdict across them (harness.core.pooling.MIN_FOR_VERDICT), each run's own said instead
    few = {**two, "verdict": verdicts.TOO_FEW_BOOTS, "agree_text": "both runs: size not reproduced"}
    assert findings.pooled_text(few) == ("2.5 [2.1, 3] over 2 machines; a new run's range and a verdict across "
                                         "machines need 3; both runs: size not reproduced")


def test_the_processor_table_cell_gives_a_verdict_only_from_three_boots():
    assert findings.compact_pooled_text(None) == "—" and findings.compact_pooled_text({"k": 0}) == "—"
    one = {"k": 1, "n_runs": 1, "pooled": False, "estimate": 2.0, "ci_low": 1.8, "ci_high": 2.2,
           "verdict": "reproduced"}
    assert findings.compact_pooled_text(one) == "2 [1.8, 2.2] (one machine's newest run); no pooled figure"
    two = {**one, "k": 2, "n_runs": 3, "pooled": True, "verdict": verdicts.TOO_FEW_BOOTS}
    assert findings.compact_pooled_text(two) == "2 [1.8, 2.2], 2 machines (3 runs); a verdict needs 3 machines"
    four = {**two, "k": 4, "n_runs": 12, "verdict": "size not reproduced", "agree": 10.0,
            "not_poolable": {"20990102T000000Z-full-ef01": "no estimate (premise not met)"}}
    assert findings.compact_pooled_text(four) == ("2 [1.8, 2.2], 4 machines (12 runs): **size not reproduced**, "
                                                  "10 of 12 agree; 1 more without an interval")


def test_the_processor_kinds_pool_only_their_own_runs():
    assert pooling.processor_kind("Intel(R) Xeon(R) Processor") == "Intel Xeon"
    assert pooling.processor_kind("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz") == "Intel Xeon Gold 6248"
    assert pooling.processor_kind("AMD EPYC") == "AMD EPYC" and pooling.processor_kind(None) is None
    runs = {r.run_id: pooling.processor_kind(r.cpu_model) for r in pooling.committed_runs(REPO_ROOT)}
    groups = findings.committed_by_processor(root=REPO_ROOT)
    assert next(iter(groups)) == findings.ALL_PROCESSORS and len(groups) == 1 + len(set(runs.values()) - {None})
    for label, rows in groups.items():
        assert set(rows) == {lesson.claims[0] for lesson in findings.LESSONS}
        pooled = {run for row in rows.values() for run in (row["runs"] or ())}
        if label != findings.ALL_PROCESSORS:
            assert pooled and {runs[r] for r in pooled} == {label}, label


def test_a_version_1_summary_is_read_through_the_upgrade():
    v1 = {"summary_version": 1, "run_id": "old", "metrics": [],
          "claims": [{"claim_id": "001-client-01", "kind": "measurement", "comparison": "ratio",
                      "verdict": "direction only", "value": 4.81, "ci_low": 4.33, "ci_high": 5.34, "n": 10,
                      "seed_unit": "x (per request / shared)", "server": FERRETDB}]}
    row = {r["lesson"]: r for r in findings.lesson_rows(store.upgrade_summary(v1))}["001-client"]
    assert row["figure"] == "×4.81 [4.33, 5.34] (95%, n=10)" and row["verdict"] == "direction only"


def test_a_missing_or_malformed_summary_is_one_clear_error(tmp_path):
    with pytest.raises(HarnessError, match="no summary.json"):
        store.load_summary(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(HarnessError, match="malformed"):
        store.load_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"summary_version": 1, "claims": "nope"}))
    with pytest.raises(HarnessError, match="malformed"):
        store.load_summary(tmp_path)


def test_the_reference_run_is_found_once(tmp_path):
    assert findings.reference_summary(tmp_path) is None
    for rid in ("20990101T000000Z-full-aaaa", "20990102T000000Z-full-bbbb"):
        (tmp_path / "reference" / rid).mkdir(parents=True)
        (tmp_path / "reference" / rid / "summary.json").write_text("{}")
        if rid.endswith("aaaa"):
            assert findings.reference_summary(tmp_path) == tmp_path / "reference" / rid / "summary.json"
    with pytest.raises(HarnessError, match="2 reference runs"):
        findings.reference_summary(tmp_path)


def test_the_committed_figures_are_the_reference_runs():
    """figures/ holds the citable figures: every one was saved from the reference run, and every
    file its manifest names is there (a report of another run, built without STUDY_FIGURES_DIR,
    overwrites them)."""
    ref = findings.reference_summary(REPO_ROOT / "data")
    if ref is None:
        pytest.skip("no reference run yet (data/reference/<id>/summary.json)")
    figures = REPO_ROOT / "figures"
    entries = json.loads((figures / "manifest.json").read_text())["figures"]
    assert entries
    not_reference = {name: e["run_id"] for name, e in entries.items() if e["run_id"] != ref.parent.name}
    assert not not_reference, f"figures saved from another run than {ref.parent.name}: {not_reference}"
    missing = [f for e in entries.values() for f in e["files"] if not (figures / f).is_file()]
    assert not missing, missing
