"""fastapi_locust: every app variant serves the right page, and a smoke run yields well-formed data.

Correctness is checked against a direct PyMongo `find` on the session's server (not through the
app's own code); the smoke run goes through the worker as the study does. No timing assertions.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import sys
import urllib.parse
import urllib.request
from decimal import Decimal

import pymongo
import pytest
from bson import ObjectId
from bson.binary import Binary
from bson.decimal128 import Decimal128
from conftest import experiment_tables

from harness.core import datasets, processes
from harness.core.tables import read_table
from harness.experiments.analysis import CPU_REJECTED
from harness.experiments.fastapi import analysis
from harness.experiments.fastapi import locust as fastapi_locust
from harness.experiments.fastapi.apps import listings_api
from harness.judging import claims

REPO_ROOT = fastapi_locust.REPO_ROOT
SMOKE = fastapi_locust.EXPERIMENT.params("smoke")


def _expected(doc):
    """Independent of the app: what the JSON of one stored document must be."""
    if isinstance(doc, dict):
        return {k: _expected(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_expected(v) for v in doc]
    if isinstance(doc, Decimal128):
        return format(doc.to_decimal(), "f")
    if isinstance(doc, dt.datetime):
        return doc.astimezone(dt.UTC).isoformat()
    return doc


def test_to_json_handles_bson_types():
    oid = ObjectId()
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    doc = {"_id": oid, "price": Decimal128(Decimal("123.45")), "tiny": Decimal128("0.10"),
           "naive": dt.datetime(2024, 5, 1, 12, 30), "aware": when, "blob": Binary(b"\x00\x01"),
           "nested": {"list": [oid, {"d": Decimal128("1E+2")}]}, "n": 3, "f": 1.5, "s": "x", "none": None}
    out = listings_api.to_json(doc)
    json.dumps(out)  # serialisable as is
    assert out["_id"] == str(oid)
    assert out["price"] == "123.45" and out["tiny"] == "0.10"   # exact decimal text, never a float
    assert out["naive"] == out["aware"] == "2024-05-01T12:30:00+00:00"
    assert out["blob"] == "AAE="
    assert out["nested"]["list"][0] == str(oid) and Decimal(out["nested"]["list"][1]["d"]) == 100
    assert (out["n"], out["f"], out["s"], out["none"]) == (3, 1.5, "x", None)


def test_cpu_warning_pattern_matches_locust_messages():
    for msg in ("CPU usage above 90%! This may constrain your throughput",
                "CPU usage was too high at some point during the test!",
                "CPU usage threshold was exceeded on workers during the test!"):
        assert fastapi_locust.CPU_WARNING.search(msg)
    assert not fastapi_locust.CPU_WARNING.search("Ramping to 500 users at a rate of 5.00 per second")


@pytest.fixture(scope="module")
def listings(stack):
    datasets.Listings(SMOKE.documents).ensure(stack)
    return stack.mongodb_uri


def test_listings_page_partitions_the_top_rated_listings(listings):
    """The subset collection holds every listing rated >= 95 once, with the projected fields only,
    in pages of at most 20 by (price, _id), as its marker says."""
    with pymongo.MongoClient(listings) as client:
        db = client[datasets.STUDY_DB]
        top = list(db[listings_api.COLLECTION].find({"review_scores.review_scores_rating": {"$gte": 95}},
                                                    listings_api.PROJECTION).sort([("price", 1), ("_id", 1)]))
        pages = list(db[datasets.PAGE_COLLECTION].find({}))
        marker = db[datasets.MARKERS].find_one({"_id": datasets.PAGE_COLLECTION})
    assert len(top) > datasets.PAGE_SIZE and len(pages) == len(top) == marker["n"]
    sizes = collections.Counter(d["page_key"] for d in pages)
    assert max(sizes.values()) == marker["largest_page"] <= datasets.PAGE_SIZE
    key = {d["_id"]: d.pop("page_key") for d in pages}
    assert [key[d["_id"]] for d in top] == [datasets.listing_page_key(i // datasets.PAGE_SIZE) for i in range(len(top))]
    assert sorted(pages, key=lambda d: d["_id"]) == sorted(top, key=lambda d: d["_id"])


@pytest.mark.parametrize("variant,tokens,query", [("sync", 1, "seed"), ("async", 40, "seed"), ("mixed", 40, "seed"),
                                                  ("sync", 1, "fast"), ("async", 40, "fast"),
                                                  ("sync", 1, "page"), ("async", 40, "page"), ("mixed", 40, "page")])
def test_variant_serves_the_direct_query_result(listings, tmp_path, variant, tokens, query):
    port = processes.free_port()
    env = dict(os.environ, LISTINGS_API_MONGODB_URI=listings, LISTINGS_API_VARIANT=variant,
               LISTINGS_API_THREAD_TOKENS=str(tokens), LISTINGS_API_QUERY=query)
    proc = processes.start(f"uvicorn-{variant}", [sys.executable, "-m", "uvicorn", fastapi_locust.APP,
                                                  "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                           tmp_path / "uvicorn.log", env=env, cwd=REPO_ROOT)
    min_rating, limit, skip = 90, 7, 0
    if query == "page":  # page 1 of the listings rated >= 95 by price, from the subset collection
        # a page holds PAGE_SIZE listings: ask for fewer, so `limit` is what cuts the answer
        limit = datasets.PAGE_SIZE - 2
        min_rating, skip, url = 95, datasets.PAGE_SIZE, f"/listings/top?page=1&limit={limit}"
        flt = {"review_scores.review_scores_rating": {"$gte": 95}}
    elif query == "fast":  # the precomputed key stands for: rating >= 95, this market, price in its band
        with pymongo.MongoClient(listings) as client:
            keys = collections.Counter(d["search_key"] for d in client[datasets.STUDY_DB][listings_api.COLLECTION]
                                       .find({"search_key": {"$exists": True}}, {"search_key": 1}))
        market, band = keys.most_common(1)[0][0].split("|")
        min_rating, url = 95, f"/listings/top?market={urllib.parse.quote(market)}&band={band}&limit={limit}"
        flt = {"review_scores.review_scores_rating": {"$gte": 95}, "address.market": market,
               "price": {"$gte": 100 * int(band), "$lt": 100 * (int(band) + 1)}}
    else:
        url = f"/listings/top?min_rating={min_rating}&limit={limit}"
        flt = {"review_scores.review_scores_rating": {"$gte": min_rating}}
    try:
        assert processes.wait_for_port(port, 30, proc), proc.log_tail()
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30).read())
        assert (health["status"], health["variant"], health["thread_tokens"], health["query"]) == \
            ("ok", variant, tokens, query)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=60) as r:
            assert r.status == 200
            got = json.loads(r.read())
    finally:
        proc.stop()
    with pymongo.MongoClient(listings, tz_aware=True) as client:
        coll = client[datasets.STUDY_DB][listings_api.COLLECTION]
        direct = list(coll.find(flt, listings_api.PROJECTION).sort([("price", 1), ("_id", 1)]).skip(skip).limit(limit))
    assert 0 < len(got) <= limit and len(got) == len(direct)
    assert [d["_id"] for d in got] == [d["_id"] for d in direct]
    assert got == _expected(direct)
    assert all(d["review_scores"]["review_scores_rating"] >= min_rating for d in got)
    assert all(set(d["address"]) <= {"market", "country", "location"} for d in got)  # projected


def _row(**kw):
    base = {"generator_saturated": False, "locust_workers": 0, "locust_cpu_pct": 20.0, "offered_load_ratio": 0.5,
            "cores": 2, "machine_cpu_pct": 100.0, "db_cpu_pct": 50.0, "app_cpu_pct": 40.0,
            "busy_tokens_frac": 0.2, "loop_lag_p50_ms": 1.0}
    return {**base, **kw}


@pytest.mark.parametrize("row,expected", [
    (_row(generator_saturated=True), "load_generator"),
    (_row(locust_cpu_pct=95.0), "load_generator"),
    (_row(locust_cpu_pct=95.0, locust_workers=2), "unexplained"),
    (_row(offered_load_ratio=0.95), "offered_load"),
    (_row(machine_cpu_pct=190.0, db_cpu_pct=120.0), "database_cpu"),
    (_row(machine_cpu_pct=190.0, db_cpu_pct=60.0, app_cpu_pct=20.0), "machine_cpu"),   # "other" is largest
    (_row(machine_cpu_pct=190.0, db_cpu_pct=30.0, app_cpu_pct=95.0), "machine_cpu"),
    (_row(machine_cpu_pct=170.0, busy_tokens_frac=0.95), "thread_limiter"),
    (_row(busy_tokens_frac=0.85), "unexplained"),
    (_row(loop_lag_p50_ms=500.0), "event_loop"),
    (_row(app_cpu_pct=92.0), "app_cpu"),
    (_row(app_cpu_pct=88.0), "unexplained"),
    (_row(app_cpu_pct=65.0, app_cpu_wait_pct=30.0), "app_cpu"),       # never idle: it waited for a core
    (_row(app_cpu_pct=65.0, app_cpu_wait_pct=20.0), "unexplained"),
])
def test_bottleneck_rules_flip_at_their_thresholds(row, expected):
    assert analysis.bottleneck(row) == expected


def test_smoke_run_is_well_formed(smoke_run):
    """The session's smoke run (every experiment, through the study, as users run it)."""
    assert smoke_run.experiments["fastapi_locust"]["status"] == "ok", smoke_run.experiments["fastapi_locust"]
    tables = experiment_tables(smoke_run, "fastapi_locust")
    runs = tables["runs"]
    assert set(runs["variant"]) == set(SMOKE.variants)
    assert (runs["status"] == "ok").all(), runs[["variant", "error"]]
    assert runs["generator_saturated"].dtype == bool
    assert (runs[["server_cpu_s", "locust_cpu_s", "hold_machine_cpu_s"]] >= 0).all().all()
    # the session's servers, reached by URI, run on this machine: found by port, their CPU measured
    assert (runs["hold_database_cpu_s"] > 0).all()
    # the app's and the database's threads' run-queue wait over the hold: measured, never NaN
    assert (runs[["hold_server_wait_s", "hold_database_wait_s"]] >= 0).all().all()
    assert (runs["hold_ok"] > 0).all()

    samples = tables["samples"]
    assert set(samples["variant"]) == set(SMOKE.variants)
    assert (samples["latency_s"] > 0).all() and samples["ok"].all() and not samples["infrastructure"].any()
    for t in ("locust_stats", "locust_history"):
        df = tables[t]
        assert set(df["variant"]) == set(SMOKE.variants)
        assert (df["name"] == "Aggregated").any()
    assert {"requests_s", "p50", "p95", "user_count"} <= set(tables["locust_history"].columns)
    assert {"server", "locust", "database", "machine"} <= set(tables["cpu"]["role"])
    # each sampler (one per phase and attempt) adds up its roles' waits: they never drop
    sampled = tables["cpu"][tables["cpu"]["role"].isin(["server", "database"])].sort_values("t_s")
    per_sampler = sampled.groupby(["variant", "phase", "attempt", "role"])["wait_s"]
    assert per_sampler.apply(lambda s: s.is_monotonic_increasing).all()
    app = tables["app_stats"]
    assert set(app["variant"]) == set(SMOKE.variants)
    one = app[app["variant"] == "sync_1thread"]
    assert (one["total_tokens"] == 1).all() and one["borrowed_tokens"].between(0, 1).all()

    ol = tables["openloop"]
    assert set(ol["variant"]) == set(SMOKE.openloop_variants)
    sent = ol[ol["sent"]]
    assert (sent["corrected_s"] >= sent["naive_s"] - 1e-6).all()
    assert (sent["actual_s"] >= sent["intended_s"] - 1e-3).all()

    out = smoke_run.repeat_dirs("fastapi_locust")[0][1]
    for v in SMOKE.variants:
        for kind in ("stats", "stats_history", "failures"):
            assert (out / "artifacts" / v / f"locust-a0_{kind}.csv").exists()

    run = smoke_run
    summary = analysis.summary_table(run)
    assert sorted(summary["variant"]) == sorted(SMOKE.variants)
    assert summary["bottleneck"].isin(analysis.BOTTLENECKS).all()
    m = claims.run_metrics(run)
    assert list(m.columns) == ["experiment", "variant", "metric", "unit", "repeat", "value", "better", "bottleneck"]
    for v in SMOKE.variants:
        got = set(m.loc[m["variant"] == v, "metric"])
        assert {"max_rps", "median_ms", "p95_ms", "failure_rate", "db_cpu_pct"} <= got, (v, got)
    closed = m[(m["experiment"] == "fastapi_locust") & ~m["metric"].str.startswith("openloop_")
               & (m["metric"] != CPU_REJECTED)]      # a count over the experiment's windows: no resource
    assert closed["bottleneck"].isin(analysis.BOTTLENECKS).all(), closed[~closed["bottleneck"].isin(
        analysis.BOTTLENECKS)][["variant", "metric", "bottleneck"]].to_dict("records")
    assert set(analysis.seed_table(run).columns) == set(SMOKE.variants)
    assert not analysis.openloop_table(run).empty
    assert not analysis.staircase(run).empty


def test_crossover_smoke_sets_and_measures_each_round_trip(stack, tmp_path):
    """fastapi_crossover through the proxy the study provides: each point's delay is set on the proxy
    and measured (loosely: between half and twice the setting, plus the proxy's own cost), the
    direct point bypasses it, and the toxics are gone afterwards. One variant: the smoke run measures
    both, and the delays are the proxy's, whatever the app."""
    from harness.core import network
    from harness.running import study

    planned = study.plan(["fastapi_crossover"], "smoke", {"rtts_ms": "20", "variants": "async"})[0]
    for d in planned.experiment.datasets(planned.params):
        d.ensure(stack)
    out = tmp_path / "fastapi_crossover" / "r0"
    with network.route(stack, ("mongodb",), via_proxy=True, rtt_ms=0) as route:
        result = study.run_repeat(planned, route.stack, out, 0)
        assert route.toxics("mongodb") == []
    assert result["status"] == "ok", result.get("error")
    points = read_table(out / "points.parquet").set_index("path")
    assert 10 <= points.loc["proxy", "ping_median_ms"] <= 40
    assert points.loc["direct", "ping_median_ms"] < 10
    runs = read_table(out / "runs.parquet")
    assert set(runs["variant"]) == {"async[rtt=20]", "async[direct=on]"}
    assert (runs["status"] == "ok").all(), runs["error"].tolist()
    assert (runs["hold_database_cpu_s"] > 0).all()   # the harness's own servers: their CPU is measured


def test_openloop_experiment_offers_every_variant_the_same_rates(smoke_run):
    """fastapi_openloop: a probe measures the one-thread app's capacity, then each variant gets the
    same rates (fractions of it), and the analysis names figures per load and variant."""
    from harness.experiments.fastapi import openloop as fastapi_openloop

    smoke = fastapi_openloop.EXPERIMENT.params("smoke")
    assert smoke_run.experiments["fastapi_openloop"]["status"] == "ok", smoke_run.experiments["fastapi_openloop"]
    tables = experiment_tables(smoke_run, "fastapi_openloop")
    assert analysis.available(smoke_run, analysis.OPENLOOP)   # what notebook 04 asks before its section
    probe = tables["probe"]
    assert len(probe) == 1 and probe["capacity_rps"].iloc[0] > 0
    runs = tables["openloop_runs"]
    measured = runs[~runs["variant"].str.contains("[", regex=False)]
    assert set(measured["variant"]) == set(smoke.variants)
    capacity = probe["capacity_rps"].iloc[0]
    expected = sorted(round(f * capacity, 3) for f in smoke.rate_fractions)
    for _, g in measured.groupby("variant"):   # the same rates for every variant
        assert sorted(g["rate"]) == pytest.approx(expected)
    assert (measured["sent"] > 0).all()

    m = claims.run_metrics(smoke_run)
    m = m[m["experiment"] == "fastapi_openloop"]
    assert m.loc[m["variant"] == "reference", "metric"].tolist() == ["capacity_rps"]
    for f in smoke.rate_fractions:
        for v in smoke.variants:
            got = set(m.loc[m["variant"] == f"load{round(100 * f)}.{v}", "metric"])
            assert {"failure_rate", "lag_p99_ms"} <= got, (f, v, got)


def test_openloop_rejects_rates_at_or_above_capacity():
    from harness.core.errors import HarnessError
    from harness.experiments.fastapi import openloop as fastapi_openloop

    with pytest.raises(HarnessError, match="rate_fractions must be below 1"):
        fastapi_openloop.EXPERIMENT.params("smoke", {"rate_fractions": (0.5, 1.2)})
