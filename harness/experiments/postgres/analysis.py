"""Seed 002 (threads vs asyncio against PostgreSQL): raw tables of a run -> the seed's table, the
limiting resource of each row, and named metrics for the claims ledger.

Every statistic comes from `harness.core.stats` (percentiles, fairness, CPU per operation, spread across
repeats). Inputs are the raw tables of `pg_models` and `pg_ceiling` (see their module docstrings).

Derived quantities (per variant and repeat; `models_table`, `ceiling_table`):
- rps: successful requests that ENDED in the measured window (`completed`, wherever they started:
  `measure.completions_in_window`, the definition every family shares) / window wall time
  (stats.throughput); `rps_definition` says which count a row used: runs recorded before
  `completed` existed fall back to `ops`, the requests that also started inside the window
  (`measure.window_completed`). `requests` is that old count, `completed` the new one.
- p50_ms, p99_ms, mean_ms: latency percentiles and mean of the window's successful requests. The
  samples are the requests that started and ended inside the window (no warm-up request), which
  keeps a request of latency L with probability (T - L) / T: each is weighted by T / (T - L)
  (`stats.window_latency_summary`), so long requests count as often as they occur (unweighted, an
  unfair pool's heavy tail leaves asyncpg's mean 6-11% and its p99 6-12% low, medians over repeats
  of a full run);
  mean_se_ms is the weighted mean's standard error; p99_p50_ratio = p99_ms / p50_ms.
- cpu_pct: client process CPU over the window / wall, in % of one core (100 = one core busy).
- cpu_wait_pct: how long the client's threads were runnable but waiting for a core over the
  window / wall, % of one core (`measure.thread_waits`; NaN for runs recorded before it existed).
  cpu_pct + cpu_wait_pct is the CPU the client wanted: on a shared machine it gets less.
- cpu_us_per_req: client CPU per successful request (the same count as rps), microseconds
  (stats.cpu_per_op_us).
- server_cpu_pct, server_cpu_us_per_req: the same for the PostgreSQL processes (NaN when the
  server was not a process on the measuring machine).
- ctx_vol_per_req, ctx_invol_per_req: the client process's context switches per successful request,
  voluntary (a thread gave up its core to wait) and involuntary (preempted); server_ctx_per_req: the
  PostgreSQL processes' switches of both kinds (NaN for runs recorded before they were read).
- machine_cpu_pct: busy CPU of every process on the machine over the window, % of one core
  (cores x 100 = all busy); other_cpu_pct = machine - client - server: load from anything else
  (other users of a shared machine, the harness itself).
- cpu_check: '' when the window's client + server <= machine <= cores x wall (within the
  tolerance of `measure.cpu_consistency`), else the broken inequality; such a window's CPU figures
  above are NaN (left out of every figure) and `<experiment>.all.cpu_windows_rejected` counts them
  per repeat. The rule is applied to the stored readings of every run, old ones included.
- db_time_ms: per-request database time, the median latency of the calibration requests (one
  client, one request at a time, nothing queues): the seed's "per-request database time".
- pool_bound_rps = pool / db_time: the throughput a pool of that size can carry (seed: "each
  connection can serve about 1/db_time requests per second"); pool_bound_frac = rps / pool_bound_rps.
- held_ms: the mean time a successful request held its connection under load, from the pool's
  hand-over to the release (latency - wait); held_over_db_time = held_ms / db_time_ms: how much
  longer than alone a request kept its connection (a client that answers late, a server running
  many queries at once, or both: the figure does not tell them apart).
- pool_busy_frac: the share of the pool's connection time in use over the window, pool_held_s /
  (pool x wall), from every request the child logged, each clipped to the window (NaN for runs
  recorded before the child measured it; `workload.held_in_window`). What "in use" includes
  differs by driver: a psycopg connection is idle from its return to the pool until the next
  waiting client picks it up; an asyncpg release finishes in a task of its own, so the next
  client already holds the connection when the releasing one reads its clock, and the hand-over
  counts as in use. With clients always waiting, asyncpg's figure is therefore 1.0. This is the
  client's view: a connection handed to a client that the loop has not yet run counts as in use.
  Which resource limits is read against capacity at the connection instead: pool_bound_frac, the
  share of the pool's connection time the server spent on requests (`limiting_resource`).
- pool_query_frac: the share of the pool's connection time in which a client was running its
  statements, pool_query_s / (pool x wall) (`workload.queried_in_window`: from the client's code
  resuming with the connection to the last statement's return, clipped to the window; NaN for runs
  recorded before it). The same for every driver: it leaves out the hand-over a client has not yet
  picked up and the release, so pool_busy_frac - pool_query_frac is the share of the pool's time
  the connections waited on the client between requests (an asyncpg connection given to a task
  the loop has not yet resumed). Below 1 whenever the connections sit idle or wait on the client.
- littles_law_ms = clients / rps * 1000: the mean latency Little's law predicts for a closed loop
  with no think time; littles_law_ratio = mean_ms / littles_law_ms (1 = consistent), checked in
  every window: littles_law_tolerance = LITTLE_BAND (0.03, what the window's edges and the time
  between a client's requests may leave) + LITTLE_Z (1.96) standard errors of the mean, relative
  (mean_se_ms / mean_ms: the window's sample count and spread); littles_law_outside is True when
  |ratio - 1| exceeds it, or the ratio is undefined (tests/test_littles_law.py).
- ops_per_client_min/max/median, jain: per-client completions in the window (stats.fairness_summary).
- limit, limit_reason: the seed's decision rule (`limiting_resource`); client_cores: the cores the
  client could run on (the split cells' half; NaN in runs that did not record it).

Metric names: `pg_models` and `pg_ceiling` declare and compute their figures in their own modules
(`metrics`, `compute_metrics`; contract C1 in harness.experiments.analysis; ok cells only;
`bottleneck` = the variant's limit in that repeat):
  pg_models.<regime>.pool<P>.<model>.<q>            per model, where
      <regime> = slow (a pg_sleep per request, the seed's 10 ms) | fast (none)
               | bound (the database time chosen by calibration so that the pool limits:
                 harness.experiments.postgres.models.pool_bound_regime)
               | split (the seed's 10 ms queries, the client on half the cores and the
                 servers on the other: the client-CPU ceiling regime);
      <P> = pool size; <model> in harness.experiments.postgres.workload.MODELS;
      <q> = rps (requests/s) | p50_ms | p99_ms | mean_ms (ms) | p99_p50_ratio (ratio)
            | cpu_pct | cpu_wait_pct | server_cpu_pct | machine_cpu_pct | other_cpu_pct
            (% of one core) | cpu_us_per_req (us)
            | server_cpu_us_per_req (us) | db_time_ms (ms) | pool_bound_rps (requests/s)
            | pool_bound_frac (ratio) | littles_law_ms (ms) | littles_law_ratio (ratio)
            | ops_per_client_min | ops_per_client_max (requests) | jain (0..1)
            | errors (count)
  pg_models.<regime>.pool<P>.rps_min | rps_max      over the seed's four models (requests/s)
  pg_models.<regime>.pool<P>.asyncio_rps_min | asyncio_rps_max
                                                    over asyncio_psycopg and asyncio_asyncpg
  pg_models.<regime>.pool<P>.pool_bound_rps         pool / median calibration latency of all
                                                    models of that regime and pool (requests/s)
  pg_models.<regime>.pool<P>.per_connection_rps     1 / that database time (requests/s)
  pg_models.bound.pool<P>.chosen_db_ms              the database time the calibration chose (ms),
  pg_models.bound.pool<P>.chosen_client_cores_needed | chosen_machine_cores_needed
                                                    the cores its bound needs (cores),
  pg_models.bound.pool<P>.cost_client_us            the client CPU per request it was chosen from:
                                                    the costliest bound model's in its seed cell (us)
  pg_models.<regime>.pool<P>.<q>_ratio.<a>_over_<b> <q> in rps, cpu_us_per_req, p99_ms; for every
                                                    pair of models a before b in MODELS order
                                                    (e.g. threads_psycopg_over_uvloop_asyncpg)
  pg_ceiling.<regime>.c<C>.<mode>.<q>               pgbench with C clients (= C connections),
      mode prepared | simple; <q> = rps (transactions/s in the window) | tps_reported (pgbench's
      own, whole run, transactions/s) | p50_ms | p99_ms | latency_avg_ms_reported (ms)
      | cpu_pct | cpu_wait_pct | server_cpu_pct | machine_cpu_pct (% of one core) | cpu_us_per_req
      | server_cpu_us_per_req (us)
  pg_ceiling.<regime>.c<C>.tps                      the best mode's rps at C clients
  pg_ceiling.<regime>.tps                           the same at the largest C of the run (the
                                                    seed's 200 clients in `full`)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...core import stats
from ...core.measure import window_completed
from ...core.store import Run
from ..analysis import BUSY, cores, demand_pct, fit_cpu
from .workload import MODELS

LITTLE_BAND = 0.03   # Little's law in one window: |ratio - 1| <= this + LITTLE_Z standard errors
LITTLE_Z = 1.96

ASYNCIO_DEFAULT_LOOP = ("asyncio_psycopg", "asyncio_asyncpg")
MODEL_LABELS = {
    "threads_psycopg": "threads + psycopg",
    "asyncio_psycopg": "asyncio + psycopg async",
    "asyncio_asyncpg": "asyncio + asyncpg",
    "uvloop_asyncpg": "uvloop + asyncpg",
    "uvloop_psycopg": "uvloop + psycopg async",
}


# The figures each bottleneck label reads (`limiting_resource`): a claim judged under a premise
# naming a label must not test one of them (the premise would select on the figure it gates).
LABEL_READS: dict[str, tuple[str, ...]] = {
    "pool": ("rps", "pool_bound_rps", "pool_bound_frac", "db_time_ms"),
    "client cpu": ("cpu_pct", "cpu_wait_pct", "cpu_us_per_req", "machine_cpu_pct"),
    "machine cpu": ("machine_cpu_pct", "cpu_pct", "server_cpu_pct", "other_cpu_pct"),
    "not identified": ("rps", "pool_bound_rps", "pool_bound_frac", "cpu_pct", "cpu_wait_pct", "machine_cpu_pct",
                       "server_cpu_pct", "pool_busy_frac", "pool_query_frac"),
}


def limiting_resource(model: str, rps: float, pool_bound_rps: float, cpu_pct: float,
                      server_cpu_pct: float, machine_cpu_pct: float, n_cores: int,
                      wait_pct: float = math.nan, pool_busy_frac: float = math.nan,
                      held_over_db_time: float = math.nan,
                      pool_query_frac: float = math.nan, client_cores: float = math.nan) -> tuple[str, str]:
    """The seed's decision rule, then one measured step of ours, in this order: (limit, reason).

    pool        throughput >= 90% of pool / db_time (the seed's rule)
    client CPU  an asyncio model's loop thread near 100% of a core, or the threads model near
                cores x 100% (a GIL build's threads can use more than one core while libpq waits),
                counting as busy the time its threads were runnable but waiting for a core
                (`wait_pct`; 0 when not measured): a loop thread that ran 65% and waited 35% of
                the window was never idle, it only shared its core with the server. The threads
                model's wait is summed over its 200 threads, so it can exceed any core count
                (338-1,579% in a full run); it counts only up to the cores the machine
                left idle (100 x cores - machine CPU): a thread that waits while a core is idle
                waits on the scheduler's wake-up, not for CPU the machine did not have.
                `client_cores` (the window's, when the client had fewer cores than the machine:
                pg_models' split cells, read back by the client under its affinity and CPU quota)
                replaces `n_cores` here (and caps the loop thread's core when it is a share of
                one), and the threads' wait is not
                counted: with the servers on other cores, capped at what the client left idle of
                its own, a wait summed over 200 threads would fill that idle whatever the load,
                so the threads must run at 90% of their cores
    machine CPU every core of the machine near 100% busy (client, server and anything else on a
                shared machine; client + server when the machine-wide figure is missing)
    otherwise   "not identified", with the figures that ruled the others out; where the client
                kept the connections >= 90% of the window (`pool_busy_frac`) while the throughput
                stayed below the pool bound at the unloaded database time (`rps / pool_bound`),
                the reason says so: each request held its connection longer than its database time
                alone, because its statements ran slower under load or the client was late between
                them (e.g. statements 95% of the window, the client's core 76% busy), and
                these figures do not tell which. That is no pool limit: with more clients than connections,
                and an asyncpg hand-over that counts as held, the client's view is near 100%
                whatever limits, so it names no resource.

    Each label reads only these figures (`LABEL_READS`), so a claim about another figure may use it
    as a premise; a claim about one of them may not (`claims` refuses such a ledger row).
    """
    frac = rps / pool_bound_rps if pool_bound_rps and pool_bound_rps > 0 else math.nan
    if frac >= BUSY:  # as every family's resources: saturated at BUSY (90%) of capacity
        return "pool", f"{frac:.0%} of the pool bound"
    own = client_cores if math.isfinite(client_cores) and 0 < client_cores < n_cores else math.nan
    if model.startswith("threads"):
        client_cap = 100.0 * (n_cores if math.isnan(own) else own)
    else:   # one loop thread: one core, or the share of one a CPU quota left the client
        client_cap = 100.0 * (1.0 if math.isnan(own) else min(1.0, own))
    if model.startswith("threads") and not math.isnan(own):
        wait_pct = math.nan   # summed over its threads it would fill any idle of the client's cores
    if model.startswith("threads") and not math.isnan(wait_pct) and not math.isnan(machine_cpu_pct):
        wait_pct = min(wait_pct, max(0.0, 100.0 * n_cores - machine_cpu_pct))
    if demand_pct(cpu_pct, wait_pct) >= BUSY * client_cap:
        if math.isnan(wait_pct):
            return "client CPU", f"client {cpu_pct:.0f}% of {client_cap:.0f}% available"
        waiting = "a core or its CPU quota" if client_cap < 100.0 else "a core"   # throttled time counts as waiting
        return "client CPU", (f"client {cpu_pct:.0f}% running + {wait_pct:.0f}% waiting for {waiting}, "
                              f"of {client_cap:.0f}% available")
    busy = machine_cpu_pct if not math.isnan(machine_cpu_pct) else cpu_pct + server_cpu_pct
    if not math.isnan(busy) and busy >= BUSY * 100.0 * n_cores:
        return "machine CPU", (f"machine {busy:.0f}% of {100 * n_cores}% ({n_cores} cores): client "
                               f"{cpu_pct:.0f}%, server {server_cpu_pct:.0f}%")
    server = "unknown" if math.isnan(server_cpu_pct) else f"{server_cpu_pct:.0f}%"
    if pool_busy_frac >= BUSY:
        running = ("" if math.isnan(pool_query_frac) else
                   f", running the client's statements {pool_query_frac:.0%}")
        return "not identified", (f"connections kept by the client {pool_busy_frac:.0%} of the window{running}, "
                                  f"throughput {frac:.0%} of the pool bound (each request held its connection "
                                  f"{held_over_db_time:.2f}x its database time alone): statements slower under "
                                  f"load or a client late between them, the figures do not tell which; client "
                                  f"{cpu_pct:.0f}%, server {server}, machine {busy:.0f}% of {100 * n_cores}%")
    busy_pool = "" if math.isnan(pool_busy_frac) else f", connections in use {pool_busy_frac:.0%}"
    return "not identified", (f"{frac:.0%} of pool bound{busy_pool}, client {cpu_pct:.0f}%, server {server}, "
                              f"machine {busy:.0f}% of {100 * n_cores}%")


def db_time_s(calibration: pd.DataFrame) -> float:
    return float(stats.percentiles(calibration["latency_s"].to_numpy(), [50.0])[0])


def _latency_fields(ok: pd.DataFrame, window_s: float) -> dict[str, float]:
    """Mean and percentiles of a window's samples, weighted against the edge selection. The weights
    undo one selection, requests that started and ended inside the window (`workload._package`,
    pg_ceiling's log): samples outside it are an error, never silently over-corrected."""
    start, lat = ok["start_s"].to_numpy(dtype=float), ok["latency_s"].to_numpy(dtype=float)
    if len(ok) and start.min() < 0:
        raise ValueError(f"a latency sample started {-start.min():g} s before its window opened: the edge "
                         "weights assume the window kept only the requests that started and ended inside it")
    s = stats.window_latency_summary(lat, window_s)
    return {"p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "mean_ms": s["mean_ms"], "mean_se_ms": s["mean_se_ms"],
            "p99_p50_ratio": s["p99_ms"] / s["p50_ms"] if s["p50_ms"] else math.nan}


def littles_law_check(mean_ms: float, mean_se_ms: float, littles_law_ms: float) -> dict[str, float | bool]:
    """One window's Little's law: ratio mean / prediction, its tolerance, and whether it lies outside."""
    ratio = mean_ms / littles_law_ms if littles_law_ms else math.nan
    tolerance = LITTLE_BAND + LITTLE_Z * mean_se_ms / mean_ms if mean_ms else math.nan
    return {"littles_law_ratio": ratio, "littles_law_tolerance": tolerance,
            "littles_law_outside": not abs(ratio - 1.0) <= tolerance}


def models_table(run: Run, experiment: str = "pg_models") -> pd.DataFrame:
    """One row per variant and repeat of `experiment` (pg_models, or verify_postgres, which records
    the same tables) with every derived quantity (see module doc)."""
    windows = run.table(experiment, "windows")
    if windows.empty:
        return pd.DataFrame()
    samples = run.table(experiment, "samples")
    calib = run.table(experiment, "calibration")
    n_cores = cores(run)
    rows = []
    for _, w in windows.iterrows():
        key = (samples["repeat"] == w["repeat"]) & (samples["variant"] == w["variant"])
        ok = samples[key & samples["ok"]]
        c = calib[(calib["repeat"] == w["repeat"]) & (calib["variant"] == w["variant"])]
        completed, rps_definition = window_completed(w)
        rps = stats.throughput(completed, float(w["wall_s"]))
        db_time = db_time_s(c) if len(c) else math.nan
        pool_bound = w["pool"] / db_time if db_time > 0 else math.nan
        cpu = window_cpu(w, completed, n_cores)
        cpu_pct, wait_pct = cpu["cpu_pct"], cpu["cpu_wait_pct"]
        server_pct, machine_pct = cpu["server_cpu_pct"], cpu["machine_cpu_pct"]
        fair = stats.fairness_summary(ok["task"].to_numpy(), int(w["clients"]))
        littles = w["clients"] / rps * 1000.0 if rps else math.nan
        lat = _latency_fields(ok, float(w["wall_s"]))
        held_ms = 1000.0 * float((ok["latency_s"] - ok["wait_s"]).mean()) if len(ok) else math.nan
        held_over_db = held_ms / (db_time * 1000.0) if db_time > 0 else math.nan
        pool_busy = w.get("pool_held_s", math.nan) / (w["pool"] * w["wall_s"])
        pool_query = w.get("pool_query_s", math.nan) / (w["pool"] * w["wall_s"])
        cores_read = w.get("client_cores")   # absent in runs before the split cells
        client_cores = float(cores_read) if cores_read is not None and pd.notna(cores_read) else math.nan
        limit, reason = limiting_resource(w["model"], rps, pool_bound, cpu_pct, server_pct,
                                          machine_pct, n_cores, wait_pct, pool_busy, held_over_db, pool_query,
                                          client_cores)
        rows.append({
            "repeat": w["repeat"], "variant": w["variant"], "model": w["model"],
            "regime": w["regime"], "slow_ms": w["slow_ms"], "pool": w["pool"], "clients": w["clients"],
            "client_cores": client_cores,
            "requests": int(w["ops"]), "completed": completed, "errors": int(w["errors"]),
            "wall_s": w["wall_s"], "rps": rps, "rps_definition": rps_definition,
            **lat,
            **cpu, "other_cpu_pct": machine_pct - cpu_pct - server_pct,
            "db_time_ms": db_time * 1000.0, "pool_bound_rps": pool_bound,
            "pool_bound_frac": rps / pool_bound if pool_bound else math.nan,
            "held_ms": held_ms, "held_over_db_time": held_over_db, "pool_busy_frac": pool_busy,
            "pool_query_frac": pool_query,
            "littles_law_ms": littles, **littles_law_check(lat["mean_ms"], lat["mean_se_ms"], littles),
            "ops_per_client_min": fair["ops_per_task_min"], "ops_per_client_max": fair["ops_per_task_max"],
            "ops_per_client_median": fair["ops_per_task_median"], "jain": fair["jain_index"],
            "limit": limit, "limit_reason": reason,
        })
    return one_configuration(pd.DataFrame(rows))


def window_cpu(w: pd.Series, completed: int, n_cores: int) -> dict[str, Any]:
    """A window's CPU figures (client, its wait, server, machine: % of one core and us per request),
    all NaN when its readings do not fit the machine (`measure.cpu_consistency`, applied to every
    run's stored readings, those of runs recorded before the edge reader too), with `cpu_check`
    saying why ('' when they fit)."""
    wall = float(w["wall_s"])
    client, server = float(w["cpu_s"]), float(w["server_cpu_s"])
    machine = float(w.get("machine_busy_s", math.nan))
    client, server, machine, check = fit_cpu(client, server, machine, wall, n_cores)
    return {"cpu_pct": 100.0 * client / wall, "cpu_wait_pct": 100.0 * w.get("cpu_wait_s", math.nan) / wall,
            "cpu_us_per_req": stats.cpu_per_op_us(client, completed),
            "server_cpu_pct": 100.0 * server / wall,
            "server_cpu_us_per_req": stats.cpu_per_op_us(server, completed),
            "machine_cpu_pct": 100.0 * machine / wall, "cpu_check": check, **window_switches(w, completed)}


def window_switches(w: pd.Series, completed: int) -> dict[str, float]:
    """A window's context switches per request: the client's voluntary and involuntary, and the
    server's (PostgreSQL's processes, both kinds); NaN for runs recorded before they were read."""
    server = [w.get(f"server_ctx_{kind}", math.nan) for kind in ("voluntary", "involuntary")]
    return {"ctx_vol_per_req": stats.switches_per_op(w.get("ctx_voluntary"), completed),
            "ctx_invol_per_req": stats.switches_per_op(w.get("ctx_involuntary"), completed),
            "server_ctx_per_req": stats.switches_per_op(
                sum(server) if all(s == s and s >= 0 for s in server) else math.nan, completed)}


def _first(df: pd.DataFrame, col: str) -> float:
    return float(df[col].iloc[0]) if len(df) else math.nan


def ceiling_table(run: Run) -> pd.DataFrame:
    """One row per pgbench variant and repeat: window throughput, latency, CPU, pgbench's own tps."""
    windows = run.table("pg_ceiling", "windows")
    if windows.empty:
        return pd.DataFrame()
    samples = run.table("pg_ceiling", "samples")
    reported = run.table("pg_ceiling", "pgbench")
    n_cores = cores(run)
    rows = []
    for _, w in windows.iterrows():
        key = (samples["repeat"] == w["repeat"]) & (samples["variant"] == w["variant"])
        ok = samples[key & samples["ok"]]
        rep = reported[(reported["repeat"] == w["repeat"]) & (reported["variant"] == w["variant"])]
        completed, rps_definition = window_completed(w)
        rps = stats.throughput(completed, float(w["wall_s"]))
        rows.append({
            "repeat": w["repeat"], "variant": w["variant"], "mode": w["mode"], "regime": w["regime"],
            "slow_ms": w["slow_ms"], "clients": w["clients"], "pool_equivalent": w["pool"],
            "transactions": int(w["ops"]), "completed": completed, "rps": rps,
            "rps_definition": rps_definition, **_latency_fields(ok, float(w["wall_s"])),
            "tps_reported": _first(rep, "tps_reported"),
            "latency_avg_ms_reported": _first(rep, "latency_avg_ms_reported"),
            **window_cpu(w, completed, n_cores),
        })
    return pd.DataFrame(rows)


def failures(run: Run) -> pd.DataFrame:
    """Variants that failed, from both experiments (experiment, variant, error)."""
    parts = []
    for exp in ("pg_models", "pg_ceiling"):
        f = run.table(exp, "failures", ok_only=False)
        if not f.empty:
            parts.append(f.assign(experiment=exp)[["experiment", "repeat", "variant", "error"]])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["experiment", "repeat", "variant", "error"])


def completions(run: Run) -> pd.DataFrame:
    """Per-client completed requests in the window: variant, model, regime, pool, task, completed."""
    windows = run.table("pg_models", "windows")
    samples = run.table("pg_models", "samples")
    parts = []
    for _, w in windows.iterrows():
        ok = samples[(samples["repeat"] == w["repeat"]) & (samples["variant"] == w["variant"])
                     & samples["ok"]]
        counts = stats.completion_counts(ok["task"].to_numpy(), int(w["clients"]))
        parts.append(pd.DataFrame({"repeat": w["repeat"], "variant": w["variant"], "model": w["model"],
                                   "regime": w["regime"], "slow_ms": w["slow_ms"], "pool": w["pool"],
                                   "task": np.arange(len(counts)), "completed": counts}))
    return one_configuration(pd.concat(parts, ignore_index=True)) if parts else pd.DataFrame()


def _mean_over_repeats(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Numeric columns averaged over repeats (stats.spread's mean); text columns from repeat 0."""
    if table.empty or table["repeat"].nunique() == 1:
        return table.drop(columns=["repeat"]) if not table.empty else table
    numeric = [c for c in table.columns if c not in keys + ["repeat"]
               and pd.api.types.is_numeric_dtype(table[c])]
    rows = []
    for _key, g in table.groupby(keys, sort=False):
        first = g.iloc[0].to_dict()
        first.update({c: stats.spread(g[c].to_numpy())["mean"] for c in numeric})
        first["repeats"] = len(g)
        rows.append(first)
    return pd.DataFrame(rows).drop(columns=["repeat"])


def one_configuration(frame: pd.DataFrame) -> pd.DataFrame:
    """The calibrated regime chooses its database time per repeat: its rows keep that repeat's in
    `db_ms_chosen` and share one `slow_ms`, the median over repeats, so that each (regime, slow_ms,
    pool) is one configuration in every table and figure. Other regimes are unchanged."""
    if frame.empty or "regime" not in frame or not (frame["regime"] == "bound").any():
        return frame
    out = frame.copy()
    bound = out["regime"] == "bound"
    out["db_ms_chosen"] = out["slow_ms"].where(bound)
    out.loc[bound, "slow_ms"] = out[bound].groupby("pool")["slow_ms"].transform("median")
    return out


def config_label(regime: str, slow_ms: float, pool: int) -> str:
    if regime == "bound":
        return f"pool-bound by calibration ({slow_ms:g} ms queries), pool {pool}"
    if regime == "split":
        return f"{slow_ms:g} ms queries, pool {pool}, client on a core of its own (or a share of it)"
    if regime == "split_probe":
        return f"{slow_ms:g} ms queries, pool {pool}, client on a core of its own: the probe choosing its share"
    return f"{f'{slow_ms:g} ms queries' if regime == 'slow' else 'fast queries'}, pool {pool}"


def bound_regime(run: Run) -> pd.DataFrame:
    """The calibrated pool-bound regime's choice, one row per repeat and bound pool (pg_models'
    `bound_regime` table: the costliest model's CPU per request and the database time, window and
    cores it gave); empty for runs without one. A run whose regime was chosen from a pilot of one
    model in the fast regime stores `pilot_model` and `pilot_ok`: they read as `cost_model`, `cost_ok`."""
    if "pg_models" not in run.experiments:
        return pd.DataFrame()
    return run.table("pg_models", "bound_regime").rename(columns={"pilot_model": "cost_model", "pilot_ok": "cost_ok"})


def split_regime(run: Run) -> pd.DataFrame:
    """The split cells' client share, one row per repeat and split pool (pg_models' `split_regime`
    table: the probe's CPU per request and database time, and the share they gave); empty for runs
    before the probe (they gave the client its whole core)."""
    if "pg_models" not in run.experiments:
        return pd.DataFrame()
    return run.table("pg_models", "split_regime")


def seed_table(run: Run) -> pd.DataFrame:
    """The seed's grid: one row per configuration x quantity, one column per model (mean over
    repeats). Quantities: req/s, p50 ms, p99 ms, p99/p50, client CPU %, client waiting for a core %,
    client CPU us/req, server CPU %, pool bound req/s, connection held / database time alone,
    connections in use, Little's law ms, Jain index, limit."""
    t = _mean_over_repeats(models_table(run), ["variant"])
    if t.empty:
        return pd.DataFrame()
    quantities = [("rps", "req/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"),
                  ("p99_p50_ratio", "p99/p50"), ("cpu_pct", "client CPU %"),
                  ("cpu_wait_pct", "client waiting for a core %"),
                  ("cpu_us_per_req", "client CPU us/req"),
                  ("ctx_vol_per_req", "client voluntary switches/req"),
                  ("ctx_invol_per_req", "client involuntary switches/req"),
                  ("server_cpu_pct", "server CPU %"), ("server_ctx_per_req", "server switches/req"),
                  ("machine_cpu_pct", "machine CPU %"),
                  ("pool_bound_rps", "pool bound req/s"),
                  ("held_over_db_time", "connection held / database time alone"),
                  ("pool_busy_frac", "connections in use (share of the window)"),
                  ("pool_query_frac", "connections running statements (share of the window)"),
                  ("littles_law_ms", "Little's law ms"),
                  ("jain", "Jain index"), ("limit", "limit")]
    out = []
    for (regime, slow_ms, pool), g in t.groupby(["regime", "slow_ms", "pool"], sort=False):
        by_model = g.set_index("model")
        for col, unit in quantities:
            row: dict[str, str | float] = {"configuration": config_label(regime, slow_ms, pool), "quantity": unit}
            for m in MODELS:
                if m in by_model.index:
                    v = by_model.at[m, col]
                    row[MODEL_LABELS[m]] = v if isinstance(v, str) else round(float(v), 3 if col in (
                        "p99_p50_ratio", "jain", "held_over_db_time", "pool_busy_frac", "pool_query_frac",
                        "ctx_vol_per_req", "ctx_invol_per_req", "server_ctx_per_req") else 1)
            out.append(row)
    return pd.DataFrame(out).set_index(["configuration", "quantity"])


def model_label(model: str) -> str:
    return MODEL_LABELS.get(model, model)


__all__ = ["models_table", "ceiling_table", "bound_regime", "split_regime", "failures", "completions", "seed_table",
           "limiting_resource", "littles_law_check", "cores", "config_label", "model_label",
           "MODEL_LABELS"]
