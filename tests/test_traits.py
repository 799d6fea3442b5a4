"""Experiment traits are declared, never parsed from the name (issue 33, item 3): an experiment
whose name has no family prefix keeps its normalisation and its drivers. No servers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.core import store
from harness.experiments import registry
from harness.experiments.base import Experiment, Metric
from harness.judging import claims, summary
from harness.reading import compare, readout


class Renamed(Experiment):
    """A PostgreSQL experiment under a name that no prefix rule would know."""

    name = "client_models_2"
    title = "client models, renamed"
    needs = ("postgres",)
    headline = (Metric("rps", "req/s", "higher"),)
    family = "postgres"
    ceiling = "pgbench"
    drivers = ("asyncpg", "uvloop")
    notebook = "03_postgres_models.ipynb"


@pytest.fixture
def renamed(monkeypatch):
    exps = {**registry.all_experiments(), Renamed.name: Renamed()}
    monkeypatch.setattr(registry, "all_experiments", lambda: exps)
    return Renamed.name


def _run(tmp_path, name: str) -> store.Run:
    d = tmp_path / "20261201T000000Z-full-aaaa"
    d.mkdir()
    part = {"pgbench": {"values": [1000.0, 1000.0, 1000.0]}, "python_cpu": {"values": [5e6, 5e6, 5e6]}}
    (d / "manifest.json").write_text(json.dumps({
        "format_version": store.FORMAT_VERSION, "run_id": d.name, "status": "complete",
        "experiments": {name: {}}, "calibration": {"before": part, "after": part}}))
    return store.Run(d)


def test_a_name_without_a_known_prefix_keeps_its_ceiling(renamed, tmp_path):
    run = _run(tmp_path, renamed)
    frame = pd.DataFrame([{"experiment": renamed, "variant": "v", "metric": "rps", "unit": "req/s", "repeat": k,
                           "value": 500.0, "better": "higher", "bottleneck": ""} for k in range(3)])
    facts = claims.measured(run, frame)
    (row,) = summary.metric_rows(facts)
    assert row["normalised_by"] == "pgbench" and row["normalised"] == pytest.approx(0.5)
    assert registry.ceiling_of(renamed) == "pgbench"
    assert claims._ceiling(facts.ceilings, (f"{renamed}.v.rps",)).startswith("pgbench 1000")
    assert registry.ceiling_of("not_registered") is None


def test_a_name_without_a_known_prefix_keeps_its_drivers(renamed):
    assert renamed in readout.drivers()["asyncpg"] and renamed not in readout.drivers()["pymongo"]

    def manifest(asyncpg: str) -> dict:
        return {"experiments": {renamed: {"params": {}, "version": "v1"}},
                "environment": {"packages": {"asyncpg": asyncpg, "pymongo": "4.20.1"}}}

    rows, bad = compare.checked_metadata(manifest("0.32.0"), manifest("0.31.0"))
    (row,) = [r for r in rows if r["what"] == "driver asyncpg"]
    assert row["why"] == f"shapes {renamed}" and bad == {}
