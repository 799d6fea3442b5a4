"""The departures factorial: a smoke run against the real servers (two interpreters, both
placements, the proxy's round trip when available), what it records, and the verdict rule."""

from __future__ import annotations

import math
import os

import pytest

from harness.core import interpreters, store
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.experiments.analysis import METRIC_COLUMNS
from harness.experiments.departures import analysis
from harness.judging import claims


@pytest.fixture(scope="module")
def factorial(smoke_run) -> store.Run:
    """The session's smoke run of every experiment (conftest), departures included: the study
    prepares its venvs before any measurement, as `harness study` does."""
    return smoke_run


def test_the_smoke_factorial_completes_with_every_cell_ok(factorial):
    assert factorial.manifest["status"] == "complete"
    cells = factorial.cells("departures")
    assert len(cells) and (cells["status"] == "ok").all(), cells[cells["status"] != "ok"].to_dict("records")


def test_each_window_ran_on_the_interpreter_its_cell_names(factorial):
    w = analysis.windows(factorial)
    p = registry.get("departures").params("smoke")
    wanted = {interpreters.resolve(r).label: interpreters.resolve(r).version for r in p.pythons}
    assert set(w["python"]) == set(wanted)
    for label, version in wanted.items():
        assert set(w.loc[w["python"] == label, "python_version"]) == {version}
    assert set(w["python_build"]) <= {"gil", "free-threaded"}
    assert (w["ops"] > 0).all() and (w["cpu_s"] > 0).all()
    assert (w["cpu_wait_s"] >= 0).all()   # measured in every interpreter's child, not NaN
    # every sample carries the interpreter's version and build too
    s = factorial.table("departures", "samples")
    assert s["python_version"].notna().all() and s["python_build"].notna().all()


def test_the_client_affinity_recorded_is_the_affinity_set(factorial):
    pl = analysis.affinity_check(factorial)
    assert set(pl["placement"]) == {"shared", "split"}
    assert pl["matches"].all(), pl[~pl["matches"]].to_dict("records")
    split = pl[pl["placement"] == "split"]
    for _, r in split.iterrows():
        server, client = set(r["server_cpus"].split(",")), set(r["client_cpus"].split(","))
        assert server and client and not server & client
        assert r["servers_pinned"] > 0
    shared = pl[pl["placement"] == "shared"]
    assert (shared["client_cpus"] == ",".join(map(str, sorted(os.sched_getaffinity(0))))).all()


def test_cells_metrics_and_effects(factorial):
    c = analysis.cells(factorial)
    assert set(c["family"]) == {"mongo", "pg"}
    assert (c["cpu_ratio"] > 0).all()
    m = claims.run_metrics(factorial)
    assert list(m.columns) == list(METRIC_COLUMNS) and len(m)
    assert {"cpu_us_per_req", "ratio_change"} <= set(m["metric"])
    e = analysis.effects(factorial)
    factors = set(e["factor"])
    assert {"python", "placement"} <= factors
    notes = factorial.result("departures", 0)["notes"]
    if notes["latency"]["via_proxy"]:
        assert "rtt_ms" in factors
    else:
        assert notes["latency"]["factor"] == "missing"
    # one repeat gives no interval: the verdict says so rather than deciding
    assert e["verdict"].str.startswith("not shown").all()


def test_every_postgres_window_has_the_gil_probe_beside_its_clients(factorial):
    """Each PostgreSQL window holds the GIL probe's wake-ups (net waits, one figure per window and a
    metric per variant) and its cell's floor; MongoDB windows have none (NaN, not 0)."""
    w = analysis.windows(factorial)
    pg, mongo = w[w["family"] == "pg"], w[w["family"] == "mongo"]
    assert len(pg) and len(mongo)
    assert (pg["gil_samples"] >= 5).all(), pg[["variant", "gil_samples"]]
    assert pg["gil_wait_ms"].map(math.isfinite).all() and pg["gil_floor_ms"].map(math.isfinite).all()
    assert (pg["gil_wait_p90_ms"] >= 0).all() and (pg["gil_floor_ms"] > 0).all()
    assert pg["gil_found_held"].between(0, 1).all(), pg[["variant", "gil_found_held"]]
    assert mongo[list(analysis.GIL_FIGURES) + ["gil_floor_ms"]].isna().all().all()
    raw = factorial.table("departures", "gil", ok_only=False)
    assert set(raw["phase"]) == {"floor", "window"}
    inside = raw[raw["phase"] == "window"]
    assert (inside["offset_s"] >= 0).all() and (inside["offset_s"] <= inside["variant"].map(
        dict(zip(pg["variant"], pg["wall_s"])))).all()
    m = claims.run_metrics(factorial)
    gil = m[m["metric"] == "gil_wait_ms"]
    assert set(gil["variant"]) == set(pg["variant"])
    table = analysis.gil_table(factorial)
    assert set(table["model"]) == set(pg["model"]) and (table["n_repeats"] == 1).all()
    assert table["gil_found_held"].between(0, 1).all() and (table["client_cpu_pct"] > 0).all()


def test_the_seed_ratios_come_from_the_ledger():
    seeds = analysis.seed_ratios()
    for _key, s in seeds.items():
        assert "error" not in s, s
        assert s["ratio"] > 0


def test_verdict_rule():
    # here 1.5, seed 0.6: the gap on the log scale is log(0.4)
    here, seed = 1.5, 0.6
    to_seed = seed / here
    half = math.exp(0.5 * math.log(to_seed))
    assert analysis.verdict(to_seed, to_seed * 0.9, to_seed * 1.1, here, seed)["verdict"] == "explains"
    assert analysis.verdict(half * 0.99, half * 0.95, half * 1.05, here, seed)["verdict"] == "explains"
    assert analysis.verdict(0.95, 0.92, 0.98, here, seed)["verdict"] == "explains part"
    assert analysis.verdict(0.7, 0.4, 1.2, here, seed)["verdict"] == "not shown"
    assert analysis.verdict(1.2, 1.1, 1.3, here, seed)["verdict"] == "moves away"
    assert math.isclose(analysis.verdict(to_seed, 0.3, 0.5, here, seed)["toward_seed"], 1.0)


def test_bad_parameters_fail_before_anything_starts():
    exp = registry.get("departures")
    with pytest.raises(HarnessError, match="3.99"):
        exp.params("smoke", {"pythons": "3.11,3.99"})
    with pytest.raises(HarnessError, match="placements"):
        exp.params("smoke", {"placements": "shared,sideways"})
    with pytest.raises(HarnessError, match="rtts_ms"):
        exp.params("smoke", {"rtt_ms": 5, "via_proxy": True})
