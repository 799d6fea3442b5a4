"""summary.json (issue 10's interface) and `harness compare`, on a real smoke run and on figures
built by hand where a value must be exact."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import __main__ as cli
from harness.core import calibration, stats, store
from harness.judging import claims, summary
from harness.reading import compare, readout

METRIC_KEYS = {"experiment", "variant", "metric", "unit", "estimate", "median", "ci_low", "ci_high", "ci_level",
               "cv", "n_repeats", "unstable", "normalised", "interpreter", "bottleneck"}
# what the findings generator reads from every claim row (summary.json version 2): never renamed
CLAIM_KEYS = {"claim_id", "seed", "kind", "comparison", "section", "sentence", "verdict", "verdict_raw", "seed_value",
              "seed_unit", "a_median", "b_median", "estimate", "ci_low", "ci_high", "ci_level", "n_used", "n_ran",
              "reason", "p_value", "p_adjusted", "detectable", "band_low", "band_high", "margin", "reference",
              "direction", "premise", "bottleneck_measured", "machine_dependent", "server", "interpreter", "missing",
              "primary", "error_family"}


def _run_dir(tmp_path, name: str, manifest: dict) -> store.Run:
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"format_version": store.FORMAT_VERSION, "run_id": name,
                                                 "status": "complete", "experiments": {}, **manifest}))
    return store.Run(d)


def _cal(pgbench: list[float], loops: list[float]) -> dict:
    part = {"pgbench": {"values": pgbench}, "python_cpu": {"values": loops}}
    return {"before": part, "after": part}


def test_throughputs_are_normalised_by_the_matching_ceiling(tmp_path):
    run = _run_dir(tmp_path, "r", {"calibration": _cal([1000.0, 1100.0, 900.0], [5e6, 5e6, 5e6])})
    frame = pd.DataFrame([
        {"experiment": "pg_models", "variant": "fast.pool20.uvloop_asyncpg", "metric": "rps", "unit": "req/s",
         "repeat": k, "value": v, "better": "higher", "bottleneck": "client CPU"}
        for k, v in enumerate([500.0, 520.0, 480.0])
    ] + [
        {"experiment": "mongo_pool", "variant": "bare", "metric": "throughput_qps", "unit": "queries/s",
         "repeat": k, "value": v, "better": "higher", "bottleneck": ""} for k, v in enumerate([2000.0, 2000.0, 2000.0])
    ] + [
        {"experiment": "mongo_pool", "variant": "bare", "metric": "p50_ms", "unit": "ms",
         "repeat": k, "value": 1.0, "better": "lower", "bottleneck": ""} for k in range(3)])
    rows = {(r["experiment"], r["metric"]): r for r in summary.metric_rows(claims.measured(run, frame))}
    assert all(METRIC_KEYS <= set(r) for r in rows.values())
    pg = rows[("pg_models", "rps")]
    assert pg["normalised"] == pytest.approx(500.0 / 1000.0) and pg["normalised_by"] == "pgbench"
    assert pg["bottleneck"] == "client CPU" and pg["n_repeats"] == 3
    assert "too few repeats" in pg["stability"] and pg["unstable"] is False
    mongo = rows[("mongo_pool", "throughput_qps")]
    assert mongo["normalised"] == pytest.approx(2000.0 / 5.0) and mongo["normalised_by"] == "python_cpu"
    assert rows[("mongo_pool", "p50_ms")]["normalised"] is None   # latencies are not normalised
    assert calibration.ceiling_for("pgbench", None) == (None, "pgbench")
    assert calibration.ceiling_for(None, run.manifest["calibration"]) == (None, "")


def test_each_metric_publishes_the_estimate_its_interval_belongs_to(tmp_path):
    """summary.json v2: `estimate` (the geometric mean) lies inside its interval; the median, beside
    it, need not (issue 22, point 5)."""
    run = _run_dir(tmp_path, "r", {})
    values = [1.0] * 5 + [2.0] * 4
    frame = pd.DataFrame([{"experiment": "mongo_pool", "variant": "bare", "metric": "p50_ms", "unit": "ms",
                           "repeat": k, "value": v, "better": "lower", "bottleneck": ""} for k, v in enumerate(values)])
    (row,) = summary.metric_rows(claims.measured(run, frame))
    assert row["estimate"] == pytest.approx(stats.summarise(values)["estimate"])
    assert row["ci_low"] <= row["estimate"] <= row["ci_high"] and row["ci_level"] == pytest.approx(0.95)
    assert row["median"] == 1.0 < row["ci_low"]   # the median lies outside: it is labelled, not the estimate
    assert summary.SUMMARY_VERSION == store.SUMMARY_VERSION == 4


def test_claim_rows_carry_every_key_the_findings_read(tmp_path):
    from harness.judging import claims

    run = _run_dir(tmp_path, "r", {})
    ev = claims.evaluate(run, frame=pd.DataFrame(columns=["experiment", "variant", "metric", "unit", "repeat",
                                                          "value", "better", "bottleneck"]))
    rows = summary.claim_rows(ev)
    assert rows and all(CLAIM_KEYS <= set(r) for r in rows)
    assert all(isinstance(r["machine_dependent"], bool) for r in rows)
    mc = ev.attrs["multiple_comparisons"]
    assert mc["method"] == "holm (primary rows) + bh (supporting rows)" and mc["undone"] == []
    assert {"alpha", "tested", "undone", "families"} <= set(mc)
    assert {r["error_family"] for r in rows if r["primary"]} <= {"primary"}


def test_summary_json_of_the_smoke_run(smoke_run):
    out = summary.write(smoke_run.path)
    text = (smoke_run.path / "summary.json").read_text()
    assert "NaN" not in text and json.loads(text) == json.loads(json.dumps(out))
    assert {"metrics", "claims", "timing", "calibration"} <= set(out)
    assert out["metrics"] and all(METRIC_KEYS <= set(r) for r in out["metrics"])
    for r in out["metrics"]:
        assert r["n_repeats"] >= 1 and r["median"] is not None, r
        if r["ci_low"] is not None:
            assert r["ci_low"] <= r["ci_high"]
    pg = [r for r in out["metrics"] if r["experiment"] == "pg_models" and r["metric"] == "rps"]
    assert pg and all(r["bottleneck"] for r in pg), "pg_models rows name their limiting resource"
    assert out["summary_version"] == 4 and all(CLAIM_KEYS <= set(c) for c in out["claims"])
    assert "chance_wrong" not in out
    mc = out["multiple_comparisons"]
    assert mc["method"] == "holm (primary rows) + bh (supporting rows)" and mc["alpha"] == 0.05
    assert set(mc["undone"]) <= {c["claim_id"] for c in out["claims"]}
    # the methods say what was applied: Holm over the primary rows, Benjamini-Hochberg over the rest
    assert out["methods"]["multiple comparisons"] == mc["guarantee"]
    assert "primary rows" in mc["guarantee"] and "Benjamini-Hochberg" in mc["guarantee"]
    assert "90% t-interval" in out["methods"]["comparison"]
    for c in out["claims"]:
        if c["claim_id"] in mc["undone"]:
            assert c["verdict"] == "inconclusive" and c["verdict_raw"] != c["verdict"] and c["p_adjusted"] >= 0.05
        if c["estimate"] is not None and c["ci_low"] is not None:
            assert c["ci_low"] <= c["estimate"] <= c["ci_high"], c["claim_id"]
    for r in out["metrics"]:
        if r["ci_low"] is not None:
            assert r["ci_low"] <= r["estimate"] <= r["ci_high"], r
    assert out["timing"]["experiments"] == smoke_run.manifest.get("timing", {})
    assert out["calibration"] == smoke_run.manifest.get("calibration", {})


def test_compare_prints_both_runs_side_by_side(smoke_run):
    df = compare.compare(readout.summary_of(smoke_run), readout.summary_of(smoke_run))
    ratios = df[df["B/A"] != "—"]
    assert not ratios.empty and (ratios["B/A"] == "1.000").all()
    # no ratio only where the figure is zero (e.g. the failure rate of a clean smoke run)
    assert df.loc[df["B/A"] == "—", "A"].str.match(r"0 ").all(), df[df["B/A"] == "—"]
    result = CliRunner().invoke(cli.cli, ["compare", str(smoke_run.path), str(smoke_run.path)])
    assert result.exit_code == 0, result.output
    assert smoke_run.id in result.output and "B/A" in result.output


def test_compare_agreement_says_which_of_absolute_and_normalised_agrees_better(tmp_path):
    def metrics(values: dict[str, tuple[float, float]]) -> list[dict]:
        return [{"experiment": "pg_models", "variant": v, "metric": "rps", "unit": "req/s", "headline": True,
                 "median": m, "normalised": n} for v, (m, n) in values.items()]
    a, b = _run_dir(tmp_path, "a", {}), _run_dir(tmp_path, "b", {})
    # B's machine is twice as fast and its ceiling says so: normalised figures agree, absolute ones not
    (a.path / "summary.json").write_text(json.dumps({"metrics": metrics(
        {"x": (100.0, 0.010), "y": (200.0, 0.020), "z": (300.0, 0.030), "w": (50.0, None)}), "claims": []}))
    (b.path / "summary.json").write_text(json.dumps({"metrics": metrics(
        {"x": (200.0, 0.010), "y": (440.0, 0.022), "z": (600.0, 0.030), "w": (500.0, None)}), "claims": []}))
    agree = compare.compare_agreement(readout.summary_of(a), readout.summary_of(b))
    assert agree["n"] == 3  # w has no normalised value: left out of both measures
    assert agree["absolute"] == pytest.approx(1.0) and agree["normalised"] == pytest.approx(0.0)
    assert "median |B/A - 1| 100.0% absolute, 0.0% normalised" in compare.compare_text(a, b)
    assert stats.median_relative_change([]) != stats.median_relative_change([])  # NaN: nothing to compare


def test_compare_counts_verdicts_that_move_and_those_that_contradict(tmp_path):
    def claims(verdicts: dict[str, str]) -> list[dict]:
        return [{"claim_id": c, "kind": "measurement", "verdict": v, "interpreter": "CPython 3.11"}
                for c, v in verdicts.items()]
    a, b = _run_dir(tmp_path, "a", {}), _run_dir(tmp_path, "b", {})
    (a.path / "summary.json").write_text(json.dumps({"metrics": [], "claims": claims(
        {"x-01": "reproduced", "x-02": "reproduced", "x-03": "inconclusive", "x-04": "not reproduced",
         "x-05": "not measured in this run"})}))
    (b.path / "summary.json").write_text(json.dumps({"metrics": [], "claims": claims(
        {"x-01": "reproduced", "x-02": "not reproduced", "x-03": "direction only", "x-04": "inconclusive",
         "x-05": "reproduced"})}))
    df, counts = compare.compare_verdicts(readout.summary_of(a), readout.summary_of(b))
    assert dict(zip(df["claim"], df["change"])) == {"x-01": "same", "x-02": "OPPOSED", "x-03": "moved",
                                                    "x-04": "moved", "x-05": "only in one run"}
    assert counts == {"same": 1, "same class": 0, "moved": 2, "OPPOSED": 1, "only in one run": 1}


def test_compare_names_a_run_that_does_not_exist(tmp_path):
    result = CliRunner().invoke(cli.cli, ["compare", str(tmp_path / "nope"), "latest",
                                          "--data-dir", str(tmp_path)])
    assert result.exit_code != 0 and "nope" in str(result.exception or result.output)


def test_unstable_figures_are_warned_about(tmp_path):
    run = _run_dir(tmp_path, "r", {})
    frame = pd.DataFrame([{"experiment": "mongo_pool", "variant": "bare", "metric": "throughput_qps",
                           "unit": "queries/s", "repeat": k, "value": v, "better": "higher", "bottleneck": ""}
                          for k, v in enumerate([100.0, 150.0, 60.0, 120.0, 80.0])]
                         + [{"experiment": "mongo_pool", "variant": "bare", "metric": "p50_ms", "unit": "ms",
                             "repeat": k, "value": v, "better": "lower", "bottleneck": ""}
                            for k, v in enumerate([1.0, 1.01, 0.99, 1.0, 1.0])])
    rows = summary.metric_rows(claims.measured(run, frame))
    (run.path / "summary.json").write_text(json.dumps({"metrics": rows}))
    warnings = summary.stability_warnings(run)
    assert len(warnings) == 1 and "mongo_pool.bare.throughput_qps" in warnings[0] and "5 repeats" in warnings[0]
    # the end of a run says how many, and where to read them, in one line (a full run has hundreds)
    assert summary.stability_line(run) == ("WARNING 1 figure unstable (CV >= 10% over 5 or more repeats): "
                                           f"`harness show {run.id}` lists them")
    (run.path / "summary.json").write_text(json.dumps({"metrics": [r for r in rows if not r.get("unstable")]}))
    assert summary.stability_line(run) is None
