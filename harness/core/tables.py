"""How a raw table is stored: one Parquet file per table and repeat, written and read here only.

Times are stored as integers at their clock's resolution. Every float column of seconds (a name
ending in `_s`: `start_s`, `latency_s`, `wait_s`, `cpu_s`; not Locust's rates `requests_s`,
`failures_s`) is written as an int64 column in the coarsest unit in which all its values are whole:
nanoseconds (`<name>_ns`: `time.perf_counter`'s resolution here, and finer than the process CPU
readings), or microseconds (`_us`: pgbench logs them) or milliseconds (`_ms`). Rounding to the
nanosecond loses nothing a clock shows; a missing time stays missing. A column holding a time past
about 104 days (an epoch time) stays float64, whose step there is already coarser than a
nanosecond. Time columns use Parquet's delta encoding, which stores an ordered column (a task's
start times) as its offsets; strings are dictionary-encoded; the codec is zstd at level 9, chosen by
measurement (docs/FORMAT.md). The file's metadata names each converted column, its unit and the
table's column order, and `read_table` gives the frame back in float seconds, as recorded, to within
half a nanosecond. A table written before this format (float64 seconds, Snappy, no such metadata)
reads as it is: one reader for both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

FORMAT_KEY = b"harness.table"       # the file metadata key; its value says what was converted
FORMAT = 2                          # 1: float seconds, Snappy (no metadata); 2: this module's
CODEC, LEVEL = "zstd", 9
NS_PER_S = 1_000_000_000
# Each time column's unit: the coarsest at which every value is whole (pgbench logs microseconds,
# /proc counts CPU in ticks), so a column stores only the digits its clock gave.
UNITS = (("ms", 1_000_000), ("us", 1_000), ("ns", 1))
RATES = ("requests_s", "failures_s")   # Locust's "Requests/s" and "Failures/s": rates, not seconds
EXACT_S = 2.0 ** 53 / NS_PER_S     # ~104 days: beyond it a float64 of nanoseconds is no longer exact


def _seconds_columns(df: pd.DataFrame) -> list[str]:
    """The float columns of seconds a nanosecond integer holds exactly: offsets and durations, not
    epoch times (`epoch_s`, whose float64 already has a coarser step than a nanosecond)."""
    return [c for c in df.columns if isinstance(c, str) and c.endswith("_s") and not c.endswith(RATES)
            and df[c].dtype.kind == "f" and not (df[c].abs() >= EXACT_S).any()]


def _as_integers(seconds: pd.Series) -> tuple[pd.Series, str]:
    ns = np.rint(seconds.to_numpy(dtype="float64") * NS_PER_S)
    known = ns[~np.isnan(ns)]
    unit, per = next((u, k) for u, k in UNITS if not (known % k).any())
    return pd.Series(pd.array(ns / per, dtype="Int64"), index=seconds.index), unit


def write_table(df: pd.DataFrame, path: Path) -> None:
    """Write `df` to `path` in the compact format (FORMAT 2)."""
    out = df.copy()
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
    """A table as it was recorded: seconds as float64, in the recorded column order, whatever the
    format it was stored in."""
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(FORMAT_KEY)
    df = table.to_pandas()
    if raw is None:
        return df
    meta = json.loads(raw)
    per = dict(UNITS)
    for c, unit in meta["times"].items():
        values = pd.to_numeric(df.pop(f"{c[:-2]}_{unit}"), errors="coerce").astype("float64")
        df[c] = values * per[unit] / NS_PER_S
    return df[meta["columns"]]
