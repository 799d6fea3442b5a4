"""Run store semantics: written aside, renamed when complete, `latest` never moved by a bad run."""

import json
import os

import pandas as pd
import pytest

from harness import store
from harness.errors import HarnessError


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


def test_failed_operations_are_counted_for_the_manifest(tmp_path):
    """A repeat that finishes while its server died halfway reports how many operations failed."""
    from harness import registry, worker
    from harness.experiments.base import Context
    from harness.servers import ServerStack

    exp = registry.get("mongo_client")
    ctx = Context(exp, exp.params("smoke"), ServerStack(), tmp_path, 0, "smoke")
    ctx.record("samples", [{"variant": "v", "ok": True, "error": ""},
                           {"variant": "v", "ok": False, "error": "AutoReconnect: connection closed"},
                           {"variant": "v", "ok": False, "error": "ServerSelectionTimeoutError"}])
    out = worker._operation_errors(ctx)
    assert out == {"operations": 3, "operation_errors": 2,
                   "first_operation_error": "AutoReconnect: connection closed"}
