"""Every statistic in the study is computed here, one way.

Percentiles: numpy's ``method="linear"`` (Hyndman & Fan type 7, the default of numpy, pandas and R),
on the raw per-operation samples. Latencies are stored in seconds and reported in milliseconds.
The HDR histogram (``hdr_histogram``) is used where samples are recorded into a histogram at source
(the open-loop load generator); its percentiles are HdrHistogram's own, at 3 significant digits.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

PERCENTILE_METHOD = "linear"
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}
# pyperf's rule of thumb: a spread this large between repeats means the figure is not stable.
UNSTABLE_CV = 0.10


def percentiles(values: Sequence[float] | np.ndarray, qs: Iterable[float] = PERCENTILES.values()) -> np.ndarray:
    """Percentiles (0-100) of `values` by the study's one method. NaN for an empty sample."""
    arr = np.asarray(values, dtype=float)
    qs = list(qs)
    if arr.size == 0:
        return np.full(len(qs), np.nan)
    return np.percentile(arr, qs, method=PERCENTILE_METHOD)


def latency_summary(latency_s: Sequence[float] | np.ndarray) -> dict[str, float]:
    """count, mean, min, p50, p90, p99, p99.9 and max, latencies in milliseconds."""
    arr = np.asarray(latency_s, dtype=float) * 1000.0
    out: dict[str, float] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({k: np.nan for k in ["mean_ms", "min_ms", *[f"{p}_ms" for p in PERCENTILES], "max_ms"]})
        return out
    out["mean_ms"] = float(arr.mean())
    out["min_ms"] = float(arr.min())
    for name, value in zip(PERCENTILES, percentiles(arr)):
        out[f"{name}_ms"] = float(value)
    out["max_ms"] = float(arr.max())
    return out


def throughput(ops: int, wall_s: float) -> float:
    """Operations per second over a measured window."""
    if wall_s <= 0:
        raise ValueError(f"measured window must be positive, got {wall_s!r} s")
    return ops / wall_s


def cpu_per_op_us(cpu_s: float, ops: int) -> float:
    """Client CPU time per operation, in microseconds (NaN when nothing completed)."""
    return cpu_s / ops * 1e6 if ops else float("nan")


def completion_counts(task_ids: Sequence[int] | np.ndarray, n_tasks: int) -> np.ndarray:
    """Operations completed by each of tasks 0..n_tasks-1, including tasks that completed none."""
    ids = np.asarray(task_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n_tasks):
        raise ValueError(f"task ids must lie in 0..{n_tasks - 1}")
    return np.bincount(ids, minlength=n_tasks)


def jain_index(counts: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index, (sum x)^2 / (n * sum x^2): 1.0 when all equal, 1/n when one task got all."""
    x = np.asarray(counts, dtype=float)
    if x.size == 0 or not np.any(x):
        return float("nan")
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))


def fairness_summary(task_ids: Sequence[int] | np.ndarray, n_tasks: int) -> dict[str, float]:
    counts = completion_counts(task_ids, n_tasks)
    return {
        "tasks": n_tasks,
        "ops_per_task_min": int(counts.min()),
        "ops_per_task_max": int(counts.max()),
        "ops_per_task_median": float(np.median(counts)),
        "jain_index": jain_index(counts),
    }


def spread(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Run-to-run variation of one figure across repeats: mean, std (ddof=1), cv, min, max, n."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n == 0:
        return {"n": 0, "mean": np.nan, "std": np.nan, "cv": np.nan, "min": np.nan, "max": np.nan,
                "unstable": False}
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if n > 1 else 0.0
    cv = std / mean if mean else np.nan
    return {"n": n, "mean": mean, "std": std, "cv": cv, "min": float(arr.min()), "max": float(arr.max()),
            "unstable": bool(n > 1 and cv >= UNSTABLE_CV)}


def summarize_samples(samples: pd.DataFrame, by: Sequence[str] = ("variant",),
                      latency_col: str = "latency_s") -> pd.DataFrame:
    """One row of latency_summary() per group of raw samples (e.g. per variant and repeat)."""
    rows = []
    for key, group in samples.groupby(list(by), sort=False, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), **latency_summary(group[latency_col].to_numpy())})
    return pd.DataFrame(rows)


def hdr_histogram(latency_us: Iterable[int], highest_us: int = 3_600_000_000, digits: int = 3):
    """An HdrHistogram of integer microsecond latencies (1 us .. 1 h, 3 significant digits)."""
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, highest_us, digits)
    for v in latency_us:
        h.record_value(max(1, min(int(v), highest_us)))
    return h


def hdr_summary(h) -> dict[str, float]:
    """latency_summary()'s keys from an HdrHistogram in microseconds."""
    out: dict[str, float] = {"count": int(h.get_total_count())}
    out["mean_ms"] = h.get_mean_value() / 1000.0
    out["min_ms"] = h.get_min_value() / 1000.0
    for name, q in PERCENTILES.items():
        out[f"{name}_ms"] = h.get_value_at_percentile(q) / 1000.0
    out["max_ms"] = h.get_max_value() / 1000.0
    return out
