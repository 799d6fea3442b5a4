"""openloop_check: harness.core.openloop and Vegeta on the real app, and the verdict rule on both sides
of its tolerances.

The smoke run is the session's smoke run of every experiment (conftest `smoke_run`) against the
session's real FerretDB + PostgreSQL, with the real Vegeta binary (scripts/install-vegeta).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import experiment_tables

from harness import __main__ as cli
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.experiments.openloop_check import analysis
from harness.experiments.openloop_check import experiment as openloop_check

TOOLS = {"openloop", "vegeta[bound=workers]", "vegeta[bound=connections]"}


def _tool(variant: str) -> str:
    """`vegeta[bound=workers,load=0.3]` -> `vegeta[bound=workers]`, `openloop[load=0.3]` -> `openloop`."""
    name, _, inner = variant.partition("[")
    bound = [kv for kv in inner.rstrip("]").split(",") if kv.startswith("bound=")]
    return f"{name}[{bound[0]}]" if bound else name


def test_both_tools_at_every_rate_on_the_real_app(smoke_run):
    result = smoke_run.result("openloop_check", 0)
    tables = experiment_tables(smoke_run, "openloop_check")
    assert result["status"] == "ok", result
    samples, runs = tables["samples"], tables["runs"]
    p = openloop_check.EXPERIMENT.params("smoke")
    capacity = float(tables["capacity"]["capacity_rps"].iloc[0])
    assert capacity > 0
    rates = sorted(samples["rate"].unique())
    assert len(rates) == len(p.load_fractions)  # two below saturation, one above
    for rate in rates:
        at = samples[samples["rate"] == rate]
        assert {_tool(v) for v in at["variant"]} == TOOLS, (rate, set(at["variant"]))
        for variant, g in at.groupby("variant"):
            assert g["sent"].sum() > 0 and g["ok"].sum() > 0, variant
    assert (runs["status"] == "ok").all(), runs[["variant", "error"]]

    figs = analysis.window_figures(samples, runs, tables["windows"])
    below = figs[figs["load"] < 1]
    assert len(below) == 2 * len(TOOLS)
    for _, r in below.iterrows():  # a loose band: on a shared 2-core machine, not a timing assertion
        assert 0.7 * r["rate"] <= r["throughput_rps"] <= 1.3 * r["rate"], r[["variant", "rate", "throughput_rps"]]
        # Vegeta bounded by workers may leave a few hits unstarted when the shared machine is busy
        # (the smoke rates are tiny); nearly all of the schedule still goes out
        assert r["sent"] >= 0.9 * r["scheduled"], r[["variant", "sent", "scheduled"]]
    # Vegeta's CPU is its own process's (rusage), openloop's the worker's
    assert (figs["generator_cpu_s"] > 0).all(), figs[["variant", "generator_cpu_s"]]

    verdicts = analysis.verdicts(figs)
    assert len(verdicts) == len(rates) * 2  # one per rate and Vegeta bound
    assert set(verdicts["verdict"]) <= {"agree", "differ"}
    assert verdicts["reason"].str.len().gt(0).all()
    assert set(verdicts["level"]) == {"below saturation", "above saturation"}


# -- the verdict rule, on synthetic figures --------------------------------------------------------

def _openloop(**kw) -> dict:
    row = {"rate": 100.0, "load": 0.6, "sent": 1000, "scheduled": 1000, "throughput_rps": 100.0,
           "p50_ms": 100.0, "p95_ms": 200.0, "p99_ms": 400.0, "naive_p50_ms": 100.0, "naive_p95_ms": 200.0,
           "naive_p99_ms": 400.0, "lag_p99_ms": 1.0, "generator_cpu_s": float("nan")}
    return {**row, **kw}


def _vegeta(**kw) -> dict:
    return _openloop(bound="workers", **kw)


@pytest.mark.parametrize("change, inside, outside, figure", [
    ("throughput_rps", 104.0, 106.0, "throughput"),     # THROUGHPUT_TOL 5%
    ("sent", 960, 940, "sent"),                         # SENT_TOL 5%
    ("p99_ms", 490.0, 510.0, "p99"),                    # LATENCY_REL_TOL 25% of 400 ms
    ("p50_ms", 76.0, 74.0, "p50"),                      # 25% below 100 ms
])
def test_verdict_flips_at_the_tolerance(change, inside, outside, figure):
    o = _openloop()
    assert analysis.verdict(o, _vegeta(**{change: inside}))["verdict"] == "agree"
    res = analysis.verdict(o, _vegeta(**{change: outside}))
    assert res["verdict"] == "differ" and figure in res["differs"], res
    assert res["reason"]


def test_small_latencies_get_the_absolute_tolerance():
    o = _openloop(p50_ms=4.0, naive_p50_ms=4.0)
    assert 0.25 * 4.0 < analysis.LATENCY_ABS_MS  # the 2 ms floor is what decides here
    assert analysis.verdict(o, _vegeta(p50_ms=5.9))["verdict"] == "agree"
    assert "p50" in analysis.verdict(o, _vegeta(p50_ms=6.1))["differs"]


def test_above_saturation_the_reason_names_untimed_queueing():
    # openloop: requests queued in the generator (corrected >> naive); Vegeta with -max-workers
    # sent fewer and its latency is the naive one
    o = _openloop(load=1.5, rate=300.0, p50_ms=900.0, p95_ms=1500.0, p99_ms=1600.0, lag_p99_ms=1500.0,
                  naive_p50_ms=20.0, naive_p95_ms=30.0, naive_p99_ms=35.0, throughput_rps=200.0, scheduled=3000,
                  sent=3000)
    v = _vegeta(load=1.5, rate=300.0, p50_ms=21.0, p95_ms=31.0, p99_ms=36.0, throughput_rps=199.0, sent=2000,
                scheduled=3000, lag_p99_ms=900.0)
    res = analysis.verdict(o, v)
    assert res["verdict"] == "differ"
    assert {"sent", "p50", "p95", "p99"} <= set(res["differs"])
    assert "never sent" in res["reason"] and "naive kind" in res["reason"], res["reason"]
    assert "Result.Timestamp" in res["reason"]


def test_missing_vegeta_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(openloop_check, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HarnessError, match="scripts/install-vegeta"):
        openloop_check.vegeta_binary()


def test_the_study_leaves_it_out_but_run_takes_it(monkeypatch):
    assert registry.get("openloop_check").in_study is False
    asked: list[list[str]] = []

    class Stop(Exception):
        pass

    def fake_run(names, *args):  # record what the command would run, and start nothing
        asked.append(list(names))
        raise Stop

    monkeypatch.setattr(cli, "_run", fake_run)
    CliRunner().invoke(cli.cli, ["study", "--profile", "smoke"])
    CliRunner().invoke(cli.cli, ["run", "openloop_check", "--profile", "smoke"])
    assert "openloop_check" not in asked[0]
    assert asked[0] == [n for n, e in registry.all_experiments().items() if e.in_study]
    assert "fastapi_locust" in asked[0]
    assert asked[1] == ["openloop_check"]


def test_rates_are_whole_requests_per_second():
    assert openloop_check.whole_rate(71.4) == 71 and openloop_check.whole_rate(0.2) == 1
    assert openloop_check.EXPERIMENT.params("smoke", {"rates": "50,80"}).rates == (50.0, 80.0)
    with pytest.raises(HarnessError, match="vegeta_bounds"):
        openloop_check.EXPERIMENT.params("smoke", {"vegeta_bounds": "threads"})
