"""The MongoDB experiments' raw tables turned into summary tables and named metrics.

Summary functions (one row per variant and repeat unless said; all statistics from `harness.core.stats`):
`probe_idle`, `cursor_summary`, `pool_summary`, `pool_completions`, `client_summary`,
`bulk_summary`, `bulk_duplicates`, `models_summary`. Each returns an empty frame when the run
does not hold the experiment.

Each experiment declares its figures and computes them from these tables (`metrics`,
`compute_metrics` in its own module; contract C1, `harness.experiments.analysis`: one row per figure
and repeat, ok cells only). Dotted names (`experiment.variant.metric`) and units:

mongo_cursor (V in: default, batch_size_100, batch_size_1000, batch_size_10000, mongodb_batches, to_list;
mongodb_batches = MongoDB-sized (16 MiB) batches, emulated on FerretDB, whatever batch size that came to)
- `mongo_cursor.V.max_stall_ms`     longest probe lateness while reading all documents (wall clock), ms
- `mongo_cursor.V.max_stall_run_ms` longest stall counted in the loop thread's own CPU: the most CPU
                                    the loop's thread used between two probe wake-ups, ms (the figure
                                    the seed's 10 ms check reads: what decoding a batch costs, net of
                                    the wait for a core; NaN for runs before the probe split stalls)
- `mongo_cursor.V.max_stall_wait_share`  of the longest wall-clock stall, the share spent waiting for
                                    a core: wait / (run + wait) (ratio)
- `mongo_cursor.V.p99_stall_ms`     99th percentile of probe lateness, ms
- `mongo_cursor.V.total_s`          time to read every document, s
- `mongo_cursor.V.max_batch_docs`   most documents the server sent in one find/getMore reply (count)
- `mongo_cursor.mongodb_batches.avg_doc_bytes`, `.batch_size`  the measured document size and the
  batch size that makes 16 MiB of it
- `mongo_cursor.documents`          documents read per variant (count)
- `mongo_cursor.probe.idle_max_ms`, `.idle_p99_ms`  the probe's lateness with nothing blocking, ms
- `mongo_cursor.probe.cpu_us_per_wakeup`            the probe's own CPU per wake-up, us

mongo_pool (M in: bare, semaphore, large_pool; a suffix _uvloop, _motor or _uvloop_motor for
the other loops/drivers; no suffix = asyncio + PyMongo's AsyncMongoClient, the seed's setup)
- `mongo_pool.M.throughput_qps`     completed queries / measured window, queries/s
- `mongo_pool.M.p50_ms`, `.p99_ms`, `.p99_9_ms`, `.max_ms`   latency percentiles, ms
- `mongo_pool.M.ops_per_task_min`, `.ops_per_task_max`       per-task completions (count)
- `mongo_pool.M.jain_index`         Jain's fairness index of per-task completions (0..1)
- `mongo_pool.M.errors`             failed operations (count)
- `mongo_pool.M.max_over_window`    max_ms / the measured window (ratio; 1 = waited the whole run)
- `mongo_pool.all.cpu_windows_rejected`  windows whose CPU readings did not fit the machine (see
  "Every closed-loop window" below), per repeat (windows)

mongo_client (suffixes as for mongo_pool)
- `mongo_client.per_request_ms`     mean time per query with a client created and closed per query, ms
- `mongo_client.shared_ms`          mean time per query on one shared client, ms
- `mongo_client.per_request_p50_ms`, `mongo_client.shared_p50_ms`   medians, ms
- `mongo_client.ratio`              per_request_ms / shared_ms, in the same repeat

mongo_bulk
- `mongo_bulk.insert_one_us_per_doc`      mean insert_one latency, us per document
- `mongo_bulk.insert_one_count`           insert_one calls measured (count)
- `mongo_bulk.insert_one_extrapolated_s`  that mean x `documents`: the seed's extrapolation, s
- `mongo_bulk.insert_many_s`              insert_many(documents, ordered=True), s
- `mongo_bulk.insert_many_unordered_s`    insert_many(documents, ordered=False), s
- `mongo_bulk.insert_many_us_per_doc`, `mongo_bulk.insert_many_unordered_us_per_doc`  the same per
  document, us (comparable with insert_one's whatever the document count)
- `mongo_bulk.documents`                  insert_many size (count)
- `mongo_bulk.bulk_write_upsert_s`, `mongo_bulk.bulk_write_upsert_us_per_doc`  upserts, all new _ids
- `mongo_bulk.bulk_write_upsert_matching_s`  upserts partly matching existing _ids, s (absent if skipped)
- `mongo_bulk.dup_ordered_landed`, `mongo_bulk.dup_unordered_landed`  documents stored after a
  batch with one duplicate key, ordered=True / ordered=False (count)
- `mongo_bulk.dup_batch_docs`, `mongo_bulk.dup_index`   the batch size and the duplicate's position

mongo_models (T in thread counts, e.g. threads32, threads100; A in async_bare, async_semaphore
with the loop/driver suffix as for mongo_pool)
- `mongo_models.T.throughput_qps`, `mongo_models.A.throughput_qps`     queries/s
- `mongo_models.T.cpu_us_per_query`, `mongo_models.A.cpu_us_per_query` client process CPU per query, us
- `mongo_models.<V>.ctx_vol_per_query`, `.ctx_invol_per_query`  the client's context switches per query,
  voluntary and involuntary; `.db_ctx_per_query` the database processes' (FerretDB and PostgreSQL)
- `mongo_models.T.p50_ms`, `.p99_ms`, `.max_ms` (and for A)             latency, ms
- `.client_cpu_pct`, `.db_cpu_pct`, `.machine_cpu_pct` (T and A) CPU over the window, % of one core:
  the client process, the database (FerretDB + its PostgreSQL, background workers included), the
  whole machine; `.client_cpu_wait_pct` how long the client's threads were runnable but waiting
  for a core (% of one core); `.db_cpu_us_per_query` database CPU per query, us. Every mongo_models figure
  carries its window's `bottleneck` (`models_bottleneck`: client_cpu, database_cpu, machine_cpu
  or unexplained)
- `mongo_models.all.cpu_windows_rejected` windows whose CPU readings did not fit the machine, per repeat
- `mongo_models.async_poolN.*` (same figures) the pool sweep: the seed's async setup, no semaphore,
  maxPoolSize N; `.ferretdb_pg_conns_max` most PostgreSQL connections FerretDB held (count)
- `mongo_models.pool_sweep.ferretdb_pg_pool`      FerretDB's own PostgreSQL pool size (count)
- `mongo_models.pool_sweep.smallest_over_best_qps` throughput at the smallest pool / the sweep's
  highest (ratio: 1 = the smallest pool was highest, the seed's claim); `.best_pool` its pool size

Every closed-loop window (mongo_models, mongo_pool, verify_mongo; `closed_loop_summary`):
- `cpu_check`: '' when its CPU readings fit the machine (`measure.cpu_consistency`: client +
  database <= machine <= cores x wall, within its tolerance), else the broken inequality; such a
  window's CPU figures are NaN, it names no bottleneck, and `<experiment>.all.cpu_windows_rejected`
  counts it. Applied to the stored readings of every run, old ones included.
- `in_flight_share`, `littles_law_predicted`, `littles_law_ratio`, `littles_law_tolerance`,
  `littles_law_outside`: Little's law in the window, allowing for its start and its drain
  (`littles_law`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...core import stats
from ...core.store import Run
from ..analysis import (
    BUSY,
    cores,
    demand_pct,
    fit_cpu,
    machine_limit,
)

SEED_SETUP = ("asyncio", "pymongo")
# the name suffix of each (loop, driver): '' for the seed's setup (setup_suffix)
SETUP_SUFFIXES = ("", "_uvloop", "_motor", "_uvloop_motor")


def setup_suffix(loop: str, driver: str) -> str:
    """'' for the seed's setup, else '_uvloop', '_motor' or '_uvloop_motor'."""
    parts = [x for x, default in ((loop, "asyncio"), (driver, "pymongo")) if x != default]
    return "".join(f"_{x}" for x in parts)


# ------------------------------------------------------------------------------------ cursor

def probe_idle(run: Run) -> pd.DataFrame:
    """The probe alone (nothing blocking): lateness summary and CPU cost, per repeat."""
    idle = run.table("mongo_cursor", "probe_idle")
    if idle.empty:  # runs before the calibration had its own table: variant "idle" of `probe`
        probe = run.table("mongo_cursor", "probe")
        idle = probe[probe.variant == "idle"] if not probe.empty else probe
    if idle.empty:
        return pd.DataFrame()
    rows = []
    for rep, g in idle.groupby("repeat"):
        s = stats.latency_summary(g.lateness_s)
        note = run.result("mongo_cursor", rep).get("notes", {}).get("probe_idle", {})
        rows.append({"repeat": rep, "wakeups": s["count"], "lateness_p50_ms": s["p50_ms"],
                     "lateness_p99_ms": s["p99_ms"], "lateness_max_ms": s["max_ms"],
                     "cpu_us_per_wakeup": note.get("cpu_us_per_wakeup", np.nan),
                     "cpu_fraction_of_core": note.get("cpu_fraction", np.nan)})
    return pd.DataFrame(rows)


def stall_split(probe: pd.DataFrame) -> dict[str, float]:
    """One probe's stalls split into the loop thread's own CPU and its wait for a core
    (`harness.core.probe`), in ms: the longest wall-clock stall (`max_ms`) with its wake-up's run, wait
    and their wait share; and the longest stall counted in own CPU (`run_max_ms`: the wake-up with the
    most run time) with its wall-clock span. NaN where the probe did not record the split (runs
    before it did, or no schedstat)."""
    out = dict.fromkeys(("max_ms", "max_run_ms", "max_wait_ms", "max_wait_share", "run_max_ms",
                         "run_max_span_ms", "run_max_wait_ms"), np.nan)
    if probe.empty:
        return out
    worst = probe.loc[probe["lateness_s"].idxmax()]
    out["max_ms"] = 1000.0 * float(worst["lateness_s"])
    if "run_s" not in probe.columns or probe["run_s"].isna().all():
        return out
    run, wait = float(worst["run_s"]), float(worst.get("wait_s", np.nan))
    out.update(max_run_ms=1000.0 * run, max_wait_ms=1000.0 * wait,
               max_wait_share=wait / (run + wait) if run + wait > 0 else np.nan)
    busiest = probe.loc[probe["run_s"].idxmax()]
    out.update(run_max_ms=1000.0 * float(busiest["run_s"]), run_max_span_ms=1000.0 * float(busiest["span_s"]),
               run_max_wait_ms=1000.0 * float(busiest.get("wait_s", np.nan)))
    return out


def cursor_summary(run: Run) -> pd.DataFrame:
    samples = run.table("mongo_cursor", "samples")
    probe = run.table("mongo_cursor", "probe")
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for _, s in samples.iterrows():
        # s["repeat"], not s.repeat: that is pandas' Series.repeat method
        g = probe[(probe.variant == s["variant"]) & (probe["repeat"] == s["repeat"])]
        ls = stats.latency_summary(g.lateness_s)
        split = stall_split(g)
        rows.append({"variant": s["variant"], "repeat": s["repeat"], "method": s.method,
                     "batch_size": "default" if s.batch_size == 0 else int(s.batch_size),
                     "documents": int(s.documents), "ok": bool(s.ok), "total_s": s.latency_s,
                     "docs_per_s": stats.throughput(s.documents, s.latency_s) if s.latency_s > 0 else np.nan,
                     "probe_wakeups": ls["count"], "stall_p50_ms": ls["p50_ms"], "stall_p99_ms": ls["p99_ms"],
                     "stall_max_ms": ls["max_ms"],
                     # the longest stall on the loop's own CPU, and the longest wall-clock stall's split
                     "stall_run_max_ms": split["run_max_ms"], "stall_run_max_span_ms": split["run_max_span_ms"],
                     "stall_max_run_ms": split["max_run_ms"], "stall_max_wait_ms": split["max_wait_ms"],
                     "stall_max_wait_share": split["max_wait_share"],
                     "error": s.error, "label": s.get("label"),
                     "batches": s.get("batches", np.nan), "max_batch_docs": s.get("max_batch_docs", np.nan)})
    return pd.DataFrame(rows)


def cursor_key(method: str, batch_size) -> str:
    if method == "to_list":
        return "to_list"
    return "default" if batch_size in (0, "default") else f"batch_size_{int(batch_size)}"


# -------------------------------------------------------------------------- closed-loop workloads

def closed_loop_summary(run: Run, exp: str) -> pd.DataFrame:
    """One row per variant and repeat of a MongoDB closed loop (mongo_models, mongo_pool,
    verify_mongo): throughput, latency, fairness, the window's CPU (NaN when its readings do not fit
    the machine, `cpu_check` saying why: `window_resources`) and its Little's-law check
    (`littles_law`)."""
    samples = run.table(exp, "samples")
    windows = run.table(exp, "windows")
    if samples.empty:
        return pd.DataFrame()
    n_cores = cores(run)
    rows = []
    for (variant, rep), g in samples.groupby(["variant", "repeat"], sort=False):
        w = windows[(windows.variant == variant) & (windows.repeat == rep)].iloc[0]
        ok = g[g.ok]
        lat = stats.latency_summary(ok.latency_s)
        fair = stats.fairness_summary(g.task.to_numpy(), int(w.workers))
        res = window_resources(w, n_cores)
        rows.append({"variant": variant, "repeat": rep, "mode": w["mode"], "loop": w.loop, "driver": w.driver,
                     "pool_size": int(w.pool_size), "workers": int(w.workers), "semaphore": bool(w.semaphore),
                     "ops": int(w.ops), "errors": int((~g.ok).sum()), "wall_s": w.wall_s,
                     "throughput_qps": stats.throughput(int(w.ops), w.wall_s),
                     **res,
                     **littles_law(g, int(w.workers), float(w.wall_s), float(w.get("duration_s", np.nan))),
                     **{k: v for k, v in lat.items() if k != "count"},
                     **{k: v for k, v in fair.items() if k != "tasks"}})
    return pd.DataFrame(rows)


def window_resources(w: pd.Series, n_cores: int) -> dict[str, Any]:
    """A window's client CPU per query and in cores, its `cpu_check`, and, when the window measured
    the database (mongo_models, verify_mongo), its CPU as % of one core (client, database, machine)
    and its limiting resource (`models_bottleneck`). Every CPU figure is NaN when the readings do not
    fit the machine (`analysis.fit_cpu`: client + database <= machine <= cores x wall), and such a
    window names no bottleneck ('')."""
    wall, cores_w = float(w.wall_s), int(w.get("cores") or n_cores or 1)
    measured = "db_cpu_s" in w and not pd.isna(w.get("machine_busy_s"))
    client, db, machine, check = fit_cpu(float(w.cpu_s), float(w.get("db_cpu_s", np.nan)),
                                         float(w.get("machine_busy_s", np.nan)), wall, cores_w)
    out: dict[str, Any] = {"cpu_us_per_query": stats.cpu_per_op_us(client, int(w.ops)),
                           "cpu_cores_used": client / wall, "cpu_check": check,
                           "ctx_vol_per_query": stats.switches_per_op(w.get("ctx_voluntary"), int(w.ops)),
                           "ctx_invol_per_query": stats.switches_per_op(w.get("ctx_involuntary"), int(w.ops))}
    if not measured:
        return out
    db_switches = [w.get(f"db_ctx_{kind}", np.nan) for kind in ("voluntary", "involuntary")]
    out["db_ctx_per_query"] = stats.switches_per_op(
        sum(db_switches) if all(s == s and s >= 0 for s in db_switches) else np.nan, int(w.ops))
    pct = lambda s: 100.0 * float(s) / wall if wall else np.nan  # noqa: E731
    out.update({"client_cpu_pct": pct(client), "client_cpu_wait_pct": pct(w.get("cpu_wait_s", np.nan)),
                "db_cpu_pct": pct(db), "machine_cpu_pct": pct(machine),
                "db_cpu_us_per_query": stats.cpu_per_op_us(db, int(w.ops)) if not pd.isna(db) else np.nan})
    out["bottleneck"] = "" if check else models_bottleneck(
        w["mode"], out["client_cpu_pct"], out["db_cpu_pct"], out["machine_cpu_pct"], cores_w,
        out["client_cpu_wait_pct"])
    return out


# Little's law in one MongoDB closed-loop window: |ratio - 1| <= LITTLE_BAND + LITTLE_Z standard errors
# (the PostgreSQL family's rule, analysis.postgres).
LITTLE_BAND = 0.03
LITTLE_Z = 1.96


def littles_law(samples: pd.DataFrame, tasks: int, wall_s: float, deadline_s: float) -> dict[str, Any]:
    """Little's law in one closed-loop window whose operations all start and end inside it (every
    operation started before `deadline_s` is awaited, then the window closes).

    Observed: the time-average number of operations in flight over the number of tasks,
    `in_flight_share` = total latency of the window's operations (ok or not) / (tasks x wall).
    Predicted, allowing for the window's edges: each task is in an operation from its first start
    until the deadline, then until its last operation returns, a forward recurrence time of the
    latency with mean E[L^2] / (2 E[L]) (renewal theory; at most the drain, wall - deadline); so
    `littles_law_predicted` = (deadline - mean first start + that residual) / wall. A window loses the
    law when operations are missing from its samples, when tasks spent time between operations (their
    own code, the GIL), or when operations overlap; extra wall time scales both sides and is the
    throughput form's to see (tests/test_littles_law.py). `littles_law_ratio` = observed / predicted;
    `littles_law_tolerance` = LITTLE_BAND + LITTLE_Z standard errors of the mean residual over the
    tasks (relative to wall); `littles_law_outside` flags a window beyond it."""
    nan = {"in_flight_share": np.nan, "littles_law_predicted": np.nan, "littles_law_ratio": np.nan,
           "littles_law_tolerance": np.nan, "littles_law_outside": False}
    lat = samples["latency_s"].to_numpy(float)
    if not len(lat) or not tasks or not wall_s > 0 or not deadline_s > 0 or not lat.mean() > 0:
        return nan
    m1 = lat.mean()
    residual = min(float(np.mean(lat ** 2)) / (2 * m1), max(wall_s - deadline_s, 0.0))
    residual_var = max(float(np.mean(lat ** 3)) / (3 * m1) - residual ** 2, 0.0)
    first = samples.groupby("task")["start_s"].min()
    start = (float(first.sum()) + (tasks - len(first)) * deadline_s) / tasks   # a task that never started: idle
    observed = float(lat.sum()) / (tasks * wall_s)
    predicted = (deadline_s - start + residual) / wall_s
    ratio = observed / predicted if predicted > 0 else np.nan
    tolerance = LITTLE_BAND + LITTLE_Z * math.sqrt(residual_var / tasks) / wall_s
    return {"in_flight_share": observed, "littles_law_predicted": predicted, "littles_law_ratio": ratio,
            "littles_law_tolerance": tolerance, "littles_law_outside": not abs(ratio - 1.0) <= tolerance}


def models_bottleneck(mode: str, client_pct: float, db_pct: float, machine_pct: float, cores: int,
                      wait_pct: float = math.nan) -> str:
    """The first saturated resource of a mongo_models window, in this order (the rules of
    harness.experiments.fastapi.analysis and .postgres, with the resources that apply here):
    client_cpu    the client process at >= 90% of what it can use: one core for the event loop,
                  every core for threads (PyMongo releases the GIL while it waits on a socket),
                  counting as busy the time its threads were runnable but waiting for a core
                  (`wait_pct`, 0 when not measured): such a client was never idle;
    database_cpu  the machine >= 90% busy and the database (FerretDB + its PostgreSQL) its largest
                  user (of database, client and everything else);
    machine_cpu   the machine >= 90% busy, another its largest user;
    unexplained   none of these (the pool or FerretDB's own PostgreSQL pool, which are not measured
                  as a utilisation here)."""
    client_cap = 100.0 * (cores if mode == "threads" else 1)
    if demand_pct(client_pct, wait_pct) >= BUSY * client_cap:
        return "client_cpu"
    return machine_limit(machine_pct, cores, {"database": db_pct, "client": client_pct}) or "unexplained"


def pool_summary(run: Run) -> pd.DataFrame:
    """Per variant: throughput, latency percentiles (ms), per-task completions, Jain's index."""
    return closed_loop_summary(run, "mongo_pool")


def pool_completions(run: Run) -> pd.DataFrame:
    """Operations completed by every task (including tasks that completed none): the starvation."""
    samples = run.table("mongo_pool", "samples")
    windows = run.table("mongo_pool", "windows")
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for (variant, rep), g in samples[samples.ok].groupby(["variant", "repeat"], sort=False):
        w = windows[(windows.variant == variant) & (windows.repeat == rep)].iloc[0]
        counts = stats.completion_counts(g.task.to_numpy(), int(w.workers))
        rows += [{"variant": variant, "repeat": rep, "mode": w["mode"], "loop": w.loop, "driver": w.driver,
                  "task": t, "completed": int(c)} for t, c in enumerate(counts)]
    return pd.DataFrame(rows)


def models_summary(run: Run) -> pd.DataFrame:
    """Per variant: throughput, client CPU per query (us), latency percentiles (ms)."""
    return closed_loop_summary(run, "mongo_models")


def client_summary(run: Run) -> pd.DataFrame:
    samples = run.table("mongo_client", "samples")
    if samples.empty:
        return pd.DataFrame()
    out = stats.summarize_samples(samples[samples.ok], by=("variant", "repeat", "mode", "loop", "driver"))
    errors = samples.groupby(["variant", "repeat"]).ok.apply(lambda s: int((~s).sum())).rename("errors")
    return out.merge(errors.reset_index(), on=["variant", "repeat"])


# ----------------------------------------------------------------------------------------- bulk

def bulk_summary(run: Run) -> pd.DataFrame:
    samples = run.table("mongo_bulk", "samples")
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for (variant, rep), g in samples.groupby(["variant", "repeat"], sort=False):
        first = g.iloc[0]
        ok = g[g.ok]
        docs = int(g.docs.sum())
        total = float(ok.latency_s.sum()) if len(ok) else np.nan
        per_doc = stats.latency_summary(ok.latency_s / ok.docs)["mean_ms"] * 1000 if len(ok) else np.nan
        rows.append({"variant": variant, "repeat": rep, "op": first.op, "ordered": bool(first.ordered),
                     "matching": first.get("matching") if "matching" in g else None,
                     "documents": docs, "ok": bool(g.ok.all()), "total_s": total, "us_per_doc": per_doc,
                     "error": next((e for e in g.error if isinstance(e, str)), None)})
    return pd.DataFrame(rows)


def bulk_duplicates(run: Run) -> pd.DataFrame:
    return run.table("mongo_bulk", "duplicates")


