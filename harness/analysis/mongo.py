"""The MongoDB experiments' raw tables turned into summary tables and named metrics.

Summary functions (one row per variant and repeat unless said; all statistics from `harness.stats`):
`probe_idle`, `cursor_summary`, `pool_summary`, `pool_completions`, `client_summary`,
`bulk_summary`, `bulk_duplicates`, `models_summary`. Each returns an empty frame when the run
does not hold the experiment.

`metrics(run)` gives named quantities to compare with seed 001's figures: the mean over the run's
ok repeats of the per-repeat value. Names and units:

mongo_cursor (V in: default, batch_size_100, batch_size_1000, batch_size_10000, to_list)
- `mongo_cursor.V.max_stall_ms`     longest probe lateness while reading all documents, ms
- `mongo_cursor.V.p99_stall_ms`     99th percentile of probe lateness, ms
- `mongo_cursor.V.total_s`          time to read every document, s
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
- `mongo_pool.tasks`, `mongo_pool.pool_size`, `mongo_pool.large_pool_size`, `mongo_pool.duration_s`

mongo_client (suffixes as for mongo_pool)
- `mongo_client.per_request_ms`     mean time per query with a client created and closed per query, ms
- `mongo_client.shared_ms`          mean time per query on one shared client, ms
- `mongo_client.per_request_p50_ms`, `mongo_client.shared_p50_ms`   medians, ms
- `mongo_client.ratio`              per_request_ms / shared_ms

mongo_bulk
- `mongo_bulk.insert_one_us_per_doc`      mean insert_one latency, us per document
- `mongo_bulk.insert_one_count`           insert_one calls measured (count)
- `mongo_bulk.insert_one_extrapolated_s`  that mean x `documents`: the seed's extrapolation, s
- `mongo_bulk.insert_many_s`              insert_many(documents, ordered=True), s
- `mongo_bulk.insert_many_unordered_s`    insert_many(documents, ordered=False), s
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
- `mongo_models.T.p50_ms`, `.p99_ms`, `.max_ms` (and for A)             latency, ms
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..store import Run

SEED_SETUP = ("asyncio", "pymongo")


def _qual(loop: str, driver: str) -> str:
    """'' for the seed's setup, else '_uvloop', '_motor' or '_uvloop_motor'."""
    parts = [x for x, default in ((loop, "asyncio"), (driver, "pymongo")) if x != default]
    return "".join(f"_{x}" for x in parts)


def _has(run: Run, exp: str) -> bool:
    return exp in run.experiments and bool(run.repeat_dirs(exp))


# ------------------------------------------------------------------------------------ cursor

def probe_idle(run: Run) -> pd.DataFrame:
    """The probe alone (nothing blocking): lateness summary and CPU cost, per repeat."""
    probe = run.table("mongo_cursor", "probe")
    if probe.empty:
        return pd.DataFrame()
    idle = probe[probe.variant == "idle"]
    rows = []
    for rep, g in idle.groupby("repeat"):
        s = stats.latency_summary(g.lateness_s)
        note = run.result("mongo_cursor", rep).get("notes", {}).get("probe_idle", {})
        rows.append({"repeat": rep, "wakeups": s["count"], "lateness_p50_ms": s["p50_ms"],
                     "lateness_p99_ms": s["p99_ms"], "lateness_max_ms": s["max_ms"],
                     "cpu_us_per_wakeup": note.get("cpu_us_per_wakeup", np.nan),
                     "cpu_fraction_of_core": note.get("cpu_fraction", np.nan)})
    return pd.DataFrame(rows)


def cursor_summary(run: Run) -> pd.DataFrame:
    samples = run.table("mongo_cursor", "samples")
    probe = run.table("mongo_cursor", "probe")
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for _, s in samples.iterrows():
        # s["repeat"], not s.repeat: that is pandas' Series.repeat method
        lat = probe[(probe.variant == s["variant"]) & (probe["repeat"] == s["repeat"])].lateness_s
        ls = stats.latency_summary(lat)
        rows.append({"variant": s["variant"], "repeat": s["repeat"], "method": s.method,
                     "batch_size": "default" if s.batch_size == 0 else int(s.batch_size),
                     "documents": int(s.documents), "ok": bool(s.ok), "total_s": s.latency_s,
                     "docs_per_s": stats.throughput(s.documents, s.latency_s) if s.latency_s > 0 else np.nan,
                     "probe_wakeups": ls["count"], "stall_p50_ms": ls["p50_ms"], "stall_p99_ms": ls["p99_ms"],
                     "stall_max_ms": ls["max_ms"], "error": s.error})
    return pd.DataFrame(rows)


def _cursor_key(method: str, batch_size) -> str:
    if method == "to_list":
        return "to_list"
    return "default" if batch_size in (0, "default") else f"batch_size_{int(batch_size)}"


# -------------------------------------------------------------------------- closed-loop workloads

def _closed_loop_summary(run: Run, exp: str) -> pd.DataFrame:
    samples = run.table(exp, "samples")
    windows = run.table(exp, "windows")
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for (variant, rep), g in samples.groupby(["variant", "repeat"], sort=False):
        w = windows[(windows.variant == variant) & (windows.repeat == rep)].iloc[0]
        ok = g[g.ok]
        lat = stats.latency_summary(ok.latency_s)
        fair = stats.fairness_summary(g.task.to_numpy(), int(w.workers))
        rows.append({"variant": variant, "repeat": rep, "mode": w["mode"], "loop": w.loop, "driver": w.driver,
                     "pool_size": int(w.pool_size), "workers": int(w.workers), "semaphore": bool(w.semaphore),
                     "ops": int(w.ops), "errors": int((~g.ok).sum()), "wall_s": w.wall_s,
                     "throughput_qps": stats.throughput(int(w.ops), w.wall_s),
                     "cpu_us_per_query": stats.cpu_per_op_us(w.cpu_s, int(w.ops)),
                     "cpu_cores_used": w.cpu_s / w.wall_s,
                     **{k: v for k, v in lat.items() if k != "count"},
                     **{k: v for k, v in fair.items() if k != "tasks"}})
    return pd.DataFrame(rows)


def pool_summary(run: Run) -> pd.DataFrame:
    """Per variant: throughput, latency percentiles (ms), per-task completions, Jain's index."""
    return _closed_loop_summary(run, "mongo_pool")


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
    return _closed_loop_summary(run, "mongo_models")


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


# -------------------------------------------------------------------------------------- metrics

def _mean(values: list[float]) -> float:
    return stats.spread(values)["mean"]


def metrics(run: Run) -> dict[str, float]:
    """Named quantities (see the module docstring), averaged over the run's ok repeats."""
    acc: dict[str, list[float]] = {}

    def put(name: str, value) -> None:
        if value is not None and not (isinstance(value, float) and np.isnan(value)):
            acc.setdefault(name, []).append(float(value))

    if _has(run, "mongo_cursor"):
        for _, r in cursor_summary(run).iterrows():
            if not r.ok:
                continue
            key = f"mongo_cursor.{_cursor_key(r.method, r.batch_size)}"
            put(f"{key}.max_stall_ms", r.stall_max_ms)
            put(f"{key}.p99_stall_ms", r.stall_p99_ms)
            put(f"{key}.total_s", r.total_s)
            put("mongo_cursor.documents", r.documents)
        for _, r in probe_idle(run).iterrows():
            put("mongo_cursor.probe.idle_max_ms", r.lateness_max_ms)
            put("mongo_cursor.probe.idle_p99_ms", r.lateness_p99_ms)
            put("mongo_cursor.probe.cpu_us_per_wakeup", r.cpu_us_per_wakeup)

    if _has(run, "mongo_pool"):
        for _, r in pool_summary(run).iterrows():
            key = f"mongo_pool.{r['mode']}{_qual(r.loop, r.driver)}"
            for q in ("throughput_qps", "p50_ms", "p99_ms", "max_ms", "ops_per_task_min", "ops_per_task_max",
                      "jain_index", "errors"):
                put(f"{key}.{q}", r[q])
            put(f"{key}.p99_9_ms", r["p99.9_ms"])
            if r["mode"] == "large_pool":
                put("mongo_pool.large_pool_size", r.pool_size)
            else:
                put("mongo_pool.pool_size", r.pool_size)
            put("mongo_pool.tasks", r.workers)
        params = run.experiments.get("mongo_pool", {}).get("params", {})
        put("mongo_pool.duration_s", params.get("duration_s"))

    if _has(run, "mongo_client"):
        per: dict[str, dict[str, list[float]]] = {}
        for _, r in client_summary(run).iterrows():
            q = _qual(r.loop, r.driver)
            put(f"mongo_client.{r['mode']}{q}_ms", r.mean_ms)
            put(f"mongo_client.{r['mode']}{q}_p50_ms", r.p50_ms)
            per.setdefault(q, {}).setdefault(r["mode"], []).append(r.mean_ms)
        for q, modes in per.items():
            if "per_request" in modes and "shared" in modes:
                put(f"mongo_client.ratio{q}", _mean(modes["per_request"]) / _mean(modes["shared"]))

    if _has(run, "mongo_bulk"):
        params = run.experiments.get("mongo_bulk", {}).get("params", {})
        for _, r in bulk_summary(run).iterrows():
            if not r.ok:
                continue
            if r.op == "insert_one":
                put("mongo_bulk.insert_one_us_per_doc", r.us_per_doc)
                put("mongo_bulk.insert_one_count", r.documents)
                if params.get("documents"):
                    put("mongo_bulk.insert_one_extrapolated_s", r.us_per_doc * params["documents"] / 1e6)
            elif r.op == "insert_many":
                put("mongo_bulk.insert_many_s" if r.ordered else "mongo_bulk.insert_many_unordered_s", r.total_s)
                put("mongo_bulk.documents", r.documents)
            elif r.op == "bulk_write_upsert":
                if r.matching in (None, "0%"):
                    put("mongo_bulk.bulk_write_upsert_s", r.total_s)
                    put("mongo_bulk.bulk_write_upsert_us_per_doc", r.us_per_doc)
                else:
                    put("mongo_bulk.bulk_write_upsert_matching_s", r.total_s)
        for _, r in bulk_duplicates(run).iterrows():
            put(f"mongo_bulk.dup_{'ordered' if r.ordered else 'unordered'}_landed", r.landed)
            put("mongo_bulk.dup_batch_docs", r.batch_docs)
            put("mongo_bulk.dup_index", r.dup_index)

    if _has(run, "mongo_models"):
        for _, r in models_summary(run).iterrows():
            if r["mode"] == "threads":
                key = f"mongo_models.threads{r.workers}"
            else:
                key = f"mongo_models.async_{'semaphore' if r.semaphore else 'bare'}{_qual(r.loop, r.driver)}"
            for q in ("throughput_qps", "cpu_us_per_query", "p50_ms", "p99_ms", "max_ms"):
                put(f"{key}.{q}", r[q])

    return {k: _mean(v) for k, v in sorted(acc.items())}
