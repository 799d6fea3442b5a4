"""How a raw table is stored: one Parquet file per table and repeat, written and read here only.

Times are stored as integers at a stated resolution of one microsecond (FORMAT 3). Every float
column of seconds (a name ending in `_s`: `start_s`, `latency_s`, `wait_s`, `cpu_s`; not Locust's
rates `requests_s`, `failures_s`) is written as an int64 column of whole microseconds (`<name>_us`),
or of milliseconds (`<name>_ms`) when every value is a whole millisecond (CPU counted in ticks): the
coarsest whole unit, never finer than a microsecond. A microsecond because the study's figures are
in µs and ms, getrusage's CPU times are whole µs, and the sub-µs digits of `time.perf_counter` lie
below the readings' own jitter (a wake-up, a system call); dropping them saves about a third of
the bytes (docs/FORMAT.md). A missing time stays missing. A column holding a time past about 104
days (an epoch time, a clock reading of its own) stays float64, as recorded.

A table with both a `variant` and a `start_s` column (the per-operation samples) is stored with its
rows ordered by variant, in the order the variants were first recorded, then by start time (stable:
rows that tie keep their recorded order). Sorted start times are what delta encoding stores in
fewest bits; no analysis depends on row order (re-judged from sorted and from unsorted tables, the
reference's summaries agree to 1e-13: docs/FORMAT.md), and a frame's groups by variant still come in
the recorded order. Time columns use Parquet's delta encoding, strings dictionary encoding, and the
codec is zstd at level 9, chosen by measurement (docs/FORMAT.md). The file's metadata names each
converted column, its unit and the table's column order, and `read_table` gives the frame back in
float seconds, to within half a microsecond of what was recorded.

One reader for every format: format 2 (integers of nanoseconds, microseconds or milliseconds, rows
as recorded, the same metadata) and format 1 (float64 seconds, Snappy, no such metadata: read as it
is) read through `read_table` like format 3. `rewrite_run` stores a run's older tables in format 3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

FORMAT_KEY = b"harness.table"       # the file metadata key; its value says what was converted
FORMAT = 3                          # 1: float seconds, Snappy (no metadata); 2: integers down to the
                                    # nanosecond; 3: integers of microseconds or milliseconds, sorted
CODEC, LEVEL = "zstd", 9
NS_PER_S = 1_000_000_000
US_PER_S = 1_000_000
# The units format 3 writes, coarsest first, in microseconds: milliseconds when every value of the
# column is whole there, else microseconds, the resolution.
UNITS = (("ms", 1_000), ("us", 1))
NS_PER_UNIT = {"ms": 1_000_000, "us": 1_000, "ns": 1}   # every unit a stored table names (format 2: ns too)
RATES = ("requests_s", "failures_s")   # Locust's "Requests/s" and "Failures/s": rates, not seconds
EXACT_S = 2.0 ** 53 / NS_PER_S     # ~104 days: a time past it is an epoch time, kept as recorded
SORTED_BY = ("variant", "start_s")  # a table with both is stored in this order (variants as first recorded)


def _seconds_columns(df: pd.DataFrame) -> list[str]:
    """The float columns of seconds stored as integers: offsets and durations, not epoch times
    (`epoch_s`, kept as recorded)."""
    return [c for c in df.columns if isinstance(c, str) and c.endswith("_s") and not c.endswith(RATES)
            and df[c].dtype.kind == "f" and not (df[c].abs() >= EXACT_S).any()]


def _as_integers(seconds: pd.Series) -> tuple[pd.Series, str]:
    us = np.rint(seconds.to_numpy(dtype="float64") * US_PER_S)
    known = us[~np.isnan(us)]
    unit, per = next((u, k) for u, k in UNITS if not (known % k).any())
    return pd.Series(pd.array(us / per, dtype="Int64"), index=seconds.index), unit


def stored_order(df: pd.DataFrame) -> pd.DataFrame:
    """`df`'s rows in the order format 3 stores them: by variant, in the order the variants first
    appear, then by `start_s` (stable); a table without both columns as it is."""
    if not all(c in df.columns for c in SORTED_BY):
        return df
    variant, _ = pd.factorize(df["variant"], use_na_sentinel=False)
    start = pd.to_numeric(df["start_s"], errors="coerce").to_numpy(dtype="float64")
    order = np.lexsort((start, variant))   # the last key sorts first; stable; a missing start last
    return df.iloc[order].reset_index(drop=True)


def write_table(df: pd.DataFrame, path: Path) -> None:
    """Write `df` to `path` in the compact format (FORMAT 3)."""
    out = stored_order(df).copy()
    units: dict[str, str] = {}
    for c in _seconds_columns(df):
        values, unit = _as_integers(out.pop(c))
        out[f"{c[:-2]}_{unit}"] = values
        units[c] = unit
    table = pa.Table.from_pandas(out, preserve_index=False)
    meta = {"format": FORMAT, "times": units, "columns": [str(c) for c in df.columns]}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), FORMAT_KEY: json.dumps(meta).encode()})
    stored = [f"{c[:-2]}_{u}" for c, u in units.items()]
    pq.write_table(table, path, compression=CODEC, compression_level=LEVEL,
                   use_dictionary=[c for c in table.column_names if c not in stored],
                   column_encoding={c: "DELTA_BINARY_PACKED" for c in stored} or None)


def read_table(path: Path) -> pd.DataFrame:
    """A table as it was recorded (in its stored row order): seconds as float64, in the recorded
    column order, whatever the format it was stored in."""
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(FORMAT_KEY)
    df = table.to_pandas()
    if raw is None:
        return df
    meta = json.loads(raw)
    for c, unit in meta["times"].items():
        values = pd.to_numeric(df.pop(f"{c[:-2]}_{unit}"), errors="coerce").astype("float64")
        df[c] = values * NS_PER_UNIT[unit] / NS_PER_S
    return df[meta["columns"]]


def stored_format(path: Path) -> int:
    """The format a table file is stored in: 1 (no metadata), 2 or 3."""
    raw = (pq.read_schema(path).metadata or {}).get(FORMAT_KEY)
    return int(json.loads(raw)["format"]) if raw is not None else 1


def rewrite_run(run_dir: Path) -> tuple[int, int, int]:
    """Store every table under `run_dir` that is not in the current format in it (read, written aside,
    renamed into place). Returns (tables rewritten, their bytes before, after). The run's summary
    must then be re-judged from the rewritten tables (`harness summarise`): a figure moves by what
    the coarser resolution moves its readings (half a microsecond each, docs/FORMAT.md)."""
    n = before = after = 0
    for f in sorted(Path(run_dir).rglob("*.parquet")):
        if stored_format(f) == FORMAT:
            continue
        tmp = f.with_name(f.name + ".tmp")
        write_table(read_table(f), tmp)
        n, before, after = n + 1, before + f.stat().st_size, after + tmp.stat().st_size
        os.replace(tmp, f)
    return n, before, after
