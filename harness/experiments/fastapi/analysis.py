"""Seed 000 (sync vs async FastAPI + PyMongo under Locust): raw tables of a run -> the seed's table,
each variant's measured bottleneck, the "staircase" over time, open-loop latency, and per-repeat
metrics in the C1 long form.

Inputs are the raw tables of `fastapi_locust` (see harness/experiments/fastapi/locust.py). Every
percentile comes from `harness.core.stats`. The figures of a variant come from its last successful
Locust attempt (attempt 1 exists only when attempt 0 saturated the generator).

Definitions (fixed; stated in docs/LOAD_TESTING.md):
- the hold: the seconds when all `users` were running (from Locust's history), up to `hold_s`;
- `max_rps`: successful requests completed in the hold / its length (req/s); `locust_peak_rps` is
  Locust's own highest "current RPS" (its ~10 s sliding window: the seed's "Max RPS") beside it;
- `median_ms`, `p95_ms`, `p99_ms`: requests completed in the hold, failed ones entered at the
  request time-out (`stats.censored_latency_summary`: censored, never dropped). In a closed loop
  these follow from the throughput (R = N/X - Z): latency claims belong to the open loop;
- `failure_rate`: failed / all requests of the Locust run (ratio); a cell above 1% is failed (C2);
- CPU figures are % of one core over the hold: `app_cpu_pct` (uvicorn), `db_cpu_pct` (FerretDB and
  its PostgreSQL postmaster with all its children: background processes count), `locust_cpu_pct`,
  `machine_cpu_pct` (every process on the machine, all cores); `db_cpu_ms_per_request` = database
  CPU in the hold / requests completed in it; `app_cpu_wait_pct`, `db_cpu_wait_pct`: how long the
  app's and the database's threads were runnable but waiting for a core (`measure.CPUSampler`).
- `cpu_check`: '' when the hold's CPU readings fit the machine (Locust + app + database + proxy <=
  machine <= cores x hold, within `measure.cpu_consistency`'s tolerance), else the broken
  inequality; such a hold's CPU figures are NaN (its bottleneck is read without them) and
  `<experiment>.all.cpu_windows_rejected` counts it per repeat. Applied to every run's stored readings.

Bottleneck (`bottleneck()`; the first rule that holds):
  load_generator   Locust warned of > 90% CPU, or used >= 90% of a core per process
  offered_load     throughput >= 0.9 x users / (mean think time + R0): Locust set the pace. R0 is
                   the unloaded latency: median of the sequential warm-up requests (one client):
                   with the latency under load the ratio is 1 in any closed loop (Little's law), so
                   it could not fail
  database_cpu     the machine is >= 90% busy and the database is its largest consumer (of app,
                   database, Locust, proxy and everything else): `database_bound`, and the
                   comparison is then about the database, not sync vs async
  machine_cpu      the machine is >= 90% busy and something else is the largest consumer
  thread_limiter   the AnyIO limiter's busy tokens averaged >= 90% of its tokens
  event_loop       the event loop's lag (median) >= 100 ms: a blocking call holds the loop (mixed)
  app_cpu          uvicorn used >= 90% of one core, counting the time its threads were runnable
                   but waiting for a core (`app_cpu_wait_pct`; 0 when not measured)
  unexplained      none of the above: e.g. waiting on the network with spare CPU everywhere
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
    CPU_REJECTED_METRIC,
    MetricRows,
    demand_pct,
    fit_cpu,
    machine_limit,
    metric_name,
    put_cpu_rejected,
)
from ..base import Metric

EXPERIMENT = "fastapi_locust"
CROSSOVER = "fastapi_crossover"
OPENLOOP = "fastapi_openloop"
VARIANT_ORDER = ("sync_1thread", "sync_40threads", "async", "mixed")
LOOP_BLOCKED_S = 0.1
UNLOADED_REQUESTS = 20     # R0 fallback: median latency of a cell's first successful requests
BOTTLENECKS = ("load_generator", "offered_load", "database_cpu", "machine_cpu", "thread_limiter",
               "event_loop", "app_cpu", "unexplained")


def available(run: Run, experiment: str = EXPERIMENT) -> bool:
    """True if the run holds at least one ok cell of the experiment."""
    if not run.repeat_dirs(experiment):
        return False
    cells = run.cells(experiment)
    return not cells.empty and bool((cells["status"] == "ok").any())


def _order(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "variant" not in df:
        return df
    key = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return df.sort_values(["variant"], key=lambda s: s.map(lambda v: key.get(v, len(key))),
                          kind="stable", ignore_index=True)


def _used(runs: pd.DataFrame) -> pd.DataFrame:
    ok = runs[runs["status"] == "ok"]
    idx = ok.groupby(["repeat", "variant"])["attempt"].idxmax()
    return ok.loc[idx.values]


def _pct(cpu_s: Any, wall_s: Any) -> float:
    try:
        cpu_s, wall_s = float(cpu_s), float(wall_s)
    except (TypeError, ValueError):
        return float("nan")
    return cpu_s / wall_s * 100.0 if wall_s > 0 and not math.isnan(cpu_s) else float("nan")


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def hold_cpu(r: dict[str, Any] | pd.Series, wall_s: float) -> dict[str, Any]:
    """The hold's CPU seconds per role (server = the app, database, locust, proxy, machine) and
    `check`: '' when they fit the machine (`analysis.fit_cpu`, with Locust as the client and app +
    database + proxy as the server), else the broken inequality, and then every role's seconds are
    NaN (no CPU figure, no bottleneck built from them)."""
    roles = {k: _float(r.get(f"hold_{k}_cpu_s")) for k in ("server", "database", "locust", "proxy")}
    server = [v for k, v in roles.items() if k != "locust" and not math.isnan(v)]
    n = _float(r.get("cores"))
    check = fit_cpu(roles["locust"], sum(server) if server else math.nan, _float(r.get("hold_machine_cpu_s")),
                    wall_s, int(n) if n > 0 else 1)[3]
    out: dict[str, Any] = {k: (math.nan if check else v) for k, v in roles.items()}
    out["machine"] = math.nan if check else _float(r.get("hold_machine_cpu_s"))
    out["check"] = check
    return out


def bottleneck(r: dict[str, Any] | pd.Series) -> str:
    """The first saturated resource, by the rules in the module docstring."""
    g = lambda k: float(r.get(k, float("nan")) if r.get(k) is not None else float("nan"))  # noqa: E731
    procs = max(1, int(g("locust_workers") or 0)) if not math.isnan(g("locust_workers")) else 1
    if bool(r.get("generator_saturated")) or g("locust_cpu_pct") >= BUSY * 100 * procs:
        return "load_generator"
    if g("offered_load_ratio") >= BUSY:
        return "offered_load"
    machine = machine_limit(g("machine_cpu_pct"), g("cores"), {
        "database": g("db_cpu_pct"), "app": g("app_cpu_pct"), "locust": g("locust_cpu_pct"),
        "proxy": g("proxy_cpu_pct")})
    if machine:
        return machine
    if g("busy_tokens_frac") >= BUSY:
        return "thread_limiter"
    if g("loop_lag_p50_ms") >= LOOP_BLOCKED_S * 1000:
        return "event_loop"
    if demand_pct(g("app_cpu_pct"), g("app_cpu_wait_pct")) >= BUSY * 100:
        return "app_cpu"
    return "unexplained"


def _pick(df: pd.DataFrame, key: tuple[Any, Any, Any]) -> pd.DataFrame:
    """The rows of one (repeat, variant, attempt)."""
    if df.empty:
        return df
    return df[(df["repeat"] == key[0]) & (df["variant"] == key[1]) & (df["attempt"] == key[2])]


def summary_table(run: Run, ok_only: bool = True, experiment: str = EXPERIMENT) -> pd.DataFrame:
    """One row per variant and repeat (the attempt used): throughput, latency, failures, resources,
    bottleneck. `ok_only=False` also keeps failed cells (for hollow markers), with `cell_status`."""
    if not run.repeat_dirs(experiment):
        return pd.DataFrame()
    runs = run.table(experiment, "runs", ok_only=ok_only)
    if runs.empty:
        return pd.DataFrame()
    samples = run.table(experiment, "samples", ok_only=ok_only)
    history = run.table(experiment, "locust_history", ok_only=ok_only)
    cells = run.cells(experiment)
    rows = []
    for _, r in _used(runs).iterrows():
        key = (r["repeat"], r["variant"], r["attempt"])
        s, h = (_pick(df, key) for df in (samples, history))
        timeout = float(r.get("request_timeout_s", 60.0))
        hold = s
        if len(s) and not math.isnan(float(r.get("hold_start_s", float("nan")))):
            end = s["start_s"] + s["latency_s"]
            hold = s[(end >= r["hold_start_s"]) & (end < r["hold_end_s"])]
        lat = stats.censored_latency_summary(hold.loc[hold["ok"], "latency_s"].to_numpy(),
                                             int((~hold["ok"]).sum()), timeout_s=timeout)
        p95, p99 = stats.percentiles(
            np.concatenate([hold.loc[hold["ok"], "latency_s"].to_numpy(),
                            np.full(int((~hold["ok"]).sum()), timeout)]) * 1000.0, [95, 99])
        wall = float(r.get("hold_wall_s", float("nan")))
        x = float(r.get("hold_ok", 0)) / wall if wall > 0 else float("nan")
        think = float(r.get("think_mean_s", float("nan")))
        mean_lat = float(r.get("unloaded_latency_s", float("nan")))
        if math.isnan(mean_lat):  # runs before the warm-up recorded it: the first requests
            first = s[s["ok"]].nsmallest(UNLOADED_REQUESTS, "start_s") if len(s) else s
            mean_lat = float(first["latency_s"].median()) if len(first) else float("nan")
        agg = h[h["name"] == "Aggregated"] if len(h) else h
        c = cells[(cells["repeat"] == key[0]) & (cells["variant"] == key[1])] if len(cells) else cells
        tokens = float(r.get("hold_total_tokens", float("nan")))
        cpu = hold_cpu(r, wall)
        row = {
            "repeat": key[0], "variant": key[1], "attempt": key[2], "kind": r.get("kind", key[1]),
            "rtt_ms": r.get("rtt_ms"), "path": r.get("path"), "ping_median_ms": r.get("ping_median_ms"),
            "hold_token_s_per_request": (float(r.get("hold_busy_tokens_mean", float("nan"))) / x
                                         if x and x > 0 else float("nan")),
            "unloaded_latency_ms": mean_lat * 1000.0,
            "cell_status": c["status"].iloc[0] if len(c) else "ok",
            "locust_workers": r.get("locust_workers", 0), "users": r.get("users"), "cores": r.get("cores"),
            "max_rps": x,
            "locust_peak_rps": float(agg["requests_s"].max()) if len(agg) else float("nan"),
            "median_ms": lat["p50_ms"], "p95_ms": float(p95), "p99_ms": float(p99),
            "censored": lat["censored"],
            "requests": int(len(s)), "failures": int((~s["ok"]).sum()) if len(s) else 0,
            "failure_rate": float((~s["ok"]).mean()) if len(s) else float("nan"),
            "infrastructure_failures": int(s["infrastructure"].sum()) if "infrastructure" in s else 0,
            "app_cpu_pct": _pct(cpu["server"], wall),
            "app_cpu_wait_pct": _pct(r.get("hold_server_wait_s"), wall),
            "db_cpu_pct": _pct(cpu["database"], wall),
            "db_cpu_wait_pct": _pct(r.get("hold_database_wait_s"), wall),
            "locust_cpu_pct": _pct(cpu["locust"], wall),
            "proxy_cpu_pct": _pct(cpu["proxy"], wall),
            "machine_cpu_pct": _pct(cpu["machine"], wall),
            "db_cpu_ms_per_request": (cpu["database"] * 1000.0 / r["hold_ok"]) if r.get("hold_ok") else float("nan"),
            "cpu_check": cpu["check"],
            "busy_tokens_frac": (float(r.get("hold_busy_tokens_mean", float("nan"))) / tokens
                                 if r.get("app_variant") == "sync" and tokens > 0 else float("nan")),
            "loop_lag_p50_ms": float(r.get("hold_loop_lag_p50_s", float("nan"))) * 1000.0,
            "in_flight_mean": r.get("hold_in_flight_mean"),
            "offered_load_ratio": x / (float(r["users"]) / (think + mean_lat))
            if think + mean_lat > 0 else float("nan"),
            "generator_saturated": bool(r.get("generator_saturated", False)),
        }
        row["bottleneck"] = bottleneck(row)
        row["database_bound"] = row["bottleneck"] == "database_cpu"
        rows.append(row)
    return _order(pd.DataFrame(rows))


def seed_table(run: Run) -> pd.DataFrame:
    """The seed's table layout: metrics as rows, each variant once (median over ok repeats)."""
    t = summary_table(run)
    if t.empty:
        return t
    labels = {"max_rps": "Max RPS (hold mean, req/s)", "locust_peak_rps": "Locust peak RPS (10 s window)",
              "median_ms": "Median latency (ms)", "p95_ms": "95th percentile (ms)",
              "failure_rate": "Failure rate", "db_cpu_ms_per_request": "Database CPU per request (ms)",
              "app_cpu_pct": "App CPU (% of a core)", "db_cpu_pct": "Database CPU (% of a core)",
              "machine_cpu_pct": "Machine CPU (% of a core)", "bottleneck": "Bottleneck (measured)",
              "repeat": "Repeats (ok)"}
    num = [c for c in labels if c not in ("bottleneck", "repeat")]
    g = t.groupby("variant", sort=False)
    out = g[num].median()
    out["bottleneck"] = g["bottleneck"].agg(lambda s: "/".join(sorted(set(s))))
    out["repeat"] = g["repeat"].nunique()
    out = out.reindex([v for v in VARIANT_ORDER if v in out.index])
    return out[list(labels)].T.rename(index=labels)


def staircase(run: Run, repeat: int | None = None) -> pd.DataFrame:
    """Locust's Aggregated history (one row a second) of the attempt used, every cell (ok or not):
    variant, t_s, user_count, locust_rps, locust_failures_s, locust_p50_ms, locust_p95_ms, cell_status."""
    hist = run.table(EXPERIMENT, "locust_history", ok_only=False)
    runs = run.table(EXPERIMENT, "runs", ok_only=False)
    if hist.empty or runs.empty:
        return pd.DataFrame()
    used = _used(runs)[["repeat", "variant", "attempt"]]
    repeat = int(used["repeat"].min()) if repeat is None else repeat
    h = hist.merge(used[used["repeat"] == repeat], on=["repeat", "variant", "attempt"])
    h = h[h["name"] == "Aggregated"].copy()
    h["t_s"] = h["timestamp"] - h.groupby("variant")["timestamp"].transform("min")
    cells = run.cells(EXPERIMENT)
    status = {v: s for v, s in zip(cells.loc[cells["repeat"] == repeat, "variant"],
                                   cells.loc[cells["repeat"] == repeat, "status"])}
    h["cell_status"] = h["variant"].map(lambda v: status.get(v, "ok"))
    return _order(h[["variant", "t_s", "user_count", "requests_s", "failures_s", "p50", "p95", "cell_status"]]
                  .rename(columns={"requests_s": "locust_rps", "failures_s": "locust_failures_s",
                                   "p50": "locust_p50_ms", "p95": "locust_p95_ms"}))


def openloop_table(run: Run, experiment: str = EXPERIMENT) -> pd.DataFrame:
    """Per variant and rate: corrected latency (from intended send time, unsent requests censored at
    the window's end) vs naive, send lag and validity (`harness.core.openloop.assess`); ok cells only.
    `failure_rate` = failed / sent; above 1% the rate is not a clean figure (`clean` False)."""
    from ...core import openloop

    if not run.repeat_dirs(experiment):
        return pd.DataFrame()
    ol = run.table(experiment, "openloop")
    if ol.empty:
        return pd.DataFrame()
    runs = run.table(experiment, "openloop_runs")
    rows = []
    for (rep, variant, rate), g in ol.groupby(["repeat", "variant", "rate"], sort=True):
        info = runs[(runs["repeat"] == rep) & (runs["variant"] == variant) & (runs["rate"] == rate)]
        wall = float(info["wall_s"].iloc[0]) if len(info) else float("nan")
        a = openloop.assess(g, rate, wall)
        failure_rate = a["failed"] / a["sent"] if a["sent"] else float("nan")
        rows.append({"repeat": rep, "variant": variant, "rate": rate,
                     "rate_fraction": float(g["rate_fraction"].iloc[0]), **a,
                     "failure_rate": failure_rate,
                     "clean": not a["invalid"] and failure_rate <= OPENLOOP_FAILURES})
    return _order(pd.DataFrame(rows))


OPENLOOP_FAILURES = 0.01   # a rate with more failed requests than this is kept raw, never a figure


def _load_name(fraction: float) -> str:
    """`load90` for 0.9 of the reference's capacity: the variant prefix of fastapi_openloop's figures."""
    return f"load{round(100 * fraction)}"


# A clean rate's latency figures: the openloop_table column each is read from, and its name.
OPENLOOP_LATENCY_FIGURES = (("corrected_p50_ms", "p50_ms"), ("corrected_p95_ms", "p95_ms"),
                            ("corrected_p99_ms", "p99_ms"))


def openloop_rates(t: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """The measured rates of fastapi_openloop's `openloop_table` (the probe's rows left out), each
    with its figures' variant prefix `load<pct>.<variant>`."""
    if t.empty:
        return []
    return [(f"{_load_name(r['rate_fraction'])}.{r['variant']}", r)
            for _, r in t[~t["variant"].str.contains("[", regex=False)].iterrows()]


def openloop_figure_names(run: Run) -> list[str]:
    """Every `fastapi_openloop` figure name `metrics` gives for a clean rate, for every rate of `run`,
    clean or not: what the analysis computes, whatever one window's send lag was."""
    return sorted({metric_name(OPENLOOP, v, name) for v, _ in openloop_rates(openloop_table(run, OPENLOOP))
                   for name in [n for _, n in OPENLOOP_LATENCY_FIGURES] + ["achieved_rps"]})


# The figures of a Locust ramp's summary table (fastapi_locust and fastapi_crossover), per variant
SUMMARY_METRICS = (Metric("max_rps", "req/s", "higher"), Metric("locust_peak_rps", "req/s", "higher"),
                   Metric("median_ms", "ms", "lower"), Metric("p95_ms", "ms", "lower"), Metric("p99_ms", "ms", "lower"),
                   Metric("failure_rate", "ratio", "lower"), Metric("db_cpu_pct", "% of a core", ""),
                   Metric("db_cpu_ms_per_request", "ms", "lower"), Metric("app_cpu_pct", "% of a core", ""),
                   Metric("app_cpu_wait_pct", "% of a core", ""), Metric("db_cpu_wait_pct", "% of a core", ""),
                   Metric("locust_cpu_pct", "% of a core", ""), Metric("machine_cpu_pct", "% of a core", ""),
                   Metric("proxy_cpu_pct", "% of a core", ""), Metric("busy_tokens_frac", "ratio", ""),
                   Metric("loop_lag_p50_ms", "ms", "lower"), Metric("offered_load_ratio", "ratio", ""),
                   Metric("database_bound", "bool", ""), CPU_REJECTED_METRIC)


def put_summary_rows(rows: MetricRows, t: pd.DataFrame) -> None:
    """SUMMARY_METRICS of each row of `t` (summary_table), with the row's bottleneck."""
    put_cpu_rejected(rows, t)
    for _, r in t.iterrows():
        for m in SUMMARY_METRICS:
            if m.name in ("database_bound", CPU_REJECTED_METRIC.name):
                continue
            rows.put(r["variant"], m.name, r["repeat"], r[m.name], r["bottleneck"])
        rows.put(r["variant"], "database_bound", r["repeat"], int(r["database_bound"]), r["bottleneck"])


def crossover(run: Run) -> dict[str, Any]:
    """fastapi_crossover: per point (path, rtt) and variant, the median over ok repeats of max_rps,
    p95_ms and the token-seconds a sync request held (Little's law on the limiter); the measured
    round trip above which async beats sync_40threads; and the queueing model's prediction.

    Model: a sync app with T threads serves at most T / (s + rtt) requests/s, where s is the
    unloaded latency (R0, sequential warm-up requests) at the smallest round trip minus the measured
    round trip (token-seconds under load include queueing for the database, so they cannot); async is
    not limited by threads, so it serves what sync_40threads can at rtt 0 or what Locust offers,
    users / mean think time, whichever is lower. Predicted crossover: the rtt where
    40 / (s + rtt) falls below that."""
    t = summary_table(run, experiment=CROSSOVER)
    if t.empty:
        return {"table": t}
    t["rtt_ms"] = t["rtt_ms"].astype(float)
    points = (t.groupby(["path", "rtt_ms", "kind"], as_index=False)
              .agg(max_rps=("max_rps", "median"), p95_ms=("p95_ms", "median"),
                   ping_median_ms=("ping_median_ms", "median"), repeats=("repeat", "nunique"),
                   token_s=("hold_token_s_per_request", "median"),
                   unloaded_ms=("unloaded_latency_ms", "median"),
                   bottleneck=("bottleneck", lambda s: "/".join(sorted(set(s))))))
    proxy = points[points["path"] == "proxy"].pivot(index="rtt_ms", columns="kind", values="max_rps")
    measured = None
    if {"async", "sync_40threads"} <= set(proxy.columns):
        # the smallest round trip from which async stays above at every larger one measured
        for rtt in sorted(proxy.index, reverse=True):
            if not proxy.loc[rtt, "async"] > proxy.loc[rtt, "sync_40threads"]:
                break
            measured = float(rtt)
    runs = run.table(CROSSOVER, "runs")
    users = float(runs["users"].iloc[0]) if len(runs) else float("nan")
    think = float(runs["think_mean_s"].iloc[0]) if len(runs) else float("nan")
    s40 = points[(points["path"] == "proxy") & (points["kind"] == "sync_40threads")].sort_values("rtt_ms")
    model: dict[str, Any] = {"threads": 40, "offered_rps": users / think if think else float("nan")}
    if len(s40):
        first = s40.iloc[0]
        # service time: latency at low load (R0) minus the measured round trip
        service_s = max(0.0, (float(first["unloaded_ms"]) - float(first["ping_median_ms"])) / 1000.0)
        cap = min(float(first["max_rps"]), model["offered_rps"])
        model.update(service_ms=service_s * 1000.0, async_capacity_rps=cap,
                     predicted_crossover_ms=max(0.0, (40.0 / cap - service_s) * 1000.0) if cap > 0 else None)
        model["predicted_sync40_rps"] = {float(r): min(cap, 40.0 / (service_s + r / 1000.0))
                                         for r in sorted(points["rtt_ms"].unique()) if service_s + r > 0}
    return {"table": points, "measured_crossover_ms": measured,
            "measured_statement": (f"async beats sync_40threads from {measured:g} ms of added round trip "
                                   "on (at every larger round trip measured)"
                                   if measured is not None else
                                   "async never beats sync_40threads in the range measured"),
            "model": model}
