"""fastapi_locust: every app variant serves the right page, and a smoke run yields well-formed data.

Correctness is checked against a direct PyMongo `find` on the session's server (not through the
app's own code); the smoke run goes through the worker as the study does. No timing assertions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import urllib.request
from decimal import Decimal

import pymongo
import pytest
from bson import ObjectId
from bson.binary import Binary
from bson.decimal128 import Decimal128

from harness import datasets, processes, store
from harness.analysis import fastapi as analysis
from harness.apps import listings_api
from harness.experiments import fastapi_locust

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
        return doc.astimezone(dt.timezone.utc).isoformat()
    return doc


def test_to_json_handles_bson_types():
    oid = ObjectId()
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc)
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


@pytest.mark.parametrize("variant,tokens", [("sync", 1), ("async", 40), ("mixed", 40)])
def test_variant_serves_the_direct_query_result(listings, tmp_path, variant, tokens):
    port = processes.free_port()
    env = dict(os.environ, LISTINGS_API_MONGODB_URI=listings, LISTINGS_API_VARIANT=variant,
               LISTINGS_API_THREAD_TOKENS=str(tokens))
    proc = processes.start(f"uvicorn-{variant}", [sys.executable, "-m", "uvicorn", fastapi_locust.APP,
                                                  "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                           tmp_path / "uvicorn.log", env=env, cwd=REPO_ROOT)
    try:
        assert processes.wait_for_port(port, 30, proc), proc.log_tail()
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30).read())
        assert (health["status"], health["variant"], health["thread_tokens"]) == ("ok", variant, tokens)
        min_rating, limit = 90, 7
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/listings/top?min_rating={min_rating}&limit={limit}",
                                    timeout=60) as r:
            assert r.status == 200
            got = json.loads(r.read())
    finally:
        proc.stop()
    with pymongo.MongoClient(listings, tz_aware=True) as client:
        coll = client[datasets.STUDY_DB][listings_api.COLLECTION]
        direct = list(coll.find({"review_scores.review_scores_rating": {"$gte": min_rating}},
                                listings_api.PROJECTION).sort([("price", 1), ("_id", 1)]).limit(limit))
    assert len(got) == limit
    assert [d["_id"] for d in got] == [d["_id"] for d in direct]
    assert got == _expected(direct)
    assert all(d["review_scores"]["review_scores_rating"] >= min_rating for d in got)
    assert all(set(d["address"]) <= {"market", "country", "location"} for d in got)  # projected


def test_smoke_run_is_well_formed(run_experiment, tmp_path):
    result, tables = run_experiment("fastapi_locust", "smoke")
    assert result["status"] == "ok", result.get("error")
    runs = tables["runs"]
    assert set(runs["variant"]) == set(SMOKE.variants)
    assert (runs["status"] == "ok").all(), runs[["variant", "error"]]
    assert runs["generator_saturated"].dtype == bool
    assert (runs[["server_cpu_s", "locust_cpu_s"]] >= 0).all().all()

    samples = tables["samples"]
    assert set(samples["variant"]) == set(SMOKE.variants)
    assert (samples["latency_s"] > 0).all() and samples["ok"].all()
    for t in ("locust_stats", "locust_history"):
        df = tables[t]
        assert set(df["variant"]) == set(SMOKE.variants)
        assert (df["name"] == "Aggregated").any()
    assert {"requests_s", "p50", "p95", "user_count"} <= set(tables["locust_history"].columns)
    assert {"server", "locust"} <= set(tables["cpu"]["role"])

    ol = tables["openloop"]
    assert set(ol["variant"]) == set(SMOKE.openloop_variants)
    sent = ol[ol["sent"]]
    assert (sent["corrected_s"] >= sent["naive_s"] - 1e-6).all()
    assert (sent["actual_s"] >= sent["intended_s"] - 1e-3).all()

    out = tmp_path / "fastapi_locust" / "r0"
    for v in SMOKE.variants:
        for kind in ("stats", "stats_history", "failures"):
            assert (out / "artifacts" / v / f"locust-a0_{kind}.csv").exists()

    # The analysis reads the same files as a stored run.
    store.write_json_atomic(tmp_path / "manifest.json", {"format_version": store.FORMAT_VERSION,
                                                         "run_id": "test", "servers": {}})
    run = store.Run(tmp_path)
    summary = analysis.summary_table(run)
    assert list(summary["variant"]) == list(SMOKE.variants)
    assert (summary["requests"] > 0).all()
    m = analysis.metrics(run)
    for v in SMOKE.variants:
        for q in ("median_ms", "p95_ms", "p99_ms", "mean_rps", "server_cpu_pct", "locust_cpu_pct",
                  "generator_saturated", "openloop.r0.corrected_p99_ms", "openloop.r0.naive_p99_ms"):
            assert f"fastapi_locust.{v}.{q}" in m, q
    assert "fastapi_locust.sync_1thread_over_async.median_ms_ratio" in m
    assert not analysis.openloop_table(run).empty
    assert not analysis.history(run).empty
