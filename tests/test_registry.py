"""Every registered experiment, from its declarations (experiments/base.py, contract C5) and the
session's smoke run of all of them (conftest `smoke_run`, through `harness run all` as users run it):
it finishes ok at smoke size, what it stored is on its declared schema, and it has an analysis
module whose metrics hold its headline figures. Adding an experiment adds it here: no list to edit.

Plus the declarations' machinery itself, without servers: the grid expansion and the schema check.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import REPO_ROOT

from harness.core import calibration, store
from harness.core.errors import HarnessError
from harness.core.tables import read_table
from harness.experiments import registry
from harness.experiments.analysis import MetricRows
from harness.experiments.base import Experiment, Metric, check_table, grid, variant_id
from harness.judging import claims

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
    if exp.after_repeats:   # one pass after every measured repeat (the profiled pass): never repeated
        assert set(exp.repeats.values()) == {1}, exp.repeats
    else:
        assert exp.repeats.get("smoke") == 1 and exp.repeats.get("full", 0) >= 3, exp.repeats
        assert exp.repeats.get("seed", 0) >= 3, exp.repeats
    module = registry.analysis_of(name)
    assert module is not None, f"{name} declares no analysis module"
    # every figure it gives is declared once, with a unit and a direction; the headline among them
    names = [m.name for m in exp.metrics]
    assert names and len(names) == len(set(names)), f"{name} declares no figures, or one twice"
    assert all(m.unit for m in exp.metrics), f"{name}: a declared figure without a unit"
    assert type(exp).compute_metrics is not Experiment.compute_metrics, f"{name} computes no figures"
    for h in exp.headline:
        declared = MetricRows(name, exp.metrics).declared(h.name)
        assert (declared.unit, declared.better) == (h.unit, h.better), f"{name}: headline {h} not as declared"
    # the traits the summary, compare and report read instead of the name
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
            check_table(name, exp.tables, f.stem, read_table(f))


@pytest.mark.parametrize("name", NAMES)
def test_analysis_names_the_headline_metrics(smoke_run: store.Run, name):
    exp = registry.get(name)
    frame = claims.experiment_metrics(smoke_run, name)
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
    probe = (f"import json, sys; from harness.experiments import registry; e = registry.load('pg_models', {module!r}); "
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
    parts = registry.version_parts(name)
    assert parts[type(exp).__module__] == {registry.WHOLE: parts[type(exp).__module__][registry.WHOLE]}
    assert "harness.experiments.base" not in parts and "harness.core.stats" not in parts
    assert any(m.endswith(".analysis") for m in parts), "the metric code it declares is part of its version"
    full, smoke = exp.params("full"), exp.params("smoke")
    v = registry.version(name, full)
    assert len(v) == registry.VERSION_CHARS and v == registry.version(name, full.to_dict())
    if full.to_dict() != smoke.to_dict():
        assert registry.version(name, smoke) != v, "the parameters are part of the version"


def _source(module: str) -> str:
    return registry._source_file(module).read_text()


def _edited(module: str, old: str, new: str) -> dict[str, str]:
    text = _source(module)
    assert text.count(old) >= 1, f"{old!r} not in {module}"
    return {module: text.replace(old, new, 1)}


def _versions(sources: dict[str, str] | None = None) -> dict[str, str]:
    return {n: registry.version(n, registry.get(n).params("full"), sources) for n in NAMES}


def test_an_experiments_version_is_its_own_code():
    before = _versions()
    # a sibling's code: only the sibling moves
    sibling = _edited("harness.experiments.mongo.bulk", "rows.put(\"\", \"dup_index\", rep, r.dup_index)",
                      "rows.put(\"\", \"dup_index\", rep, r.dup_index + 0)")
    after = _versions(sibling)
    assert {n for n in NAMES if after[n] != before[n]} == {"mongo_bulk"}
    # a docstring and a comment of its own module: nothing moves
    text = _source("harness.experiments.mongo.pool")
    quiet = text.replace('"""', '"""Edited. ', 1) + "\n# a comment added\n"
    assert _versions({"harness.experiments.mongo.pool": quiet}) == before
    # a shared workload function it calls: it moves, and so does every experiment that calls it
    # (mongo_bulk does not use the pool-fairness driver)
    workload = _edited("harness.experiments.mongo.workload", "def async_variant(ctx: Any, variant: str, *,",
                       "def async_variant(ctx: Any, variant: str, *, _unused=0,")
    moved = {n for n, v in _versions(workload).items() if v != before[n]}
    assert "mongo_pool" in moved and "mongo_bulk" not in moved and "pg_models" not in moved, moved
    # the family analysis: a function of another experiment's metrics leaves it alone, its own moves it
    other = _edited("harness.experiments.mongo.analysis", "def bulk_duplicates(run: Run) -> pd.DataFrame:\n",
                    "def bulk_duplicates(run: Run) -> pd.DataFrame:\n    run = run\n")
    moved = {n for n, v in _versions(other).items() if v != before[n]}
    assert moved == {"mongo_bulk"}, moved


def test_a_version_set_by_hand_stands_for_the_code(monkeypatch):
    params = registry.get("mongo_pool").params("full")
    monkeypatch.setattr(type(registry.get("mongo_pool")), "version", "2")
    by_hand = registry.version("mongo_pool", params)
    own = _edited("harness.experiments.mongo.pool", "MODES = (", "MODES = ((), ")
    assert registry.version("mongo_pool", params, own) == by_hand, "the code is not read"
    assert registry.version("mongo_pool", registry.get("mongo_pool").params("smoke")) != by_hand


def test_version_follows_workload_definitions_and_programs():
    parts = registry.version_parts("mongo_pool")
    assert "harness.experiments.mongo.workload" in parts and "harness.core.datasets" in parts
    assert "harness.experiments.postgres.workload" not in parts
    # a sibling experiment of the family's folder, and the family's package, are not part of it
    assert not {"harness.experiments.mongo.cursor", "harness.experiments.mongo"} & set(parts)
    # a module run as a child ("harness.experiments.departures.child") and a package of the folder named
    # by path (the FastAPI app and the locustfile beside it) count whole
    assert registry.version_parts("departures")["harness.experiments.departures.child"].keys() == {registry.WHOLE}
    fastapi = registry.version_parts("fastapi_locust")
    assert {"harness.experiments.fastapi.apps.listings_api", "harness.experiments.fastapi.apps.locustfile",
            "harness.experiments.fastapi.params"} <= set(fastapi)


def test_a_version_recorded_before_own_code_versions_reads_as_todays_name():
    aliases = store._version_aliases()
    readings = json.loads(store.VERSION_ALIASES.read_text())["readings_added"]
    assert aliases, "the one-off map from versions of the old scheme"
    for name, pairs in aliases.items():
        if name in readings:   # code that only added readings: both earlier versions name the new one
            assert set(pairs.values()) == {readings[name]["to"]} and readings[name]["from"] in pairs, name
            assert readings[name]["why"], name
        else:
            assert len(set(pairs.values())) == len(pairs), f"{name}: two old versions map to one new"
        for old, new in pairs.items():
            manifest = {"experiments": {name: {"version": old}, "other": {"version": "0123456789ab"}}}
            assert store.experiment_versions(manifest) == {name: new, "other": "0123456789ab"}
            assert store.experiment_version(manifest, name) == new and store.experiment_version({}, name) is None
