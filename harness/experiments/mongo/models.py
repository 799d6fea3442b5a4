"""Threads against asyncio on the same indexed find_one workload (seed 001, section 5).

- `threads`: a synchronous `MongoClient` with `maxPoolSize` equal to the thread count, for each
  count in `thread_counts` (the seed: 32 and 100);
- `async`: `AsyncMongoClient` (or Motor: `drivers`) with `tasks` tasks on a `pool_size` pool,
  bare and behind a FIFO semaphore (`semaphores`), on every loop in `loops` (uvloop: beyond the seed);
- the pool sweep: the seed's async setup (asyncio, AsyncMongoClient, no semaphore) at every
  `maxPoolSize` in `pool_sweep`, to test the seed's "throughput was highest with the smallest pool
  tested". On FerretDB every client connection's query runs on one of FerretDB's own PostgreSQL
  connections, whose pool caps the concurrency a larger client pool can reach: its configured size
  (read from the running FerretDB's flags) is in the `server_pool` table, and each window records
  the most connections FerretDB held to PostgreSQL during it (`ferretdb_pg_conns_max`, polled
  every 50 ms; NaN when the backend is not reachable from here).
Each variant: `warmup_s` of the workload, then `duration_s` measured; every worker draws customers
from its own seeded RNG. Client CPU is the process's CPU over the measured window (`windows.cpu_s`,
user + system, `time.process_time()`), so CPU per query is `cpu_s / ops`.

Variant ids: `threads[workers=32,pool=32]`, `async[workers=200,pool=10,semaphore=off,loop=asyncio,driver=pymongo]`
(the sweep's variants are `async[...]` ids too, one per pool size), run in `ctx.order()`.
Tables: schemas in `tables` below. Notes: `ferretdb_backend_index`, `ferretdb_pg_pool`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core import datasets
from ...core.servers import database_pids
from ..analysis import CPU_REJECTED_METRIC, put_cpu_rejected
from ..base import Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import SEED_SETUP, models_summary, setup_suffix
from .workload import (
    CLOSED_LOOP_SAMPLES,
    DOCUMENTS,
    DRIVERS,
    LOOPS,
    BackendConnections,
    DatabaseCPU,
    async_variant,
    ferretdb_backend_index,
    ferretdb_pg_pool,
    note_timeouts,
    threads_variant,
)


@dataclass(frozen=True)
class ModelsParams(Params):
    documents: int = DOCUMENTS["seed"]
    duration_s: float = 4.0
    thread_counts: tuple[int, ...] = (32, 100)
    tasks: int = 200
    pool_size: int = 10
    semaphores: tuple[bool, ...] = (False, True)
    pool_sweep: tuple[int, ...] = (5, 10, 20, 50, 100)   # maxPoolSize of the async sweep
    loops: tuple[str, ...] = LOOPS
    drivers: tuple[str, ...] = DRIVERS
    seed: int = 1
    backend_index: bool = True
    timeout_s: float = 300.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "duration_s", "thread_counts", "tasks", "pool_size", "pool_sweep")
        self.require_choice("loops", LOOPS)
        self.require_choice("drivers", DRIVERS)


class ThreadsVsAsyncio(Experiment):
    name = "mongo_models"
    title = "Threads with MongoClient against asyncio with AsyncMongoClient: throughput and CPU per query"
    needs = ("mongodb",)
    params_type = ModelsParams
    profiles = {"seed": {},
                "full": {"documents": DOCUMENTS["full"], "duration_s": 2.0, "warmup_s": 0.5,
                         "pool_sweep": (5, 20, 100)},
                "quick": {"documents": DOCUMENTS["quick"], "duration_s": 1.0, "warmup_s": 0.3,
                          "pool_sweep": (5, 20, 100)},
                "smoke": {"documents": DOCUMENTS["smoke"], "duration_s": 0.3, "warmup_s": 0.1,
                          "thread_counts": (4,), "tasks": 20, "pool_size": 4, "drivers": ("pymongo",),
                          "loops": ("asyncio",), "pool_sweep": (2, 8)}}
    repeats = {"smoke": 1, "quick": 1, "full": 9, "seed": 10}   # full: docs/POWER.md (001-models needs 9)
    analysis = "harness.experiments.mongo.analysis"
    family = "mongo"
    ceiling = "python_cpu"
    drivers = ("pymongo", "motor")
    notebook = "02_mongo_client_bulk_models.ipynb"
    headline = (Metric("throughput_qps", "queries/s", "higher"), Metric("cpu_us_per_query", "us", "lower"))
    tables = {"samples": {**CLOSED_LOOP_SAMPLES, "mode": "str"},
              "windows": window_columns(mode="str", loop="str", driver="str", pool_size="int", workers="int",
                                        semaphore="bool", duration_s="float", ferretdb_pg_conns_max="float",
                                        db_cpu_s="float", machine_busy_s="float", cores="int",
                                        db_ctx_voluntary="int", db_ctx_involuntary="int"),
              "server_pool": {"ferretdb": "bool", "pool_max_conns": "int", "source": "str"}}

    def datasets(self, p: ModelsParams) -> list:
        return [datasets.Orders(p.documents)]

    def plan(self, p: ModelsParams) -> list[dict]:
        """Every variant once (the sweep's point at `pool_size` is the bare async variant)."""
        threads = [{"mode": "threads", "variant": variant_id("threads", workers=n, pool=n), "workers": n,
                    "pool": n} for n in p.thread_counts]
        asyncs = [{**pt, "pool": p.pool_size} for pt in grid(loop=p.loops, driver=p.drivers, semaphore=p.semaphores)] \
            + grid(pool=p.pool_sweep, loop="asyncio", driver="pymongo", semaphore=False)
        for pt in asyncs:
            pt.update(mode="async", workers=p.tasks,
                      variant=variant_id("async", workers=p.tasks, pool=pt["pool"], semaphore=pt["semaphore"],
                                         loop=pt["loop"], driver=pt["driver"]))
        asyncs = list({pt["variant"]: pt for pt in asyncs}.values())
        return threads + asyncs

    metrics = (Metric("throughput_qps", "queries/s", "higher"), Metric("cpu_us_per_query", "us", "lower"),
               Metric("db_cpu_us_per_query", "us", "lower"), Metric("p50_ms", "ms", "lower"),
               *(Metric(n, "switches", "") for n in ("ctx_vol_per_query", "ctx_invol_per_query", "db_ctx_per_query")),
               Metric("p99_ms", "ms", "lower"), Metric("max_ms", "ms", "lower"),
               *(Metric(n, "% of a core", "") for n in ("client_cpu_pct", "client_cpu_wait_pct", "db_cpu_pct",
                                                       "machine_cpu_pct")),
               Metric("ferretdb_pg_conns_max", "count", ""), Metric("ferretdb_pg_pool", "count", ""),
               Metric("smallest_over_best_qps", "ratio", ""), Metric("best_pool", "connections", ""),
               CPU_REJECTED_METRIC)

    def compute_metrics(self, run, rows) -> None:
        params = run.experiments.get(self.name, {}).get("params", {})
        summary = models_summary(run)
        for _, r in summary.iterrows():
            if r["mode"] == "threads":
                names = [f"threads{r.workers}"]
            else:
                bare = f"async_{'semaphore' if r.semaphore else 'bare'}{setup_suffix(r.loop, r.driver)}"
                # the pool sweep (seed's setup, no semaphore): one name per maxPoolSize
                sweep = [f"async_pool{r.pool_size}"] if not r.semaphore and (r.loop, r.driver) == SEED_SETUP \
                    and r.pool_size in params.get("pool_sweep", ()) else []
                names = ([bare] if r.pool_size == params.get("pool_size", r.pool_size) else []) + sweep
            limit = r.get("bottleneck") if isinstance(r.get("bottleneck"), str) else ""
            for v in names:
                for q in ("throughput_qps", "cpu_us_per_query", "p50_ms", "p99_ms", "max_ms", "client_cpu_pct",
                          "client_cpu_wait_pct", "db_cpu_pct", "machine_cpu_pct", "db_cpu_us_per_query",
                          "ctx_vol_per_query", "ctx_invol_per_query", "db_ctx_per_query"):
                    if q in r:
                        rows.put(v, q, r["repeat"], r[q], limit)
        put_cpu_rejected(rows, summary)
        windows = run.table(self.name, "windows")
        if "ferretdb_pg_conns_max" in windows:
            for _, w in windows[~windows.semaphore.astype(bool) & (windows["mode"] == "async")].iterrows():
                if w.pool_size in params.get("pool_sweep", ()) and (w.loop, w.driver) == SEED_SETUP:
                    rows.put(f"async_pool{w.pool_size}", "ferretdb_pg_conns_max", w["repeat"], w.ferretdb_pg_conns_max)
        for _, r in run.table(self.name, "server_pool").iterrows():
            rows.put("pool_sweep", "ferretdb_pg_pool", r["repeat"], r.pool_max_conns)
        seed = summary[(summary["mode"] == "async") & ~summary.semaphore.astype(bool)
                       & (summary.loop == SEED_SETUP[0]) & (summary.driver == SEED_SETUP[1])
                       & summary.pool_size.isin(params.get("pool_sweep", ()))] if not summary.empty else summary
        for rep, g in seed.groupby("repeat") if len(seed) else ():
            if g.pool_size.nunique() < 2:
                continue
            best = g.loc[g.throughput_qps.idxmax()]
            smallest = g.loc[g.pool_size.idxmin()]
            # the seed: "throughput was highest with the smallest pool tested" <=> this ratio is 1
            rows.put("pool_sweep", "smallest_over_best_qps", rep, smallest.throughput_qps / best.throughput_qps)
            rows.put("pool_sweep", "best_pool", rep, best.pool_size)

    def run(self, ctx) -> None:
        p: ModelsParams = ctx.params
        pool = ferretdb_pg_pool(ctx.servers)
        dsn = pool.pop("_dsn", None)
        ctx.note("ferretdb_pg_pool", pool)
        note_timeouts(ctx)
        ctx.record("server_pool", [{"ferretdb": pool["ferretdb"], "pool_max_conns": pool["pool_max_conns"],
                                    "source": pool["source"]}])
        common: dict[str, Any] = dict(duration_s=p.duration_s, warmup_s=p.warmup_s, seed=p.seed,
                                      backend=BackendConnections(dsn), db=DatabaseCPU(database_pids(ctx.servers)))
        with ferretdb_backend_index(ctx, p.backend_index):
            for pt in ctx.order(self.plan(p)):
                if pt["mode"] == "threads":
                    threads_variant(ctx, pt["variant"], threads=pt["workers"], pool_size=pt["pool"],
                                    mode="threads", **common)
                else:
                    async_variant(ctx, pt["variant"], loop=pt["loop"], driver=pt["driver"], pool_size=pt["pool"],
                                  tasks=pt["workers"], semaphore=pt["semaphore"], mode="async", **common)


EXPERIMENT = ThreadsVsAsyncio()
