"""The five MongoDB experiments at smoke size against the real server: shape and sanity, not speed.

The session's smoke run of every experiment (`smoke_run`, through `harness run all` as users run them),
then: every table with its columns, values that must hold on any server (latencies positive, tasks
in range, documents read = documents in the collection, duplicate-key semantics, the batches the
server sent), the analysis module's metrics, and both notebooks executed on that run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from harness.core import store
from harness.experiments.mongo import analysis as mongo
from harness.judging import claims
from tests.conftest import experiment_tables

MINE = ["mongo_cursor", "mongo_pool", "mongo_client", "mongo_bulk", "mongo_models"]
SAMPLE_COLUMNS = {"variant", "task", "start_s", "latency_s", "ok"}
WINDOW_COLUMNS = {"variant", "wall_s", "cpu_s", "ops"}


@pytest.fixture(scope="module")
def mongo_run(smoke_run) -> store.Run:
    """The session's smoke run of every experiment (conftest), which includes these five."""
    assert set(MINE) <= set(smoke_run.experiments)
    return smoke_run


def _ok(run: store.Run, name: str) -> dict:
    entry = run.experiments[name]
    assert entry["status"] == "ok", entry.get("error") or entry
    return experiment_tables(run, name)


def test_cursor(mongo_run):
    t = _ok(mongo_run, "mongo_cursor")
    params = mongo_run.experiments["mongo_cursor"]["params"]
    s, probe, batching = t["samples"], t["probe"], t["batching"]
    assert SAMPLE_COLUMNS | {"method", "batch_size", "documents"} <= set(s.columns)
    assert s.ok.all() and (s.documents == params["documents"]).all()
    expected = 1 + len(params["batch_sizes"]) + 1 + 1  # default, each batch size, 16 MiB, to_list
    assert len(s) == expected and s.variant.is_unique
    # MongoDB-sized batches: the batch size comes from the measured document size (about 200 bytes)
    b = batching.iloc[0]
    assert b.sampled == min(params["size_sample"], params["documents"]) and 150 <= b.avg_doc_bytes <= 250
    assert b.batch_size == int(params["mongodb_batch_mib"] * 1024 * 1024 // b.avg_doc_bytes)
    mongo_sized = s[s.variant == "iterate[batch_size=16MiB]"].iloc[0]
    assert mongo_sized.batch_size == b.batch_size
    assert mongo_sized.label == ("MongoDB-sized batches, emulated on FerretDB" if b.server == "FerretDB"
                                 else "MongoDB-sized batches")
    # every reply was counted: the batches hold every document, and none exceeds the batch size asked
    for _, r in s.iterrows():
        assert r.batches >= 1 and r.max_batch_docs <= (r.batch_size or r.documents), r.variant
    small = s[s.batch_size == min(params["batch_sizes"])].iloc[0]
    assert small.batches >= params["documents"] // small.batch_size
    assert {"variant", "seq", "offset_s", "lateness_s", "span_s", "run_s", "wait_s"} <= set(probe.columns)
    assert set(probe.variant) == set(s.variant)
    assert (probe.lateness_s > -0.001).all() and len(t["probe_idle"]) > 0
    # each wake-up's own CPU and wait fit in the wall-clock span they were read over
    assert (probe.run_s >= 0).all() and (probe.wait_s >= 0).all() and (probe.span_s >= probe.lateness_s).all()
    assert (probe.run_s + probe.wait_s <= probe.span_s + 0.002).all()
    assert len(t["windows"]) == expected and WINDOW_COLUMNS <= set(t["windows"].columns)
    for v, g in probe.groupby("variant"):
        assert g.offset_s.is_monotonic_increasing and len(g) > 0, v


def test_pool(mongo_run):
    t = _ok(mongo_run, "mongo_pool")
    params = mongo_run.experiments["mongo_pool"]["params"]
    s, w = t["samples"], t["windows"]
    assert SAMPLE_COLUMNS | {"mode", "loop", "driver", "pool_size", "semaphore", "error"} <= set(s.columns)
    n_variants = len(params["modes"]) * len(params["loops"]) * len(params["drivers"])
    assert len(w) == n_variants == s.variant.nunique()
    assert s.ok.all(), s.error.dropna().unique()[:3]
    assert s.task.between(0, params["tasks"] - 1).all()
    assert (s.latency_s > 0).all() and (s.start_s >= 0).all()
    # every operation started inside the window; the tail may end after it (it waited for a connection)
    assert (s.start_s < params["duration_s"]).all()
    assert set(w["mode"]) == set(params["modes"])
    assert set(w.loc[w["mode"] == "large_pool", "pool_size"]) == {params["large_pool_size"]}
    assert (w.ops == s.groupby("variant").size().reindex(w.variant).to_numpy()).all()
    notes = mongo_run.result("mongo_pool", 0)["notes"]
    assert "ferretdb_backend_index" in notes


def test_client(mongo_run):
    t = _ok(mongo_run, "mongo_client")
    params = mongo_run.experiments["mongo_client"]["params"]
    s = t["samples"]
    assert SAMPLE_COLUMNS | {"mode", "loop", "driver"} <= set(s.columns)
    assert s.ok.all() and (s.latency_s > 0).all()
    counts = s.groupby("mode").size()
    assert set(counts.index) == set(params["modes"])
    assert (counts == params["iterations"] * len(params["loops"]) * len(params["drivers"])).all()


def test_bulk(mongo_run, stack):
    import pymongo

    t = _ok(mongo_run, "mongo_bulk")
    params = mongo_run.experiments["mongo_bulk"]["params"]
    s, dup = t["samples"], t["duplicates"]
    assert SAMPLE_COLUMNS | {"op", "ordered", "docs", "error"} <= set(s.columns)
    one = s[s.op == "insert_one"]
    assert len(one) == params["insert_one_count"] and one.ok.all()
    many = s[s.op == "insert_many"]
    assert sorted(many.ordered) == [False, True] and many.ok.all()
    assert (many.n_inserted == params["documents"]).all()
    ups = s[s.op == "bulk_write_upsert"]
    new = ups[ups.matching == "0%"]
    assert len(new) == 1 and new.ok.all() and int(new.n_upserted.iloc[0]) == params["upserts"]
    # the matching upserts: measured, or (FerretDB) a skipped cell with the reason and no row
    skipped = {c["variant"]: c["reason"] for c in mongo_run.result("mongo_bulk", 0)["cells"]
               if c["status"] == "skipped"}
    matching = [v for v in skipped if v.startswith("bulk_write_upsert")]
    assert len(ups) + len(matching) == 2 and ups.ok.all()
    assert all("FerretDB" in skipped[v] for v in matching)
    # duplicate key: unordered stores every other document; ordered stops no earlier than the duplicate
    # and stores fewer (MongoDB stops exactly there; FerretDB finishes the failing 100-document chunk)
    assert {"ordered", "batch_docs", "dup_index", "landed", "n_inserted", "write_errors"} <= set(dup.columns)
    ordered, unordered = (dup[dup.ordered == o].iloc[0] for o in (True, False))
    assert params["dup_index"] <= ordered.landed < unordered.landed
    assert ordered.n_inserted == ordered.landed and unordered.n_inserted == unordered.landed
    assert unordered.landed == params["dup_batch"] - 1
    assert ordered.write_errors == unordered.write_errors == 1
    # the scratch collection is gone and `orders` untouched
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        assert "orders_bulk_scratch" not in c.study.list_collection_names()


def test_models(mongo_run):
    t = _ok(mongo_run, "mongo_models")
    params = mongo_run.experiments["mongo_models"]["params"]
    s, w = t["samples"], t["windows"]
    n_async = len(params["semaphores"]) * len(params["loops"]) * len(params["drivers"])
    n_sweep = len(set(params["pool_sweep"]) - {params["pool_size"]})
    assert len(w) == len(params["thread_counts"]) + n_async + n_sweep
    sweep = w[(w["mode"] == "async") & ~w.semaphore & (w.loop == "asyncio") & (w.driver == "pymongo")]
    assert set(params["pool_sweep"]) <= set(sweep.pool_size)
    pool = t["server_pool"].iloc[0]
    if pool.ferretdb:  # FerretDB's own PostgreSQL pool, from its flags, and its connections in use
        assert pool.pool_max_conns >= 1, pool.source
        assert "pool_max_conns" in pool.source or "default" in pool.source, pool.source
        assert (sweep.ferretdb_pg_conns_max.dropna() >= 1).all()
    assert set(w["mode"]) == {"threads", "async"}
    assert (w.cpu_s > 0).all() and (w.ops > 0).all()
    assert s.ok.all() and set(s.variant) == set(w.variant)
    threads = w[w["mode"] == "threads"]
    assert sorted(threads.workers) == sorted(params["thread_counts"])
    assert (threads.pool_size == threads.workers).all()


def test_models_charge_database_cpu_and_name_a_bottleneck(run_experiment, tmp_path):
    """On the harness's own local servers (the session's smoke run reaches them by URI, where
    their processes are not known): the database's and the machine's CPU over every window, and
    from them every variant's named bottleneck."""
    result, t = run_experiment("mongo_models", "smoke")
    assert result["status"] == "ok", result.get("error")
    w = t["windows"]
    assert (w.db_cpu_s > 0).all() and (w.machine_busy_s >= w.cpu_s * 0.5).all() and (w.cores >= 1).all()
    from harness.experiments.mongo import models as mongo_models

    params = mongo_models.EXPERIMENT.params("smoke").to_dict()
    store.write_json_atomic(tmp_path / "manifest.json", {
        "format_version": store.FORMAT_VERSION, "run_id": "test", "servers": {},
        "experiments": {"mongo_models": {"status": "ok", "params": params}}})
    m = claims.run_metrics(store.Run(tmp_path))
    models = m[m.experiment == "mongo_models"]
    assert {"db_cpu_pct", "client_cpu_pct", "client_cpu_wait_pct", "machine_cpu_pct",
            "db_cpu_us_per_query"} <= set(models.metric)
    limits = set(models[models.metric == "throughput_qps"].bottleneck)
    assert limits and limits <= {"client_cpu", "database_cpu", "machine_cpu", "unexplained"}, limits


@pytest.mark.parametrize("mode,client,db,machine,expected", [
    ("async", 95.0, 50.0, 150.0, "client_cpu"),          # the loop's one core is full
    ("async", 85.0, 100.0, 190.0, "database_cpu"),       # machine full, the database its largest user
    ("async", 85.0, 60.0, 190.0, "machine_cpu"),         # machine full, someone else larger
    ("async", 85.0, 60.0, 170.0, "unexplained"),         # nothing at 90%
    ("threads", 95.0, 90.0, 190.0, "machine_cpu"),       # threads may use both cores: not client-bound
    ("threads", 80.0, 100.0, 190.0, "database_cpu"),
    ("threads", 185.0, 5.0, 195.0, "client_cpu"),
])
def test_models_bottleneck_flips_at_its_thresholds(mode, client, db, machine, expected):
    assert mongo.models_bottleneck(mode, client, db, machine, cores=2) == expected


@pytest.mark.parametrize("mode,client,wait,expected", [
    ("async", 60.0, 35.0, "client_cpu"),      # never idle: ran 60% of a core, waited 35% for one
    ("async", 60.0, 25.0, "unexplained"),     # idle 15% of the window: not client-bound
    ("threads", 100.0, 90.0, "client_cpu"),   # its threads wanted 190% of the 2 cores
    ("threads", 100.0, 70.0, "unexplained"),
])
def test_models_bottleneck_counts_waiting_for_a_core_as_client_demand(mode, client, wait, expected):
    assert mongo.models_bottleneck(mode, client, 60.0, 170.0, cores=2, wait_pct=wait) == expected
    assert mongo.models_bottleneck(mode, client, 60.0, 170.0, cores=2) == "unexplained"  # wait unknown


def test_the_stall_figures_split_wall_clock_into_own_cpu_and_wait():
    """The 10 ms check reads the most own CPU of any wake-up; the wall-clock stall and the wait share
    of that longest stall stand beside it; a run recorded before the split has no own-CPU figure."""
    probe = pd.DataFrame({"lateness_s": [0.0001, 0.020, 0.008], "span_s": [0.0011, 0.021, 0.009],
                          "run_s": [0.0001, 0.006, 0.0085], "wait_s": [0.0, 0.014, 0.0002]})
    split = mongo.stall_split(probe)
    assert split["max_ms"] == pytest.approx(20.0) and split["run_max_ms"] == pytest.approx(8.5)
    assert split["run_max_span_ms"] == pytest.approx(9.0) and split["max_run_ms"] == pytest.approx(6.0)
    assert split["max_wait_share"] == pytest.approx(0.7)
    old = mongo.stall_split(probe[["lateness_s"]])
    assert old["max_ms"] == pytest.approx(20.0) and math.isnan(old["run_max_ms"]) and math.isnan(old["max_wait_share"])
    assert math.isnan(mongo.stall_split(probe.iloc[:0])["max_ms"])


def test_metrics_name_every_seed_quantity(mongo_run):
    m = claims.named(mongo_run)
    for name in ["mongo_cursor.default.max_stall_ms", "mongo_cursor.batch_size_1000.max_stall_ms",
                 "mongo_cursor.batch_size_1000.max_stall_run_ms", "mongo_cursor.batch_size_1000.max_stall_wait_share",
                 "mongo_cursor.default.total_s", "mongo_cursor.batch_size_1000.total_s",
                 "mongo_cursor.to_list.max_stall_ms", "mongo_cursor.probe.idle_max_ms",
                 "mongo_pool.bare.max_ms", "mongo_pool.bare.p50_ms", "mongo_pool.bare.p99_9_ms",
                 "mongo_pool.bare.ops_per_task_min", "mongo_pool.bare.ops_per_task_max",
                 "mongo_pool.bare.throughput_qps", "mongo_pool.semaphore.max_ms", "mongo_pool.semaphore.p50_ms",
                 "mongo_pool.semaphore.p99_ms", "mongo_pool.semaphore.throughput_qps",
                 "mongo_pool.semaphore.ops_per_task_min", "mongo_pool.large_pool.max_ms",
                 "mongo_pool.bare_uvloop.max_ms",
                 "mongo_client.per_request_ms", "mongo_client.shared_ms",
                 "mongo_cursor.mongodb_batches.max_stall_ms", "mongo_cursor.mongodb_batches.avg_doc_bytes",
                 "mongo_models.async_pool2.throughput_qps", "mongo_models.async_pool8.throughput_qps",
                 "mongo_models.pool_sweep.smallest_over_best_qps",
                 "mongo_bulk.insert_one_us_per_doc", "mongo_bulk.insert_one_extrapolated_s",
                 "mongo_bulk.insert_many_s", "mongo_bulk.insert_many_unordered_s",
                 "mongo_bulk.dup_ordered_landed", "mongo_bulk.dup_unordered_landed",
                 "mongo_models.async_bare.throughput_qps", "mongo_models.async_bare.cpu_us_per_query",
                 "mongo_models.async_semaphore.cpu_us_per_query"]:
        assert name in m, name
        assert math.isfinite(m[name]), name
    threads = [k for k in m if k.startswith("mongo_models.threads") and k.endswith(".cpu_us_per_query")]
    assert threads and all(m[k] > 0 for k in threads)
    assert m["mongo_pool.bare.ops_per_task_min"] <= m["mongo_pool.bare.ops_per_task_max"]
    assert m["mongo_pool.bare.p50_ms"] <= m["mongo_pool.bare.max_ms"]
    assert not mongo.pool_completions(mongo_run).empty


@pytest.mark.parametrize("notebook", ["01_mongo_cursor_pool.ipynb", "02_mongo_client_bulk_models.ipynb"])
def test_notebook_executes(mongo_run, smoke_report, notebook):
    """The family's notebooks, as the report ran them on the smoke run (papermill, once per session):
    no error, and figures whose provenance names this run and the MongoDB role's real server."""
    assert smoke_report.run.id == mongo_run.id
    executed = nbformat.read(mongo_run.path / "report" / "notebooks" / notebook, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{notebook}: {errors[0]['ename']}: {errors[0]['evalue']}"
    manifest = json.loads((smoke_report.figures / "manifest.json").read_text())
    mine = {k: e for k, e in manifest["figures"].items() if Path(e["notebook"]).name == notebook}
    assert mine, f"{notebook} saved no figure"
    for entry in mine.values():
        assert entry["run_id"] == mongo_run.id
        assert all("MongoDB" not in label or "FerretDB" not in label for label in entry["servers"].values())
