"""Raw tables stored compactly (core/tables.py): times as integers at their clock's resolution, read
back as the seconds that were recorded; a table of the older format reads as it is; and the committed
reference, converted, re-judges to its committed summary."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from conftest import harness

from harness.core import tables
from harness.core.config import REPO_ROOT

REFERENCE = next((REPO_ROOT / "data" / "reference").iterdir())


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 1000
    return pd.DataFrame({
        "variant": np.where(np.arange(n) % 2, "a[x=1]", "b[x=2]"),
        "task": np.arange(n) % 7,
        "start_s": np.sort(rng.uniform(0, 30, n)),              # perf_counter offsets: nanoseconds
        "latency_s": rng.exponential(0.005, n),
        "pgbench_s": rng.integers(1, 10**6, n) / 1e6,            # whole microseconds
        "cpu_s": rng.integers(0, 500, n) / 100,                  # 10 ms ticks
        "epoch_s": 1.7e9 + rng.uniform(0, 100, n),               # an epoch time: stays float64
        "requests_s": rng.uniform(0, 900, n),                    # Locust's rate, not seconds
        "wait_s": np.where(np.arange(n) % 5 == 0, np.nan, rng.uniform(0, 1, n)),
        "ok": np.arange(n) % 11 != 0,
        "error": np.where(np.arange(n) % 11 == 0, "timeout", None),
        "slow_ms": 10.0,
    })


def test_times_are_integers_at_their_resolution_and_read_back_as_recorded(tmp_path):
    df = _frame()
    path = tmp_path / "samples.parquet"
    tables.write_table(df, path)
    stored = pq.read_table(path)
    meta = json.loads(stored.schema.metadata[tables.FORMAT_KEY])
    assert meta["times"] == {"start_s": "ns", "latency_s": "ns", "pgbench_s": "us", "cpu_s": "ms",
                             "wait_s": "ns"}
    names = set(stored.column_names)
    assert {"start_ns", "latency_ns", "pgbench_us", "cpu_ms", "wait_ns", "epoch_s", "requests_s"} <= names
    assert not {"start_s", "latency_s", "cpu_s"} & names
    assert str(stored.schema.field("start_ns").type) == "int64"
    back = tables.read_table(path)
    assert list(back.columns) == list(df.columns)
    for c in df.columns:
        if df[c].dtype.kind == "f":
            assert back[c].dtype == np.float64 and (back[c].isna() == df[c].isna()).all(), c
            err = np.nanmax(np.abs(back[c].to_numpy() - df[c].to_numpy()))
            assert err < 1e-9 if c in meta["times"] else err == 0, (c, err)
        else:
            assert back[c].astype(str).equals(df[c].astype(str)), c
    # the integers are the clock's readings: whole microseconds come back exactly
    assert (back["pgbench_s"] == df["pgbench_s"]).all() and (back["cpu_s"] == df["cpu_s"]).all()


def test_a_table_of_the_older_format_reads_as_it_is(tmp_path):
    df = _frame()
    path = tmp_path / "old.parquet"
    df.to_parquet(path, index=False)          # format 1: float seconds, Snappy, no metadata
    assert tables.FORMAT_KEY not in (pq.read_table(path).schema.metadata or {})
    pd.testing.assert_frame_equal(tables.read_table(path), df)
    smaller = tmp_path / "new.parquet"
    tables.write_table(df, smaller)
    assert smaller.stat().st_size < path.stat().st_size


def test_the_reference_is_stored_compactly_and_once():
    parquet = sorted(REFERENCE.rglob("*.parquet"))
    assert parquet and all(tables.FORMAT_KEY in (pq.read_schema(f).metadata or {}) for f in parquet)
    # pgbench's per-transaction logs and Locust's per-request CSVs are in the samples tables
    assert not list(REFERENCE.rglob("artifacts/*.log.gz")) and not list(REFERENCE.rglob("samples-a*"))
    assert not (REFERENCE / "report" / "notebooks").exists() and (REFERENCE / "report" / "index.html").is_file()


# What re-judging the converted reference may change, and by how much. Times were rounded to the
# nanosecond, so a figure moves by at most about a nanosecond's worth: an absolute 1e-6 (a figure in
# ms; a coefficient of variation of 0 read as 1e-16), or relative to the figure 2e-5 (its smallest
# time figures are 0.1 ms, on which a nanosecond is 1e-5: their CVs; tail p-values move by 4e-8).
TOLERANCE_REL, TOLERANCE_ABS = 2e-5, 1e-6
# Text the code writes afresh rather than reads from the raw data.
REWRITTEN = {".methods"}


def test_the_converted_reference_rejudges_to_its_committed_summary(tmp_path):
    """The committed summary was re-judged from the converted tables; before, from the float64
    tables, the two agreed within this tolerance (944 numbers differed by more than 1e-9 of
    themselves, the largest a CV by 8.5e-6; every verdict the same)."""
    copy = tmp_path / REFERENCE.name
    shutil.copytree(REFERENCE, copy, ignore=shutil.ignore_patterns("report", "servers", "artifacts", "*.log"))
    done = harness("summarise", "--data-dir", str(tmp_path), str(copy), timeout=300)
    assert done.returncode == 0, done.stderr
    committed = json.loads((REFERENCE / "summary.json").read_text())
    again = json.loads((copy / "summary.json").read_text())

    def compare(a, b, path: str) -> None:
        if any(path.startswith(p) for p in REWRITTEN):
            return
        if isinstance(a, dict) and isinstance(b, dict):
            assert set(a) == set(b), path
            for k in a:
                compare(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), path
            for x, y in zip(a, b):
                where = f"{path}[{x.get('claim_id') or x.get('experiment', '')}.{x.get('variant', '')}." \
                        f"{x.get('metric', '')}]" if isinstance(x, dict) else path
                compare(x, y, where)
        elif isinstance(a, float) and isinstance(b, float):
            if not (math.isnan(a) and math.isnan(b)) and a != b:
                assert abs(a - b) <= TOLERANCE_ABS + TOLERANCE_REL * max(abs(a), abs(b)), (path, a, b)
        else:
            assert a == b, (path, a, b)

    compare(committed, again, "")
    claims = {c["claim_id"]: c["verdict"] for c in committed["claims"]}
    assert claims == {c["claim_id"]: c["verdict"] for c in again["claims"]}, "every verdict as committed"
