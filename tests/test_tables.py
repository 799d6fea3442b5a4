"""Raw tables stored compactly (core/tables.py): times as integers of microseconds (format 3), read
back as the seconds that were recorded to within half a microsecond, the samples ordered by variant
and start; a table of an older format reads as it is; and the committed reference re-judges to its
committed summary."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
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


def test_times_are_integers_of_microseconds_and_read_back_as_recorded(tmp_path):
    df = _frame()
    path = tmp_path / "samples.parquet"
    tables.write_table(df, path)
    stored = pq.read_table(path)
    meta = json.loads(stored.schema.metadata[tables.FORMAT_KEY])
    assert meta["format"] == tables.FORMAT == 3 == tables.stored_format(path)
    assert meta["times"] == {"start_s": "us", "latency_s": "us", "pgbench_s": "us", "cpu_s": "ms",
                             "wait_s": "us"}
    names = set(stored.column_names)
    assert {"start_us", "latency_us", "pgbench_us", "cpu_ms", "wait_us", "epoch_s", "requests_s"} <= names
    assert not {"start_s", "latency_s", "cpu_s"} & names
    assert str(stored.schema.field("start_us").type) == "int64"
    back = tables.read_table(path)
    assert list(back.columns) == list(df.columns)
    recorded = tables.stored_order(df)          # the rows as stored: by variant, then start
    for c in df.columns:
        if df[c].dtype.kind == "f":
            assert back[c].dtype == np.float64 and (back[c].isna() == recorded[c].isna()).all(), c
            err = np.nanmax(np.abs(back[c].to_numpy() - recorded[c].to_numpy()))
            # half a microsecond, and the float64 rounding of a value up to 30 s
            assert err <= 0.5e-6 + 1e-14 if c in meta["times"] else err == 0, (c, err)
        else:
            assert back[c].astype(str).equals(recorded[c].astype(str)), c
    # whole microseconds and milliseconds (pgbench's log, CPU ticks) come back exactly
    assert (back["pgbench_s"] == recorded["pgbench_s"]).all() and (back["cpu_s"] == recorded["cpu_s"]).all()


def test_samples_are_stored_by_variant_then_start_and_other_tables_as_recorded(tmp_path):
    """Sorted starts are what delta encoding stores in fewest bits; the variants keep the order they
    were first recorded in, rows that tie keep theirs, and a missing start goes last."""
    df = pd.DataFrame({"variant": ["b", "a", "b", "a", "b", "a"], "start_s": [3.0, 2.0, 1.0, np.nan, 1.0, 0.5],
                       "seq": range(6)})
    tables.write_table(df, tmp_path / "samples.parquet")
    back = tables.read_table(tmp_path / "samples.parquet")
    assert list(back["seq"]) == [2, 4, 0, 5, 1, 3]
    no_start = df.drop(columns="start_s")
    tables.write_table(no_start, tmp_path / "windows.parquet")
    pd.testing.assert_frame_equal(tables.read_table(tmp_path / "windows.parquet"), no_start)
    # every row is kept, as a multiset
    big = _frame()
    tables.write_table(big, tmp_path / "big.parquet")
    again = tables.read_table(tmp_path / "big.parquet")
    assert sorted(again["task"].astype(str) + again["variant"]) == sorted(big["task"].astype(str) + big["variant"])


def test_a_table_of_format_2_reads_to_the_nanosecond_and_a_run_rewrites_to_format_3(tmp_path):
    """Format 2 (integers down to the nanosecond, rows as recorded) reads through the same reader;
    `rewrite_run` stores it again in format 3, smaller, and leaves a format-3 table alone."""
    df = _frame()
    ns = np.rint(df["start_s"].to_numpy() * 1e9).astype("int64")
    old = pd.DataFrame({"variant": df["variant"], "start_ns": ns})
    table = pa.Table.from_pandas(old, preserve_index=False)
    meta = {"format": 2, "times": {"start_s": "ns"}, "columns": ["variant", "start_s"]}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           tables.FORMAT_KEY: json.dumps(meta).encode()})
    run = tmp_path / "run"
    (run / "exp" / "r0").mkdir(parents=True)
    path = run / "exp" / "r0" / "samples.parquet"
    pq.write_table(table, path)
    back = tables.read_table(path)
    assert list(back.columns) == ["variant", "start_s"] and tables.stored_format(path) == 2
    assert np.abs(back["start_s"].to_numpy() - df["start_s"].to_numpy()).max() <= 0.5e-9
    tables.write_table(df, run / "exp" / "r0" / "windows.parquet")
    kept = (run / "exp" / "r0" / "windows.parquet").read_bytes()
    n, before, after = tables.rewrite_run(run)
    assert n == 1 and after < before
    assert tables.stored_format(path) == 3 and (run / "exp" / "r0" / "windows.parquet").read_bytes() == kept
    assert not list(run.rglob("*.tmp"))
    again = tables.read_table(path)
    expected = tables.stored_order(back)
    assert list(again["variant"]) == list(expected["variant"])
    assert np.abs(again["start_s"].to_numpy() - expected["start_s"].to_numpy()).max() <= 0.5e-6 + 1e-14
    assert tables.rewrite_run(run) == (0, 0, 0)


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


# What re-judging the reference may change, and by how much. Its committed summary was computed from
# its tables as they are stored (by the run itself, or re-judged after a conversion), so re-judging
# gives the same figures but for the order of floating-point sums (1e-13 of a figure): an absolute
# 1e-6 (a coefficient of variation of 0 read as 1e-16) or 2e-5 relative is room enough. Not room for
# a conversion left un-judged: rounding every reading to the microsecond (format 3) moves a median or
# mean of readings by up to half a microsecond, a difference of two by up to one: a figure moves by
# about 1 µs over the shortest time it stands on, relatively (measured on the AMD EPYC reference: 3.4e-3 of a
# 59 µs GIL wait's interval bound, 1.1e-3 of a pool bound from a 195 µs database time, 1.2e-3 on a
# CV; every verdict the same). A reference converted by `tables.rewrite_run` is re-judged
# (`harness summarise`) before it is committed.
TOLERANCE_REL, TOLERANCE_ABS = 2e-5, 1e-6
# Text the code writes afresh rather than reads from the raw data.
REWRITTEN = {".methods"}


def test_the_converted_reference_rejudges_to_its_committed_summary(tmp_path):
    """The committed summary is what its stored tables give. (Converting the Intel reference's
    float64 tables to format 2's nanoseconds had moved 944 numbers by more than 1e-9 of themselves,
    the largest a CV by 8.5e-6; format 3's microseconds move the AMD EPYC reference's by the amounts
    above; either way every verdict stayed the same.)"""
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
