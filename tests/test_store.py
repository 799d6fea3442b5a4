"""Run store semantics: written aside, renamed when complete, `latest` never moved by a bad run."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.core import store
from harness.core.errors import HarnessError


def _write_run(data_dir, run_id, status):
    w = store.RunWriter(data_dir, run_id, {"profile": "smoke", "experiments": {"x": {"status": "ok"}}})
    d = w.repeat_dir("x", 0)
    pd.DataFrame({"variant": ["v"], "latency_s": [0.001]}).to_parquet(d / "samples.parquet")
    (d / "result.json").write_text(json.dumps({"status": "ok"}))
    return w


def test_complete_run_is_renamed_and_becomes_latest(tmp_path):
    w = _write_run(tmp_path, "r1", "complete")
    assert w.path.name.startswith(store.INCOMPLETE_PREFIX)
    path = w.commit("complete")
    assert path == tmp_path / "runs" / "r1"
    run = store.open_run(None, tmp_path)
    assert run.id == "r1" and run.manifest["status"] == "complete"
    assert run.table("x", "samples")["repeat"].tolist() == [0]


def test_interrupted_or_failed_run_leaves_latest_alone(tmp_path):
    _write_run(tmp_path, "good", "complete").commit("complete")
    interrupted = _write_run(tmp_path, "cut", "running")
    interrupted.abandon("interrupted", "KeyboardInterrupt")
    _write_run(tmp_path, "bad", "failed").commit("failed")
    assert os.readlink(tmp_path / "runs" / "latest") == "good"
    assert store.open_run("latest", tmp_path).id == "good"
    cut = json.loads((interrupted.path / "manifest.json").read_text())
    assert cut["status"] == "interrupted"
    # the failed run is kept for inspection, but by its id only
    assert store.open_run("bad", tmp_path).manifest["status"] == "failed"


def test_existing_run_is_never_overwritten(tmp_path):
    _write_run(tmp_path, "same", "complete").commit("complete")
    with pytest.raises(HarnessError, match="already exists"):
        store.RunWriter(tmp_path, "same", {})


def test_open_run_errors_name_the_problem(tmp_path):
    with pytest.raises(HarnessError, match="no complete run yet"):
        store.open_run(None, tmp_path)
    with pytest.raises(HarnessError, match="no run 'nope'"):
        store.open_run("nope", tmp_path)


def test_unknown_format_version_is_refused(tmp_path):
    w = _write_run(tmp_path, "old", "complete")
    path = w.commit("complete")
    m = json.loads((path / "manifest.json").read_text())
    m["format_version"] = 999
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(HarnessError, match="format 999"):
        store.Run(path)


def _context(tmp_path, repeat=0, tolerance=0.0):
    """A Context for an experiment that declares no tables (so rows are not checked against one)."""
    from harness.core.servers import ServerStack
    from harness.experiments.base import Context, Experiment, Params

    class Probe(Experiment):
        name, title, needs, failure_tolerance = "probe", "cells of one repeat", (), tolerance

    return Context(Probe(), Params(), ServerStack(), tmp_path, repeat)


def test_a_cell_with_any_failed_operation_is_failed(tmp_path):
    """A repeat can finish while its server died halfway: the cell says so, with the first error."""
    from harness.running import worker

    ctx = _context(tmp_path)
    ctx.record("samples", [{"variant": "a", "ok": True, "error": ""},
                           {"variant": "b", "ok": True, "error": ""},
                           {"variant": "b", "ok": False, "error": "AutoReconnect: connection closed"},
                           {"variant": "b", "ok": False, "error": "ServerSelectionTimeoutError"}])
    ctx.skip("c", "not on this server")
    cells = {c["variant"]: c for c in worker.cells(ctx)}
    assert cells["a"]["status"] == "ok" and cells["a"]["ops"] == 1
    assert cells["b"]["status"] == "failed" and (cells["b"]["ops"], cells["b"]["failed_ops"]) == (3, 2)
    assert "2 of 3 operations failed, first: AutoReconnect: connection closed" in cells["b"]["reason"]
    assert cells["c"] == {"variant": "c", "status": "skipped", "reason": "not on this server", "ops": 0,
                          "failed_ops": 0}
    assert store.experiment_status(list(cells.values())) == "partial"


def test_failure_tolerance_and_infrastructure_failures(tmp_path):
    from harness.experiments import registry
    from harness.running import worker

    assert registry.get("fastapi_locust").failure_tolerance == 0.01
    ctx = _context(tmp_path, tolerance=0.01)
    rows = [{"variant": "under", "ok": i > 0, "infrastructure": False} for i in range(200)]   # 0.5%
    rows += [{"variant": "over", "ok": i > 2, "infrastructure": False} for i in range(100)]   # 3%
    rows += [{"variant": "refused", "ok": i > 0, "infrastructure": i == 0} for i in range(1000)]
    ctx.record("samples", rows)
    status = {c["variant"]: c["status"] for c in worker.cells(ctx)}
    assert status == {"under": "ok", "over": "failed", "refused": "failed"}


def test_a_crashed_repeat_fails_every_cell_and_failures_table_fails_its_variant(tmp_path):
    from harness.running import worker

    ctx = _context(tmp_path)
    ctx.record("samples", [{"variant": "a", "ok": True}])
    ctx.record("failures", [{"variant": "b", "error": "timed out after 60 s"}])
    cells = {c["variant"]: c for c in worker.cells(ctx)}
    assert cells["a"]["status"] == "ok" and cells["b"]["status"] == "failed"
    assert cells["b"]["reason"] == "timed out after 60 s"
    crashed = worker.cells(ctx, crash="RuntimeError: boom")
    assert {c["status"] for c in crashed} == {"failed"} and {c["variant"] for c in crashed} == {"a", "b"}
    assert worker.cells(_context(tmp_path), crash="RuntimeError: boom")[0]["variant"] == "*"


@pytest.mark.parametrize("statuses, expected", [
    (["ok", "ok"], "ok"), (["ok", "skipped"], "ok"), (["skipped", "skipped"], "skipped"),
    (["failed", "skipped"], "failed"), (["failed"], "failed"), (["ok", "failed"], "partial"), ([], "failed"),
])
def test_experiment_status_from_cells(statuses, expected):
    assert store.experiment_status([{"status": s} for s in statuses]) == expected


def test_order_is_reversed_on_odd_repeats(tmp_path):
    assert _context(tmp_path, repeat=0).order("abc") == ["a", "b", "c"]
    assert _context(tmp_path, repeat=1).order("abc") == ["c", "b", "a"]
    assert _context(tmp_path, repeat=2).order(["x", "y"]) == ["x", "y"]


def test_table_keeps_rows_of_ok_cells_only(tmp_path):
    w = store.RunWriter(tmp_path, "cells", {"profile": "smoke", "experiments": {"x": {"status": "partial"}}})
    for k, cells in enumerate([[("a", "ok"), ("b", "failed"), ("c", "skipped")], [("a", "ok"), ("b", "ok")]]):
        d = w.repeat_dir("x", k)
        pd.DataFrame({"variant": [v for v, _ in cells], "latency_s": 0.1}).to_parquet(d / "samples.parquet")
        pd.DataFrame({"seq": [1, 2]}).to_parquet(d / "probe.parquet")
        (d / "result.json").write_text(json.dumps({"status": "ok", "cells": [
            {"variant": v, "status": s, "reason": None if s == "ok" else "why", "ops": 1, "failed_ops": 0}
            for v, s in cells]}))
    run = store.Run(w.commit("complete"))
    assert run.cells("x")[["repeat", "variant", "status"]].values.tolist() == [
        [0, "a", "ok"], [0, "b", "failed"], [0, "c", "skipped"], [1, "a", "ok"], [1, "b", "ok"]]
    kept = run.table("x", "samples")
    assert kept[["repeat", "variant"]].values.tolist() == [[0, "a"], [1, "a"], [1, "b"]]
    assert len(run.table("x", "samples", ok_only=False)) == 5
    # a table without a variant column: only repeats whose cells are all ok or skipped
    assert run.table("x", "probe")["repeat"].unique().tolist() == [1]


def test_format_1_runs_are_read_with_one_cell_per_repeat(tmp_path):
    w = _write_run(tmp_path, "old", "complete")
    w.manifest["format_version"] = 1
    run = store.Run(w.commit("complete"))
    assert run.cells("x")[["repeat", "variant", "status"]].values.tolist() == [[0, None, "ok"]]
    assert len(run.table("x", "samples")) == 1


@pytest.mark.parametrize("make_bad", ["under_a_file", "proc"])
def test_unusable_data_dir_is_one_line_naming_the_path(tmp_path, make_bad):
    if make_bad == "under_a_file":
        (tmp_path / "file").write_text("")
        bad = tmp_path / "file" / "data"
    else:
        bad = Path("/proc/harness-no-such-dir")   # cannot be created, even by root
    with pytest.raises(HarnessError) as e:
        store.check_writable(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(HarnessError):
        store.RunWriter(bad, "r", {})


def test_a_run_that_cannot_be_written_is_never_published(tmp_path):
    import shutil

    _write_run(tmp_path, "good", "complete").commit("complete")
    w = _write_run(tmp_path, "broken", "running")
    shutil.rmtree(w.path)   # as if the disk went away under the run
    with pytest.raises(store.RunWriteError, match="could not write"):
        w.commit("complete")
    assert os.readlink(tmp_path / "runs" / "latest") == "good"
    assert not (tmp_path / "runs" / "broken").exists()


def test_schedule_is_round_robin():
    from harness.running import study

    planned = [study.Planned(registry_exp, None, n) for registry_exp, n in
               ((_exp("mongo_pool"), 3), (_exp("pg_models"), 1), (_exp("mongo_client"), 2))]
    order = [(p.experiment.name, k) for p, k in study.schedule(planned)]
    assert order == [("mongo_pool", 0), ("pg_models", 0), ("mongo_client", 0),
                     ("mongo_pool", 1), ("mongo_client", 1), ("mongo_pool", 2)]


def _exp(name):
    from harness.experiments import registry

    return registry.get(name)


def test_repeats_follow_the_profile_unless_overridden():
    from harness.experiments import registry
    from harness.running import study

    for p in study.plan(list(registry.all_experiments()), "full"):
        # the profiled pass runs once, after every measured repeat; it is judged by nothing
        assert p.repeats == 1 if p.experiment.after_repeats else p.repeats >= 3, p.experiment.name
    assert {p.repeats for p in study.plan(list(registry.all_experiments()), "smoke")} == {1}
    assert {p.repeats for p in study.plan(list(registry.all_experiments()), "quick")} == {1}  # issue 10: quick <= 4 min
    assert {p.repeats for p in study.plan(["mongo_pool", "pg_models"], "full", repeat=2)} == {2}


def test_a_malformed_manifest_is_one_line_naming_the_file(tmp_path):
    d = tmp_path / "runs" / "broken"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text("{")
    with pytest.raises(HarnessError, match="malformed manifest.json") as e:
        store.open_run("broken", tmp_path)
    assert "\n" not in str(e.value) and str(d / "manifest.json") in str(e.value)
    assert [r["status"] for r in store.list_runs(tmp_path)] == ["unreadable"]
