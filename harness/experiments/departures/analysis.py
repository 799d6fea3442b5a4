"""The `departures` factorial: client CPU per request, the async/threads ratio per cell,
each factor's main effect with its interval, and the verdict by the rule written before the run.

Figures (contract C1; experiment `departures`):
- variant `<family>_<model>[python=..,placement=..,rtt_ms=..]`, metric `cpu_us_per_req` (client
  process CPU per completed request, us) and `throughput_rps` (req/s), both over the requests that
  ended in the window (`completed`; `ops` for runs recorded before it, see `rps_definition`);
- variant `pg_<model>[...]`, metric `gil_wait_ms`: the mean wait of the GIL probe's wake-ups
  inside the window, net of their run-queue wait (`harness.core.probe.GilProbe`,
  `stats.gil_wait_summary`): how long a thread of the client waited to run Python again once it
  could. Shown, not judged: no seed gives it. The windows table has its 90th percentile, sample
  count, the cell's floor (`gil_floor_ms`, the probe alone: the timer's latency) and
  `gil_found_held`, the share of wake-ups that found the lock held (waited beyond the floor's 99th
  percentile): an estimate of the share of the time another thread held it;
- `departures.all.cpu_windows_rejected` per repeat: windows whose CPU readings do not fit the
  machine or the client's own cores (`window_cpu`); their CPU figures are NaN, so no CPU per request
  and no ratio comes from them;
- variant `<family>[python=..,placement=..,rtt_ms=..]` (a cell; `,driver=<level>` for a driver level
  other than the lock's), metric `cpu_ratio_<async model>`:
  async / threads client CPU per request in that cell and repeat (mongo: `cpu_ratio_async`);
- variant `<family>_<async model>[factor=<f>,level=<l>]`, metric `ratio_change`: the main effect of
  moving factor f from its baseline level to l, per repeat: the geometric mean, over the cells of
  the other factors, of ratio(l) / ratio(baseline). Metrics `threads_cpu_change` and
  `async_cpu_change` are the same for each model's own CPU per request.

Baseline levels are the study's own conditions: the lowest interpreter listed (3.11 here), `shared`,
the smallest rtt and the drivers as requirements.lock pins them (`lock`). The seed-ward level is the
newest interpreter (the seeds ran 3.14), `split` (the seeds' server did not share the client's
cores), every larger rtt, and each driver level (the seeds' versions: PyMongo 4.18.2 is seed 001's,
4.15 seed 000's, psycopg 3.3.6 + asyncpg 0.31.0 seed 002's).

The driver factor runs on one interpreter only, so each factor's effect is taken over the
cells it was crossed with: the interpreter, placement and rtt effects over the `lock` cells (as
before the driver factor existed), the driver effect over the cells whose interpreter, placement and
rtt also ran the level. Runs recorded before the factor have no `driver` column: all `lock`.

The rule, fixed before the first measurement (also in notebooks/05_departures.ipynb):
    A factor EXPLAINS a departure when moving it from the baseline level to its seed-ward level
    moves the async/threads CPU ratio at least half-way towards the seed's ratio on a log scale
    (`toward_seed` >= 0.5), AND the 95% t-interval over repeats of that change excludes no change
    (both bounds on the seed's side of 1). It explains PART of it when the interval excludes no change
    towards the seed but the move is under half-way; it moves AWAY when the interval excludes no
    change on the other side; otherwise it is NOT SHOWN (no change could not be excluded).
    `toward_seed` = log(change) / log(seed ratio / baseline ratio), the baseline ratio being the
    geometric mean over repeats of the ratio at the baseline level (over the other factors' cells).
The seeds' ratios come from the claims ledger (`SEED_CLAIMS`), never typed here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...core import ledger as ledger_file
from ...core import stats
from ...core.errors import HarnessError
from ...core.measure import cpu_consistency, window_completed
from ...core.store import Run
from ...core.verdicts import CHANGES_RATIO, EXPLAINS, EXPLAINS_PART, MOVES_AWAY, NOT_SHOWN, NOT_SHOWN_FEW
from ..analysis import cores, fit_cpu

EXPERIMENT = "departures"
FACTORS = ("python", "placement", "rtt_ms", "driver")
LOCK_LEVEL = "lock"   # experiments.departures.LOCK_LEVEL: the drivers as requirements.lock pins them
# read back in the client child, one column per driver in `windows` (experiments.departures)
VERSION_COLUMNS = ("pymongo_version", "motor_version", "psycopg_version", "psycopg_binary_version",
                   "psycopg_pool_version", "asyncpg_version", "uvloop_version")
# the versions a family's cells are told apart by
FAMILY_VERSIONS = {"mongo": ("pymongo_version",), "pg": ("psycopg_version", "asyncpg_version")}
# (family, async model) -> (claim id, the claim's ratio is threads/async): the seed's ratio
SEED_CLAIMS = {("mongo", "async"): ("001-models-02", False),
               ("pg", "asyncio_psycopg"): ("002-fast20-03", True),
               ("pg", "uvloop_asyncpg"): ("002-fast20-13", True)}
DEPARTURE = {"mongo": "seed 001: threads vs asyncio (MongoDB / FerretDB), async / threads client CPU per query",
             "pg": "seed 002: fast regime (PostgreSQL), async / threads client CPU per request"}


def _version_key(label: str) -> tuple:
    return tuple(int(x) for x in str(label).rstrip("t").split(".") if x.isdigit())


def windows(run: Run) -> pd.DataFrame:
    """Every ok window with `cpu_us_per_req`, `throughput_rps` and the client's context switches per
    request (`ctx_vol_per_req`, `ctx_invol_per_req`; NaN for runs recorded before they were read)."""
    w = run.table(EXPERIMENT, "windows")
    if w.empty:
        return w
    w = w.copy()
    if "driver" not in w.columns:  # recorded before the driver factor: every cell on the lock's drivers
        w["driver"] = LOCK_LEVEL
    for col in VERSION_COLUMNS:
        if col not in w.columns:
            w[col] = None
    counted = [window_completed(row) for _, row in w.iterrows()]
    w["completed"] = [n for n, _ in counted]
    w["rps_definition"] = [how for _, how in counted]
    fits = [window_cpu(row, cores(run)) for _, row in w.iterrows()]
    w["cpu_check"] = [check for *_, check in fits]
    w["cpu_s"], w["server_cpu_s"], w["machine_busy_s"] = ([f[k] for f in fits] for k in range(3))
    w["cpu_us_per_req"] = [stats.cpu_per_op_us(c, n) for c, n in zip(w["cpu_s"], w["completed"])]
    w["throughput_rps"] = w["completed"] / w["wall_s"]
    for kind, name in (("voluntary", "ctx_vol_per_req"), ("involuntary", "ctx_invol_per_req")):
        counts = w[f"ctx_{kind}"] if f"ctx_{kind}" in w.columns else [math.nan] * len(w)
        w[name] = [stats.switches_per_op(c, n) for c, n in zip(counts, w["completed"])]
    return _with_gil(w, run.table(EXPERIMENT, "gil", ok_only=False))


GIL_FIGURES = ("gil_wait_ms", "gil_wait_p90_ms", "gil_found_held", "gil_samples")


def _gil_summary(wake_ups: pd.DataFrame, held_above_s: float = math.nan) -> dict[str, float]:
    return stats.gil_wait_summary(wake_ups["late_s"].to_numpy(float), wake_ups["wait_s"].to_numpy(float),
                                  held_above_s)


def _with_gil(w: pd.DataFrame, gil: pd.DataFrame) -> pd.DataFrame:
    """Each window's GIL probe figures (`stats.gil_wait_summary` of its wake-ups), and its cell's
    floor (`gil_floor_ms`: the probe alone before the models ran): NaN where the probe did not run
    (MongoDB cells, runs recorded before it). `gil_found_held` counts the wake-ups that waited longer
    than the floor's 99th percentile of the same cell and repeat (NaN without a floor)."""
    nan = dict.fromkeys((*GIL_FIGURES, "gil_floor_ms"), math.nan)
    if gil.empty:
        return w.assign(**nan)
    floors = {(repeat, cell): _gil_summary(g) for (repeat, cell), g in
              gil[gil["phase"] == "floor"].groupby(["repeat", "cell"], sort=False)}
    figures = {}
    for (repeat, variant), g in gil[gil["phase"] != "floor"].groupby(["repeat", "variant"], sort=False):
        floor = floors.get((repeat, g["cell"].iloc[0]), {})
        figures[(repeat, variant)] = _gil_summary(g, floor.get("gil_wait_p99_ms", math.nan) / 1e3)
    rows = [figures.get((r, v), nan) for r, v in zip(w["repeat"], w["variant"])]
    for name in GIL_FIGURES:
        w[name] = [row[name] for row in rows]
    w["gil_floor_ms"] = [floors.get((r, c), {}).get("gil_wait_ms", math.nan) for r, c in zip(w["repeat"], w["cell"])]
    return w


def window_cpu(w: pd.Series, n_cores: int) -> tuple[float, float, float, str]:
    """A window's client, server and machine CPU seconds, all NaN with `cpu_check` saying why when
    they do not fit: the machine's inequality (`analysis.fit_cpu`, on the stored readings of every run;
    runs before the parent's edge reader have no machine reading, and mongo cells no server one), and
    the client's own cores, which a `split` cell pins it to (client <= its cores x wall)."""
    client, server, machine, check = fit_cpu(float(w["cpu_s"]), float(w.get("server_cpu_s", math.nan)),
                                             float(w.get("machine_busy_s", math.nan)), float(w["wall_s"]), n_cores)
    own = [c for c in str(w.get("client_cpus") or "").split(",") if c.strip()]
    if not check and own:
        check = cpu_consistency(client, math.nan, math.nan, float(w["wall_s"]), len(own))
        if check:
            check = f"on the client's {len(own)} core(s): {check}"
            client = server = machine = math.nan
    return client, server, machine, check


def cells(run: Run) -> pd.DataFrame:
    """One row per repeat, cell and async model: threads and async CPU per request and their ratio."""
    w = windows(run)
    if w.empty:
        return pd.DataFrame()
    keys = ["repeat", "family", "python", "placement", "rtt_ms", "driver"]
    rows = []
    for k, g in w.groupby(keys, sort=True):
        threads = g[g["kind"] == "threads"]
        if threads.empty:
            continue
        t = threads.iloc[0]
        for _, a in g[g["kind"] == "async"].iterrows():
            rows.append({**dict(zip(keys, k)), "cell": t["cell"], "model": a["model"],
                         "python_version": t["python_version"], "python_build": t["python_build"],
                         "drivers_read_back": drivers_read_back(a, k[1]),
                         "threads_cpu_us": t["cpu_us_per_req"], "async_cpu_us": a["cpu_us_per_req"],
                         "threads_rps": t["throughput_rps"], "async_rps": a["throughput_rps"],
                         "cpu_ratio": a["cpu_us_per_req"] / t["cpu_us_per_req"]})
    return pd.DataFrame(rows)


def drivers_read_back(window: Any, family: str) -> str:
    """`pymongo 4.18.2`, `psycopg 3.3.6, asyncpg 0.31.0`: a window's family drivers as read back in
    its child ('' for a run recorded before the read-back)."""
    parts = []
    for col in FAMILY_VERSIONS.get(family, ()):
        v = window.get(col) if hasattr(window, "get") else None
        if isinstance(v, str) and v:
            parts.append(f"{col.removesuffix('_version')} {v}")
    return ", ".join(parts)


def levels(c: pd.DataFrame, factor: str) -> tuple[Any, list]:
    """(baseline level, the other levels in seed-ward order) of a factor present in `c`."""
    values = list(dict.fromkeys(c[factor]))
    if factor == "python":
        values = sorted(values, key=_version_key)
    elif factor == "placement":
        values = sorted(values, key=lambda v: v != "shared")
    elif factor == "driver":
        values = sorted(values, key=lambda v: (v != LOCK_LEVEL, str(v)))
    else:
        values = sorted(values)
    return values[0], values[1:]


def factor_cells(c: pd.DataFrame, factor: str, base: Any = None) -> pd.DataFrame:
    """The cells a factor's effect is taken over (module docstring): for the interpreter, placement and
    rtt the `lock` cells; for the driver, the cells whose other factors also ran some non-lock level."""
    if factor != "driver":
        return c[c["driver"] == LOCK_LEVEL]
    others = [f for f in FACTORS if f != "driver"]
    crossed = c.loc[c["driver"] != LOCK_LEVEL, others].drop_duplicates()
    return c.merge(crossed, on=others, how="inner")


def effect_by_repeat(c: pd.DataFrame, factor: str, base, level, quantity: str) -> dict[int, float]:
    """Per repeat: geometric mean over matching cells (other factors equal) of q(level) / q(base)."""
    others = [f for f in FACTORS if f != factor]
    out = {}
    for rep, g in c.groupby("repeat"):
        a = g[g[factor] == level].set_index(others)[quantity]
        b = g[g[factor] == base].set_index(others)[quantity]
        both = a.index.intersection(b.index)
        logs = np.log(a.loc[both].to_numpy(float) / b.loc[both].to_numpy(float))
        logs = logs[np.isfinite(logs)]
        if logs.size:
            out[int(rep)] = float(np.exp(logs.mean()))
    return out


def _level_ratio(c: pd.DataFrame, factor: str, level) -> dict[int, float]:
    """Per repeat: geometric mean of the ratio over the cells at this level."""
    g = c[c[factor] == level]
    return {int(r): float(np.exp(np.log(x["cpu_ratio"].to_numpy(float)).mean())) for r, x in g.groupby("repeat")}


def seed_ratios() -> dict[tuple[str, str], dict[str, Any]]:
    """The seeds' async / threads CPU ratios, from the claims ledger (NaN where it has none)."""
    try:
        ledger = ledger_file.load().set_index("claim_id")
    except (HarnessError, OSError) as e:  # an unreadable ledger: say so beside the figures rather than guess
        return {k: {"claim": cid, "ratio": float("nan"), "error": str(e)} for k, (cid, _) in SEED_CLAIMS.items()}
    out = {}
    for key, (cid, inverted) in SEED_CLAIMS.items():
        v = float(ledger.loc[cid, "seed_value"]) if cid in ledger.index else float("nan")
        out[key] = {"claim": cid, "ratio": 1.0 / v if inverted and v else v,
                    "as_in_ledger": v, "ledger_ratio_is": "threads / async" if inverted else "async / threads"}
    return out


def effects(run: Run) -> pd.DataFrame:
    """Main effects of every factor level against its baseline, with 95% intervals over repeats
    (stats.summarise: t-interval on the log of the per-repeat changes), and the verdict."""
    c = cells(run)
    if c.empty:
        return pd.DataFrame()
    seeds = seed_ratios()
    rows = []
    for (family, model), fam in c.groupby(["family", "model"], sort=False):
        seed = seeds.get((family, model), {}).get("ratio", float("nan"))
        for factor in FACTORS:
            g = factor_cells(fam, factor)
            if g.empty:
                continue
            base, others = levels(g, factor)
            base_ratio = stats.summarise(_level_ratio(g, factor, base))
            for level in others:
                row = {"family": family, "model": model, "factor": factor, "baseline": base, "level": level,
                       "baseline_ratio": base_ratio["mean"], "seed_ratio": seed,
                       "level_read_back": _read_back(g, factor, level)}
                for q, name in (("cpu_ratio", "ratio_change"), ("threads_cpu_us", "threads_cpu_change"),
                                ("async_cpu_us", "async_cpu_change")):
                    s = stats.summarise(effect_by_repeat(g, factor, base, level, q))
                    row.update({name: s["mean"], f"{name}_low": s["ci_low"], f"{name}_high": s["ci_high"],
                                "n_repeats": s["n"]})
                row.update(verdict(row["ratio_change"], row["ratio_change_low"], row["ratio_change_high"],
                                   row["baseline_ratio"], seed))
                rows.append(row)
    return pd.DataFrame(rows)


def _read_back(g: pd.DataFrame, factor: str, level: Any) -> str:
    """For a driver level: the versions its children read back (`pymongo 4.18.2`); '' otherwise."""
    if factor != "driver":
        return ""
    return "; ".join(v for v in dict.fromkeys(g.loc[g["driver"] == level, "drivers_read_back"]) if v)


def verdict(change: float, low: float, high: float, baseline_ratio: float, seed_ratio: float) -> dict:
    """The rule of the module docstring, applied to one factor level."""
    gap = math.log(seed_ratio / baseline_ratio) if seed_ratio > 0 and baseline_ratio > 0 else float("nan")
    toward = math.log(change) / gap if change > 0 and gap and math.isfinite(gap) else float("nan")
    if not (math.isfinite(low) and math.isfinite(high)):
        v = NOT_SHOWN_FEW
    elif low <= 1.0 <= high:
        v = NOT_SHOWN
    elif not math.isfinite(gap):
        v = CHANGES_RATIO
    elif (high < 1.0) == (gap < 0):
        v = EXPLAINS if toward >= 0.5 else EXPLAINS_PART
    else:
        v = MOVES_AWAY
    return {"toward_seed": toward, "verdict": v}


def cell_table(run: Run) -> pd.DataFrame:
    """Per cell and async model over repeats: CPU per request of each side and the ratio, with
    95% intervals (geometric mean, t-interval on the log)."""
    c = cells(run)
    if c.empty:
        return c
    out = []
    keys = ["family", "model", "python", "placement", "rtt_ms", "driver"]
    for k, g in c.groupby(keys, sort=True):
        row = dict(zip(keys, k))
        row["python_version"] = g["python_version"].iloc[0]
        row["python_build"] = g["python_build"].iloc[0]
        row["drivers_read_back"] = "; ".join(v for v in dict.fromkeys(g["drivers_read_back"]) if v)
        for q in ("threads_cpu_us", "async_cpu_us", "cpu_ratio"):
            s = stats.summarise(g.set_index("repeat")[q].to_dict())
            row.update({q: s["mean"], f"{q}_low": s["ci_low"], f"{q}_high": s["ci_high"]})
        row["n_repeats"] = int(g["repeat"].nunique())
        out.append(row)
    return pd.DataFrame(out)


def gil_table(run: Run) -> pd.DataFrame:
    """Per PostgreSQL cell and model over repeats: the GIL probe's mean wait (`gil_wait_ms`, mean
    over repeats with its 95% interval); its 90th percentile, the share of wake-ups that found the lock
    held (`gil_found_held`) and the cell's floor (medians over repeats), beside the model's client CPU
    (per request, and as a share of one core: `client_cpu_pct`). Empty when no window has the probe."""
    w = windows(run)
    if w.empty or not w["gil_wait_ms"].notna().any():
        return pd.DataFrame()
    w = w[w["gil_wait_ms"].notna()]
    keys = ["python", "placement", "rtt_ms", "driver", "model"]
    out = []
    for k, g in w.groupby(keys, sort=True):
        s = stats.summarise(g.set_index("repeat")["gil_wait_ms"].to_dict())
        out.append({**dict(zip(keys, k)), "gil_wait_ms": s["mean"], "gil_wait_ms_low": s["ci_low"],
                    "gil_wait_ms_high": s["ci_high"], "gil_wait_p90_ms": float(g["gil_wait_p90_ms"].median()),
                    "gil_found_held": float(g["gil_found_held"].median()),
                    "gil_floor_ms": float(g["gil_floor_ms"].median()),
                    "cpu_us_per_req": float(g["cpu_us_per_req"].median()),
                    "client_cpu_pct": float((100.0 * g["cpu_s"] / g["wall_s"]).median()),
                    "n_repeats": int(g["repeat"].nunique())})
    return pd.DataFrame(out)


def affinity_check(run: Run) -> pd.DataFrame:
    """Per cell: the client's cores as set, as read back by the child, and by /proc; `matches`."""
    p = run.table(EXPERIMENT, "placements", ok_only=False)
    if p.empty:
        return p
    p = p.copy()
    p["matches"] = (p["client_cpus"] == p["client_affinity"]) & (p["client_cpus"] == p["client_affinity_proc"])
    return p
