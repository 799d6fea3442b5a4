"""Adding an experiment to a family takes three files: the experiment's module (its parameters, its
measurement, the metrics it declares and how they are computed), its rows in the claims ledger, and
its test. This test is the proof: in a copy of the package it adds a small PostgreSQL experiment and
two ledger rows, touches no other file, and runs it through `harness run`, the summary and `show`
against the session's real servers."""

from __future__ import annotations

import csv
import math
import os
import shutil
import subprocess
import sys

from conftest import finished_run

from harness.core import config, store

EXPERIMENT = '''"""Sequential `SELECT 1` round trips on one connection: a test's small experiment."""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from ..base import Experiment, Metric, Params


@dataclass(frozen=True)
class RoundTripParams(Params):
    queries: int = 200


class RoundTrip(Experiment):
    name = "pg_round_trip"
    title = "Sequential SELECT 1 round trips"
    needs = ("postgres",)
    params_type = RoundTripParams
    profiles = {"seed": {}, "full": {}, "quick": {}, "smoke": {"queries": 50, "warmup_s": 0.0}}
    family = "postgres"
    tables = {"samples": {"variant": "str", "task": "int", "start_s": "float", "latency_s": "float", "ok": "bool"}}
    metrics = (Metric("p50_ms", "ms", "lower"), Metric("queries", "count", ""))
    headline = (Metric("p50_ms", "ms", "lower"),)

    def run(self, ctx) -> None:
        rows = []
        with psycopg.connect(ctx.servers.postgres_dsn) as conn:
            t0 = time.perf_counter()
            for _ in range(ctx.params.queries):
                start = time.perf_counter()
                conn.execute("SELECT 1")
                rows.append({"variant": "select", "task": 0, "start_s": start - t0,
                             "latency_s": time.perf_counter() - start, "ok": True})
        ctx.record("samples", rows)

    def compute_metrics(self, run, rows) -> None:
        for rep, g in run.table(self.name, "samples").groupby("repeat"):
            rows.put("select", "p50_ms", rep, 1000 * g["latency_s"].median())
            rows.put("select", "queries", rep, len(g))


EXPERIMENT = RoundTrip()
'''

LEDGER_ROWS = [
    {"claim_id": "002-trip-01", "document": "002", "kind": "measurement", "section": "test",
     "sentence": "a round trip on loopback takes well under a millisecond", "seed_value": "1", "seed_unit": "ms",
     "comparison": "absolute", "a": "{pg_round_trip.select.p50_ms}", "role": "postgres",
     "note": "added by tests/test_new_experiment.py"},
]


def test_an_experiment_added_to_a_family_in_three_files_runs_through_the_study(stack, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(config.REPO_ROOT / "harness", root / "harness",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(config.REPO_ROOT / "examples", root / "examples")   # the workload files verify's versions read
    for name in ("pyproject.toml", "requirements.lock"):
        shutil.copy(config.REPO_ROOT / name, root / name)
    # 1. the experiment, in the family's folder
    (root / "harness/experiments/postgres/round_trip.py").write_text(EXPERIMENT)
    # 2. its ledger rows
    ledger = root / "harness/core/claims_ledger.csv"
    with ledger.open(newline="") as f:
        columns = next(csv.reader(f))
    with ledger.open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=columns).writerows([{c: row.get(c, "") for c in columns} for row in LEDGER_ROWS])
    # 3. this test. Nothing else changes: the copy differs from the package by these two files alone
    files = {str(p.relative_to(root)) for p in (root / "harness").rglob("*") if p.is_file()}
    added = {f for f in files if not (config.REPO_ROOT / f).exists()}
    changed = {f for f in files - added if (root / f).read_bytes() != (config.REPO_ROOT / f).read_bytes()}
    assert changed == {"harness/core/claims_ledger.csv"} and added == {"harness/experiments/postgres/round_trip.py"}

    env = dict(os.environ, PYTHONPATH=str(root), STUDY_POSTGRES_DSN=stack.postgres_dsn,
               STUDY_MONGODB_URI=stack.mongodb_uri, PYTHONUNBUFFERED="1")

    def harness(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)

    listed = harness("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "pg_round_trip" in listed.stdout
    data = tmp_path / "data"
    done = harness("run", "pg_round_trip", "--profile", "smoke", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr[-3000:]
    run = finished_run(data, done.stderr)
    summary = store.load_summary(run.path)
    figures = {(f["experiment"], f["variant"], f["metric"]): f for f in summary["metrics"]}
    p50 = figures[("pg_round_trip", "select", "p50_ms")]
    assert p50["unit"] == "ms" and p50["better"] == "lower" and p50["n_repeats"] == 1 and 0 < p50["median"] < 1000
    assert p50["headline"] and figures[("pg_round_trip", "select", "queries")]["median"] == 50
    claims = {c["claim_id"]: c for c in summary["claims"]}
    assert "002-trip-01" in claims and math.isclose(claims["002-trip-01"]["estimate"], p50["median"], rel_tol=1e-9)
    shown = harness("show", str(run.path.name), "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    assert "pg_round_trip" in shown.stdout and "002-trip-01" in shown.stdout
