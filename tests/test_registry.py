"""Every registered experiment, from its declarations (experiments/base.py, contract C5) and the
session's smoke run of all of them (conftest `smoke_run`, through `harness run all` as users run it):
it finishes ok at smoke size, what it stored is on its declared schema, and it has an analysis
module whose metrics hold its headline figures. Adding an experiment adds it here: no list to edit.

Plus the declarations' machinery itself, without servers: the grid expansion and the schema check.
"""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import REPO_ROOT

from harness import registry
from harness.core import calibration, store
from harness.core.errors import HarnessError
from harness.experiments.base import Metric, check_table, grid, variant_id

NAMES = list(registry.all_experiments())


def test_every_experiment_module_is_registered():
    assert {"mongo_cursor", "mongo_pool", "mongo_client", "mongo_bulk", "mongo_models", "pg_models",
            "pg_ceiling", "fastapi_locust"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_declarations(name):
    exp = registry.get(name)
    assert exp.tables, f"{name} declares no table schemas"
    assert "samples" in exp.tables or "windows" in exp.tables, f"{name}: neither samples nor windows"
    assert exp.headline and all(isinstance(m, Metric) for m in exp.headline), f"{name}: no headline metrics"
    assert exp.repeats.get("smoke") == 1 and exp.repeats.get("full", 0) >= 3, exp.repeats
    assert exp.repeats.get("seed", 0) >= 3, exp.repeats
    module = registry.analysis_of(name)
    assert module is not None, f"{name} declares no analysis module"
    assert callable(getattr(module, "metrics", None)), f"{exp.analysis} has no metrics(run)"
    # the traits the summary, compare and report read instead of the name (issue 33, item 3)
    assert exp.family, f"{name} declares no family"
    assert exp.ceiling in (*calibration.CEILINGS, None), exp.ceiling
    assert exp.drivers and all(isinstance(d, str) for d in exp.drivers), f"{name} declares no drivers"
    assert not exp.notebook or (REPO_ROOT / "notebooks" / exp.notebook).is_file(), exp.notebook


@pytest.mark.parametrize("name", NAMES)
def test_finishes_ok_at_smoke_size(smoke_run: store.Run, name):
    entry = smoke_run.experiments.get(name)
    assert entry is not None, f"{name} is not in the session's smoke run"
    assert entry["status"] == "ok", f"{name}: {entry.get('status')}: {entry.get('error') or entry.get('repeats')}"


@pytest.mark.parametrize("name", NAMES)
def test_stored_tables_are_on_schema(smoke_run: store.Run, name):
    """What reached disk (after Parquet's round trip) is still what the experiment declares."""
    exp = registry.get(name)
    repeats = smoke_run.repeat_dirs(name)
    assert repeats, f"{name} stored no repeat"
    for k, d in repeats:
        stored = sorted(d.glob("*.parquet"))
        assert stored, f"{name} r{k} stored no table"
        for f in stored:
            check_table(name, exp.tables, f.stem, pd.read_parquet(f))


@pytest.mark.parametrize("name", NAMES)
def test_analysis_names_the_headline_metrics(smoke_run: store.Run, name):
    exp = registry.get(name)
    frame = registry.analysis_of(name).metrics(smoke_run)
    mine = frame[frame["experiment"] == name]
    assert len(mine), f"{exp.analysis}.metrics gives no figure of {name}"
    for m in exp.headline:
        rows = mine[mine["metric"] == m.name]
        assert len(rows), f"headline {m.name} of {name} is not among {sorted(set(mine['metric']))}"
        assert set(rows["unit"]) == {m.unit}, f"{name}.{m.name}: unit {set(rows['unit'])} vs declared {m.unit}"
        assert set(rows["better"]) == {m.better}, f"{name}.{m.name}: better {set(rows['better'])}"


# -- the machinery, no servers ---------------------------------------------------------------------

def test_a_worker_loads_its_experiment_from_its_own_module_alone():
    """`registry.load` (what each repeat's worker calls) gives the registry's experiment, importing
    only the module that declares it; a module that does not declare it falls back to the registry."""
    import json
    import subprocess
    import sys

    exp = registry.get("pg_models")
    module = type(exp).__module__
    assert registry.load("pg_models", module) is exp
    assert registry.load("pg_models", "harness.experiments.mongo.pool") is exp   # declares another
    assert registry.load("pg_models", "json") is exp                             # outside the package
    probe = (f"import json, sys; from harness import registry; e = registry.load('pg_models', {module!r}); "
             "print(json.dumps([e.name, sorted(m for m in sys.modules if m.startswith('harness.experiments.')"
             " and m.count('.') == 3)]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    name, loaded = json.loads(out.stdout)
    assert name == "pg_models"
    assert {m.split(".")[2] for m in loaded} == {"postgres"}, loaded   # no other family's module


def test_grid_expands_every_combination_first_axis_slowest():
    points = grid(loop=("asyncio", "uvloop"), pool=(10, 20), driver="pymongo")
    assert points == [{"loop": "asyncio", "pool": 10, "driver": "pymongo"},
                      {"loop": "asyncio", "pool": 20, "driver": "pymongo"},
                      {"loop": "uvloop", "pool": 10, "driver": "pymongo"},
                      {"loop": "uvloop", "pool": 20, "driver": "pymongo"}]
    assert [variant_id("bare", **p) for p in points][1] == "bare[loop=asyncio,pool=20,driver=pymongo]"
    assert grid(pool=()) == []
    assert variant_id("async", semaphore=True) == "async[semaphore=on]"


SCHEMA = {"samples": {"variant": "str", "latency_s": "float", "ok": "bool", "task": "int"}}


def test_schema_check_accepts_a_table_on_schema():
    """Missing values, ints in a float column and whole floats in an int column are on schema; the
    same table with any one column's value of the wrong kind is not (so the check read the values)."""
    good = {"variant": ["a", None], "latency_s": [0.1, 2], "ok": [True, False], "task": [0.0, float("nan")]}
    assert check_table("x", SCHEMA, "samples", pd.DataFrame(good)) is None
    wrong = {"variant": 3, "latency_s": "slow", "ok": "yes", "task": 0.5}
    for column, value in wrong.items():
        bad = pd.DataFrame({**good, column: [value, good[column][1]]})
        with pytest.raises(HarnessError, match=rf"wrong kind: {column} \(not {SCHEMA['samples'][column]}\)"):
            check_table("x", SCHEMA, "samples", bad)


@pytest.mark.parametrize("table, frame, words", [
    ("other", pd.DataFrame({"a": [1]}), ["other", "does not declare", "samples"]),
    ("samples", pd.DataFrame({"variant": ["a"], "ok": [True], "task": [1]}), ["missing", "latency_s"]),
    ("samples", pd.DataFrame({"variant": ["a"], "latency_s": [1.0], "ok": [True], "task": [1], "extra": [1]}),
     ["undeclared", "extra"]),
    ("samples", pd.DataFrame({"variant": ["a"], "latency_s": ["slow"], "ok": [True], "task": [1.5]}),
     ["wrong kind", "latency_s (not float)", "task (not int)"]),
])
def test_schema_check_names_the_table_and_columns(table, frame, words):
    with pytest.raises(HarnessError) as info:
        check_table("x", SCHEMA, table, frame)
    message = str(info.value)
    assert table in message and all(w in message for w in words), message


@pytest.mark.parametrize("name", NAMES)
def test_version_hashes_the_experiments_code_and_its_resolved_parameters(name):
    exp = registry.get(name)
    sources = registry.version_sources(name)
    assert type(exp).__module__ in sources and exp.analysis in sources, list(sources)
    assert "harness.experiments.base" not in sources and "harness.core.stats" not in sources
    full, smoke = exp.params("full"), exp.params("smoke")
    v = registry.version(name, full)
    assert len(v) == registry.VERSION_CHARS and v == registry.version(name, full.to_dict())
    if full.to_dict() != smoke.to_dict():
        assert registry.version(name, smoke) != v, "the parameters are part of the version"


def test_version_follows_the_workload_modules_an_experiment_uses(monkeypatch, tmp_path):
    assert {"harness.experiments.mongo.workload", "harness.core.datasets"} \
        <= set(registry.version_sources("mongo_pool"))
    assert "harness.experiments.postgres.workload" not in registry.version_sources("mongo_pool")
    # a sibling experiment of the family's folder, and the family's package, are not part of it
    hashed = set(registry.version_sources("mongo_pool"))
    assert not {"harness.experiments.mongo.cursor", "harness.experiments.mongo"} & hashed
    # a module run as a child ("harness.experiments.departures.child") and a package used by name (the FastAPI app
    # and the locustfile beside it) count too
    assert "harness.experiments.departures.child" in registry.version_sources("departures")
    assert {"harness.experiments.fastapi.apps.listings_api", "harness.experiments.fastapi.apps.locustfile",
            "harness.experiments.fastapi.params"} <= set(registry.version_sources("fastapi_locust"))
    # editing a workload module's source changes the version
    params = registry.get("mongo_pool").params("full")
    before = registry.version("mongo_pool", params)
    real = registry.version_sources("mongo_pool")
    copy = tmp_path / "mongo_workload.py"
    copy.write_text(real["harness.experiments.mongo.workload"].read_text() + "\n# changed\n")
    monkeypatch.setattr(registry, "version_sources", lambda name: {**real, "harness.experiments.mongo.workload": copy})
    assert registry.version("mongo_pool", params) != before
