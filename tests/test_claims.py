"""The claims ledger: its data, its expression language, verdicts that flip when the figures cross
each row's criterion, and its evaluation on a real smoke run."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from harness import claims, registry, store

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


# -- verdicts on synthetic per-repeat figures -------------------------------------------------------

SMALL = np.array([0.01, -0.01, 0.005, -0.005, 0.0])   # log noise: a tight interval
LARGE = np.array([0.4, -0.4, 0.3, -0.3, 0.0])         # an interval wide enough to include anything near


def _synthetic_run(tmp_path) -> store.Run:
    """A run directory with a manifest and no experiment: the figures come in as a C1 frame."""
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({"format_version": store.FORMAT_VERSION, "run_id": "synthetic",
                                                 "status": "complete", "experiments": {}, "servers": {}}))
    return store.Run(d)


def _frame(run: store.Run, row: pd.Series, ratio: float, noise: np.ndarray) -> pd.DataFrame:
    """Per-repeat figures for every metric the row reads such that a_k / b_k = ratio * exp(noise_k)."""
    (a_name,) = claims.refs(row["a"])
    b_names = claims.refs(row["b"])
    recs = []

    def put(name, k, v):
        exp, _, rest = name.partition(".")
        recs.append({"experiment": exp, "variant": "", "metric": rest, "unit": "", "repeat": k, "value": v,
                     "better": "", "bottleneck": ""})

    for k in range(len(noise)):
        for n in b_names:
            put(n, k, 100.0 * (1 + 0.01 * k))
    partial = pd.DataFrame(recs)
    b = claims.per_repeat(run, claims.by_repeat(partial), row["b"]) if row["b"] else {k: 1.0 for k in range(len(noise))}
    for k, e in enumerate(noise):
        put(a_name, k, ratio * b[k] * math.exp(e))
    return pd.DataFrame(recs)


def _verdict(tmp_path, row: pd.Series, ratio: float, noise=SMALL) -> str:
    run = _synthetic_run(tmp_path)
    ev = claims.evaluate(run, frame=_frame(run, row, ratio, noise),
                         ledger=LEDGER[LEDGER["claim_id"] == row["claim_id"]])
    return ev["verdict"].iloc[0]


def _cases(row: pd.Series) -> list[tuple[float, np.ndarray, str]]:
    ref = row["reference"]
    if row["comparison"] == "equivalence":
        m = 1 + row["margin"]
        return [(ref, SMALL, claims.EQUIVALENT), (ref * m ** 3, SMALL, claims.NOT_REPRODUCED),
                (ref / m ** 3, SMALL, claims.NOT_REPRODUCED), (ref, LARGE, claims.INCONCLUSIVE)]
    up = row["direction"] == ">"
    has_band = not math.isnan(row["band_low"])
    inside = math.sqrt(row["band_low"] * row["band_high"]) if has_band else (ref * 3 if up else ref / 3)
    cases = [(inside, SMALL, claims.REPRODUCED), (ref / 3 if up else ref * 3, SMALL, claims.NOT_REPRODUCED),
             (ref, LARGE, claims.INCONCLUSIVE)]
    if has_band:
        beyond = row["band_high"] * 3 if up else row["band_low"] / 3
        cases.append((beyond, SMALL, claims.DIRECTION_ONLY))
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


def test_absolute_rows_are_never_judged(tmp_path):
    rows = LEDGER[(LEDGER["kind"] == "measurement") & (LEDGER["comparison"] == "absolute")]
    assert len(rows)
    for _, row in rows.iterrows():
        assert _verdict(tmp_path, row, 1.0) == claims.NOT_COMPARABLE


def test_one_repeat_gives_no_verdict_but_inconclusive(tmp_path):
    row = JUDGED_ROWS[JUDGED_ROWS["comparison"] == "ratio"].iloc[0]
    assert _verdict(tmp_path, row, 1000.0, np.array([0.0])) == claims.INCONCLUSIVE


def test_summary_counts_each_verdict_by_seed(tmp_path):
    ev = pd.DataFrame({"document": ["001", "001", "001", "002", "002"], "kind": ["measurement"] * 4 + ["setup"],
                       "verdict": [claims.REPRODUCED, claims.REPRODUCED, claims.INCONCLUSIVE,
                                   claims.NOT_COMPARABLE, claims.SETUP_SAME]})
    t = claims.summary(ev)
    assert t.loc["001", claims.REPRODUCED] == 2 and t.loc["001", claims.INCONCLUSIVE] == 1
    assert t.loc["001", "judged"] == 3 and t.loc["002", "judged"] == 0
    assert t.loc["002", claims.NOT_COMPARABLE] == 1 and claims.SETUP_SAME not in t.columns
    assert claims.chance_wrong(ev) == {"judged_rows": 3, "alpha": claims.ALPHA, "expected_wrong": claims.ALPHA * 3}


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
        elif row.kind == "measurement":
            assert row.n >= 1 and row.value > 0, row.claim_id
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
