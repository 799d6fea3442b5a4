"""Seed 000 (sync vs async FastAPI + PyMongo under Locust): raw tables of a run -> the seed's table,
the "staircase" over time, open-loop corrected vs naive latency, and named metrics.

Inputs are the raw tables of `fastapi_locust` (see harness/experiments/fastapi_locust.py). Every
percentile computed here comes from `harness.stats`: `stats.percentiles` on the raw per-request
samples the locustfile records, `stats.hdr_histogram` / `stats.hdr_summary` on the open-loop
requests. Columns prefixed `locust_` are Locust's own figures, copied from its CSVs (its
percentiles are bucketed and its "current RPS" is a sliding window): shown beside ours, labelled.

The attempt used for a variant is its last successful Locust attempt (attempt 1 exists only when
attempt 0 saturated the generator and was rerun with `--processes`); `summary_table(all_attempts=True)`
shows every attempt.

Metric names (`metrics(run)`, floats; the mean over repeats when a run has several):
  fastapi_locust.<v>.max_rps           highest Locust "current RPS" (Aggregated, its ~10 s sliding
                                       window) in the stats history: the seed's "Max RPS" (req/s)
  fastapi_locust.<v>.mean_rps          requests completed / Locust run time (req/s)
  fastapi_locust.<v>.median_ms         median latency of all Locust requests, raw samples (ms)
  fastapi_locust.<v>.p95_ms            95th percentile, same samples (ms)
  fastapi_locust.<v>.p99_ms            99th percentile, same samples (ms)
  fastapi_locust.<v>.locust_median_ms  Locust's own aggregate median (ms)
  fastapi_locust.<v>.locust_p95_ms     Locust's own aggregate 95th percentile (ms)
  fastapi_locust.<v>.requests          requests Locust completed (count)
  fastapi_locust.<v>.failures          of which failed (count); failure_pct (%)
  fastapi_locust.<v>.server_cpu_pct    uvicorn's CPU over the Locust run, % of one core
  fastapi_locust.<v>.locust_cpu_pct    Locust's CPU (all its processes), % of one core
  fastapi_locust.<v>.db_cpu_pct        the database processes' CPU (FerretDB + its PostgreSQL,
                                       when the harness started them; else absent), % of one core
  fastapi_locust.<v>.generator_saturated   1 if Locust warned of CPU > 90% on the attempt used
  fastapi_locust.<v>.locust_processes  Locust processes of the attempt used (count)
  fastapi_locust.<v>.openloop.r<k>.rate               k-th lowest open-loop rate (req/s)
  fastapi_locust.<v>.openloop.r<k>.corrected_p50_ms   latency from intended send time (ms)
  fastapi_locust.<v>.openloop.r<k>.corrected_p99_ms
  fastapi_locust.<v>.openloop.r<k>.naive_p50_ms       latency from actual send time (ms)
  fastapi_locust.<v>.openloop.r<k>.naive_p99_ms
  fastapi_locust.<v>.openloop.r<k>.unsent             requests never sent before the drain (count)
  fastapi_locust.async_over_sync_1thread.max_rps_ratio     async max_rps / sync_1thread max_rps
  fastapi_locust.sync_1thread_over_async.median_ms_ratio   sync_1thread median / async median
  fastapi_locust.sync_1thread_over_async.p95_ms_ratio      sync_1thread p95 / async p95
where <v> is a variant: sync_1thread | sync_40threads | async | mixed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .. import stats
from ..store import Run

EXPERIMENT = "fastapi_locust"
VARIANT_ORDER = ("sync_1thread", "sync_40threads", "async", "mixed")


def available(run: Run) -> bool:
    """True if the run holds at least one successful repeat of the experiment."""
    return not run.table(EXPERIMENT, "runs").empty


def _order(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "variant" not in df:
        return df
    key = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return df.sort_values(["variant"], key=lambda s: s.map(lambda v: key.get(v, len(key))),
                          kind="stable", ignore_index=True)


def used_attempts(run: Run) -> pd.DataFrame:
    """(repeat, variant, attempt) of the attempt each variant's figures come from."""
    runs = run.table(EXPERIMENT, "runs")
    if runs.empty:
        return pd.DataFrame(columns=["repeat", "variant", "attempt"])
    ok = runs[runs["status"] == "ok"]
    return ok.groupby(["repeat", "variant"], as_index=False)["attempt"].max()


def _cpu_pct(cpu_s: float, wall_s: float) -> float:
    return cpu_s / wall_s * 100.0 if wall_s and not math.isnan(cpu_s) else float("nan")


def summary_table(run: Run, all_attempts: bool = False) -> pd.DataFrame:
    """One row per variant (and repeat): the seed's table and what Locust and the server cost."""
    runs = run.table(EXPERIMENT, "runs")
    if runs.empty:
        return pd.DataFrame()
    samples = run.table(EXPERIMENT, "samples")
    history = run.table(EXPERIMENT, "locust_history")
    lstats = run.table(EXPERIMENT, "locust_stats")
    rows = []
    keep = runs if all_attempts else runs.merge(used_attempts(run), on=["repeat", "variant", "attempt"])
    failed = runs[(runs["status"] != "ok") & ~runs["variant"].isin(keep["variant"])]
    for _, r in keep.iterrows():
        sel = lambda df: df[(df["repeat"] == r["repeat"]) & (df["variant"] == r["variant"])  # noqa: E731
                            & (df["attempt"] == r["attempt"])] if not df.empty else df
        s, h, ls = sel(samples), sel(history), sel(lstats)
        lat = s["latency_s"].to_numpy() if len(s) else np.array([])
        p50, p95, p99 = stats.percentiles(lat * 1000.0, [50, 95, 99])
        agg_h = h[h["name"] == "Aggregated"] if len(h) else h
        agg_s = ls[ls["name"] == "Aggregated"] if len(ls) else ls
        rows.append({
            "repeat": r["repeat"], "variant": r["variant"], "attempt": r["attempt"],
            "locust_processes": r.get("locust_processes"), "users": r.get("users"),
            "max_rps": float(agg_h["requests_s"].max()) if len(agg_h) else float("nan"),
            "mean_rps": stats.throughput(len(s), float(r["run_time_s"])) if r.get("run_time_s") else float("nan"),
            "median_ms": p50, "p95_ms": p95, "p99_ms": p99,
            "locust_median_ms": float(agg_s["p50"].iloc[0]) if len(agg_s) else float("nan"),
            "locust_p95_ms": float(agg_s["p95"].iloc[0]) if len(agg_s) else float("nan"),
            "locust_p99_ms": float(agg_s["p99"].iloc[0]) if len(agg_s) else float("nan"),
            "requests": int(len(s)), "failures": int((~s["ok"]).sum()) if len(s) else 0,
            "failure_pct": float((~s["ok"]).mean() * 100.0) if len(s) else float("nan"),
            "server_cpu_pct": _cpu_pct(r["server_cpu_s"], r["wall_s"]),
            "locust_cpu_pct": _cpu_pct(r["locust_cpu_s"], r["wall_s"]),
            "db_cpu_pct": _cpu_pct(r.get("db_cpu_s", float("nan")), r["wall_s"]),
            "generator_saturated": bool(r["generator_saturated"]),
            "status": r["status"], "error": r.get("error", ""),
        })
    for _, r in failed.iterrows():
        rows.append({"repeat": r["repeat"], "variant": r["variant"], "attempt": r["attempt"],
                     "status": r["status"], "error": r.get("error", "")})
    return _order(pd.DataFrame(rows))


def seed_table(run: Run) -> pd.DataFrame:
    """The seed's table layout: metrics as rows, variants as columns (repeat 0)."""
    t = summary_table(run)
    if t.empty:
        return t
    t = t[t["repeat"] == t["repeat"].min()].set_index("variant")
    labels = {"max_rps": "Max RPS (Locust, req/s)", "median_ms": "Median latency (ms)",
              "p95_ms": "95th percentile (ms)", "p99_ms": "99th percentile (ms)",
              "failure_pct": "Failures (%)", "server_cpu_pct": "Server CPU (% of a core)",
              "db_cpu_pct": "Database CPU (% of a core)", "locust_cpu_pct": "Locust CPU (% of a core)",
              "generator_saturated": "Locust saturated (>90% CPU)"}
    cols = [c for c in labels if c in t]
    return t[cols].T.rename(index=labels)


def staircase(run: Run, bin_s: float = 5.0) -> pd.DataFrame:
    """Response time and throughput over time as users ramp, per variant (attempt used, repeat 0).

    From Locust's history (one row a second): t_s, user_count, locust_rps, locust_p50_ms,
    locust_p95_ms (Locust's sliding-window figures). From raw samples, in bins of `bin_s` by
    request start: rps, p50_ms, p95_ms (harness.stats); joined on the bin.
    """
    hist = run.table(EXPERIMENT, "locust_history")
    samples = run.table(EXPERIMENT, "samples")
    used = used_attempts(run)
    if hist.empty or used.empty:
        return pd.DataFrame()
    used = used[used["repeat"] == used["repeat"].min()]
    out = []
    for _, u in used.iterrows():
        h = hist[(hist["repeat"] == u["repeat"]) & (hist["variant"] == u["variant"])
                 & (hist["attempt"] == u["attempt"]) & (hist["name"] == "Aggregated")].copy()
        if h.empty:
            continue
        t0 = h["timestamp"].min()
        h["t_s"] = h["timestamp"] - t0
        h["bin"] = (h["t_s"] // bin_s).astype(int)
        s = samples[(samples["repeat"] == u["repeat"]) & (samples["variant"] == u["variant"])
                    & (samples["attempt"] == u["attempt"])] if not samples.empty else samples
        binned = []
        if len(s):
            # Locust's timestamps are whole epoch seconds; samples' start_s are since Locust started.
            b = (s["start_s"] // bin_s).astype(int)
            for k, g in s.groupby(b):
                p50, p95 = stats.percentiles(g["latency_s"].to_numpy() * 1000.0, [50, 95])
                binned.append({"bin": int(k), "rps": stats.throughput(len(g), bin_s), "p50_ms": p50,
                               "p95_ms": p95})
        bdf = pd.DataFrame(binned, columns=["bin", "rps", "p50_ms", "p95_ms"])
        per_bin = h.groupby("bin", as_index=False).agg(
            t_s=("t_s", "min"), user_count=("user_count", "max"), locust_rps=("requests_s", "mean"),
            locust_p50_ms=("p50", "median"), locust_p95_ms=("p95", "median"))
        m = per_bin.merge(bdf, on="bin", how="left")
        m.insert(0, "variant", u["variant"])
        out.append(m)
    return _order(pd.concat(out, ignore_index=True)) if out else pd.DataFrame()


def history(run: Run) -> pd.DataFrame:
    """Locust's Aggregated history rows (attempt used, repeat 0) with t_s since Locust started."""
    hist = run.table(EXPERIMENT, "locust_history")
    used = used_attempts(run)
    if hist.empty or used.empty:
        return pd.DataFrame()
    h = hist.merge(used, on=["repeat", "variant", "attempt"])
    h = h[(h["name"] == "Aggregated") & (h["repeat"] == h["repeat"].min())].copy()
    h["t_s"] = h["timestamp"] - h.groupby("variant")["timestamp"].transform("min")
    return _order(h[["variant", "t_s", "user_count", "requests_s", "failures_s", "p50", "p95"]]
                  .rename(columns={"requests_s": "locust_rps", "failures_s": "locust_failures_s",
                                   "p50": "locust_p50_ms", "p95": "locust_p95_ms"}))


def openloop_table(run: Run) -> pd.DataFrame:
    """Per variant and rate: corrected (from intended send time) vs naive (from actual) latency."""
    ol = run.table(EXPERIMENT, "openloop")
    if ol.empty:
        return pd.DataFrame()
    runs = run.table(EXPERIMENT, "openloop_runs")
    rows = []
    for (rep, variant, rate), g in ol.groupby(["repeat", "variant", "rate"], sort=True):
        sent = g[g["sent"]]
        c = stats.hdr_summary(stats.hdr_histogram(np.round(sent["corrected_s"].to_numpy() * 1e6)))
        n = stats.hdr_summary(stats.hdr_histogram(np.round(sent["naive_s"].to_numpy() * 1e6)))
        info = runs[(runs["repeat"] == rep) & (runs["variant"] == variant) & (runs["rate"] == rate)]
        wall = float(info["wall_s"].iloc[0]) if len(info) else float("nan")
        rows.append({
            "repeat": rep, "variant": variant, "rate": rate,
            "rate_fraction": float(g["rate_fraction"].iloc[0]), "scheduled": len(g), "sent": len(sent),
            "ok": int(g["ok"].sum()), "unsent": int((~g["sent"]).sum()),
            "achieved_rps": stats.throughput(int(g["ok"].sum()), wall) if wall > 0 else float("nan"),
            **{f"corrected_{k}": c[k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
            **{f"naive_{k}": n[k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
            "server_cpu_pct": _cpu_pct(float(info["server_cpu_s"].iloc[0]), wall) if len(info) else float("nan"),
        })
    return _order(pd.DataFrame(rows))


def metrics(run: Run) -> dict[str, float]:
    """Named quantities for the claims ledger (see the module docstring for names and units)."""
    out: dict[str, list[float]] = {}

    def put(name: str, value: Any) -> None:
        if value is None:
            return
        v = float(value)
        if not math.isnan(v):
            out.setdefault(f"{EXPERIMENT}.{name}", []).append(v)

    t = summary_table(run)
    if not t.empty:
        t = t[t["status"] == "ok"]
        for _, r in t.iterrows():
            v = r["variant"]
            for q in ("max_rps", "mean_rps", "median_ms", "p95_ms", "p99_ms", "locust_median_ms",
                      "locust_p95_ms", "requests", "failures", "failure_pct", "server_cpu_pct",
                      "locust_cpu_pct", "db_cpu_pct", "locust_processes"):
                put(f"{v}.{q}", r.get(q))
            put(f"{v}.generator_saturated", int(bool(r["generator_saturated"])))
        for rep, g in t.groupby("repeat"):
            by = g.set_index("variant")
            if {"async", "sync_1thread"} <= set(by.index):
                a, s = by.loc["async"], by.loc["sync_1thread"]
                if s["max_rps"]:
                    put("async_over_sync_1thread.max_rps_ratio", a["max_rps"] / s["max_rps"])
                if a["median_ms"]:
                    put("sync_1thread_over_async.median_ms_ratio", s["median_ms"] / a["median_ms"])
                if a["p95_ms"]:
                    put("sync_1thread_over_async.p95_ms_ratio", s["p95_ms"] / a["p95_ms"])
    ol = openloop_table(run)
    if not ol.empty:
        for (rep, v), g in ol.groupby(["repeat", "variant"]):
            for k, (_, r) in enumerate(g.sort_values("rate").iterrows()):
                base = f"{v}.openloop.r{k}"
                put(f"{base}.rate", r["rate"])
                for q in ("corrected_p50_ms", "corrected_p99_ms", "naive_p50_ms", "naive_p99_ms", "unsent"):
                    put(f"{base}.{q}", r[q])
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}
