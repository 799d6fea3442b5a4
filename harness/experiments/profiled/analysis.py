"""The profiled pass's figures: per variant (`<part>.<model>`), from its plain and profiled windows.

- throughput_plain, throughput_profiled: completed operations per second of each window;
  profiled_over_plain: their ratio, the profiler's own cost (1 = none);
- cpu_us_per_op (plain window), cpu_us_per_op_profiled: the client's CPU per operation; NaN when a
  window's readings do not fit the machine (`cpu_check`);
- ctx_vol_per_op, ctx_invol_per_op: the client's context switches per operation (plain window);
- samples, share_<category>: the profiled window's samples and each category's share of them
  (`core.profiles`); cpu_us_<category>: that share of the plain window's CPU per operation;
- sampled_over_active: the samples over the profiled window's active time times its sampling rate
  (`rate_hz`): 1 when the profiler sampled every active moment once. Active is CPU + run-queue wait
  for py-spy (it counts a runnable thread as active, `core.profiles`), CPU alone for perf (it
  samples on-CPU time);
- sampling, rate_hz, native_frames, on_cpu: how the profiled window was sampled (native frames, at
  the low rate, Python frames only, or perf; `experiments.profiled`), native_frames and on_cpu 1 or 0;
- python: the interpreter that ran the variant's windows, as 3.13 (major + minor / 100).
"""

from __future__ import annotations

import math

import pandas as pd

from ...core import profiles, stats
from ...core.store import Run

EXPERIMENT = "profiled"
KEYS = tuple(profiles.KEYS.values())
PERF = "perf"      # experiment.PERF: the windows' `sampling` of a perf part


def python_number(version: object) -> float:
    """'3.13.0' as 3.13 (major + minor / 100); NaN when it says nothing."""
    parts = str(version or "").split(".")
    try:
        return int(parts[0]) + int(parts[1]) / 100
    except (IndexError, ValueError):
        return math.nan


def _window(w: pd.Series) -> dict[str, float]:
    completed = int(w.get("completed", w["ops"]))
    wall = float(w["wall_s"])
    check = w.get("cpu_check")
    fits = not (isinstance(check, str) and check)   # missing (a MongoDB window) or '' fits
    on_cpu = w.get("sampling") == PERF     # perf samples CPU time; py-spy a runnable thread too
    waited = 0.0 if on_cpu else float(w.get("cpu_wait_s", math.nan))
    return {"throughput": completed / wall if wall else math.nan,
            "active_s": float(w["cpu_s"]) + waited if fits else math.nan,
            "cpu_us": stats.cpu_per_op_us(float(w["cpu_s"]), completed) if fits else math.nan,
            "ctx_vol": stats.switches_per_op(w.get("ctx_voluntary"), completed),
            "ctx_invol": stats.switches_per_op(w.get("ctx_involuntary"), completed)}


PART_TITLES = {"pg_fast": "PostgreSQL, fast queries (002-cpu)", "pg_bound": "PostgreSQL, pool-bound (002-bound)",
               "mongo_models": "PyMongo: 32 threads against async (001-models)",
               "mongo_cursor": "A large cursor: default batches against batch_size (001-cursor)",
               "pg_bound_low": "PostgreSQL, pool-bound, native frames at the low rate (002-cpu)",
               "pg_fast_python": "PostgreSQL, fast queries, Python frames only (002-cpu)",
               "mongo_models_python": "PyMongo: 32 threads against async, Python frames only (001-models)",
               "pg_fast_perf": "PostgreSQL, fast queries, Linux perf: on-CPU samples (002-cpu)",
               "pg_bound_perf": "PostgreSQL, pool-bound, Linux perf: on-CPU samples (002-cpu)",
               "mongo_models_perf": "PyMongo: 32 threads against async, Linux perf: on-CPU samples (001-models)"}


def stacks(run: Run, variant: str) -> list[tuple[tuple[str, ...], int]]:
    """The profiled window's stacks of `variant` (its speedscope file; the first repeat that has
    one), [] when there is none."""
    for _rep, d in run.repeat_dirs(EXPERIMENT):
        path = d / "artifacts" / f"profile_{variant}.speedscope.json"
        if path.is_file():
            return profiles.read_speedscope(path)
    return []


def largest_shares(row: pd.Series, n: int = 3) -> str:
    """`system calls 46%, the GIL 27%, ...`: a variant's `n` largest categories by share."""
    got = sorted(((float(row.get(f"share_{k}", 0.0) or 0.0), label) for label, k in profiles.KEYS.items()),
                 reverse=True)
    return ", ".join(f"{label} {share:.0%}" for share, label in got[:n] if share > 0) or "no samples"


def variant_figures(run: Run) -> pd.DataFrame:
    """One row per variant and repeat: the figures of the module docstring."""
    windows = run.table(EXPERIMENT, "windows")
    if windows.empty:
        return pd.DataFrame()
    shares = run.table(EXPERIMENT, "profiles")
    rate = float(run.experiments.get(EXPERIMENT, {}).get("params", {}).get("rate_hz", profiles.RATE_HZ))
    rows = []
    for (variant, rep), g in windows.groupby(["variant", "repeat"], sort=False):
        plain, profiled = g[~g["profiled"].astype(bool)], g[g["profiled"].astype(bool)]
        a = _window(plain.iloc[0]) if len(plain) else dict.fromkeys(("throughput", "cpu_us", "ctx_vol", "ctx_invol"),
                                                                   math.nan)
        b = _window(profiled.iloc[0]) if len(profiled) else {"throughput": math.nan, "cpu_us": math.nan,
                                                             "active_s": math.nan}
        sampling, hz = "", math.nan
        if len(profiled):   # earlier runs sampled every profile natively at the pass's one rate, unsaid
            how = profiled.iloc[0]
            sampling, hz = str(how.get("sampling") or "native"), float(how.get("rate_hz") or rate)
        row = {"variant": variant, "repeat": rep, "part": g["part"].iloc[0], "model": g["model"].iloc[0],
               "throughput_plain": a["throughput"], "throughput_profiled": b["throughput"],
               "profiled_over_plain": b["throughput"] / a["throughput"] if a["throughput"] else math.nan,
               "cpu_us_per_op": a["cpu_us"], "cpu_us_per_op_profiled": b["cpu_us"],
               "ctx_vol_per_op": a["ctx_vol"], "ctx_invol_per_op": a["ctx_invol"], "sampling": sampling,
               "rate_hz": hz, "native_frames": float(sampling != "python") if sampling else math.nan,
               "on_cpu": float(sampling == PERF) if sampling else math.nan,
               "python": python_number(g["python"].iloc[0] if "python" in g else None)}
        mine = shares[(shares["variant"] == variant) & (shares["repeat"] == rep)] if not shares.empty else shares
        if len(mine):
            by_key = mine.set_index("category")
            row["samples"] = int(by_key["samples"].sum())
            row["sampled_over_active"] = row["samples"] / (hz * b["active_s"]) if b["active_s"] else math.nan
            for k in KEYS:
                share = float(by_key["share"].get(k, 0.0))
                row[f"share_{k}"] = share
                row[f"cpu_us_{k}"] = share * a["cpu_us"]
        rows.append(row)
    return pd.DataFrame(rows)
