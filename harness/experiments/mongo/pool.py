"""Pool fairness: 200 tasks on a 10-connection pool (seed 001, section 4).

`tasks` tasks each run `find_one({"customer": c})` (indexed field, random customer from a seeded
RNG) in a closed loop for `duration_s`, after `warmup_s` of the same workload, against:
- `bare`: `maxPoolSize=pool_size` and nothing else;
- `semaphore`: the same behind a FIFO `asyncio.Semaphore(pool_size)`;
- `large_pool`: `maxPoolSize=large_pool_size` (as many connections as tasks).
Each on every event loop in `loops` and driver in `drivers` (uvloop and Motor are beyond the seed),
each variant on a fresh loop with its own client. Every operation is recorded, so the median, the
tail and the per-task completion counts (the starvation) all come from the same raw data.

Variant ids: `bare[pool=10,loop=asyncio,driver=pymongo]`, `semaphore[...]`, `large_pool[pool=200,...]`,
run in `ctx.order()` (reversed on odd repeats).
Tables (schemas in `tables` below):
- `samples`: one row per find_one (start_s from the window's start);
- `windows`: one row per variant.
Notes: `ferretdb_backend_index` (see `harness.experiments.mongo.workload`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core import datasets
from ..analysis import CPU_REJECTED_METRIC, put_cpu_rejected
from ..base import Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import pool_summary, setup_suffix
from .workload import (
    CLOSED_LOOP_SAMPLES,
    DOCUMENTS,
    DRIVERS,
    LOOPS,
    async_variant,
    ferretdb_backend_index,
    note_timeouts,
)

MODES = ("bare", "semaphore", "large_pool")


@dataclass(frozen=True)
class PoolParams(Params):
    documents: int = DOCUMENTS["seed"]
    tasks: int = 200
    duration_s: float = 4.0
    pool_size: int = 10
    large_pool_size: int = 200
    modes: tuple[str, ...] = MODES
    loops: tuple[str, ...] = LOOPS
    drivers: tuple[str, ...] = DRIVERS
    seed: int = 1
    backend_index: bool = True      # FerretDB only: make the customer index usable (workload)
    timeout_s: float = 300.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "tasks", "duration_s", "pool_size", "large_pool_size")
        self.require_choice("modes", MODES)
        self.require_choice("loops", LOOPS)
        self.require_choice("drivers", DRIVERS)


class PoolFairness(Experiment):
    name = "mongo_pool"
    title = "200 tasks on a 10-connection pool: median, tail and per-task completions"
    needs = ("mongodb",)
    params_type = PoolParams
    profiles = {"seed": {},
                "full": {"documents": DOCUMENTS["full"], "duration_s": 2.0, "warmup_s": 0.5},
                # quick: PyMongo only (Motor is beyond the seed); the window stays 2 s, because
                # the starved task's wait, the headline, grows with the window
                "quick": {"documents": DOCUMENTS["quick"], "duration_s": 2.0, "warmup_s": 0.5,
                          "drivers": ("pymongo",)},
                "smoke": {"documents": DOCUMENTS["smoke"], "tasks": 20, "pool_size": 4, "large_pool_size": 20,
                          "duration_s": 0.3, "warmup_s": 0.1, "drivers": ("pymongo",)}}

    repeats = {"smoke": 1, "quick": 1, "full": 6, "seed": 10}   # full: docs/POWER.md (001-pool needs 4)
    analysis = "harness.experiments.mongo.analysis"
    family = "mongo"
    ceiling = "python_cpu"
    drivers = ("pymongo", "motor")
    notebook = "01_mongo_cursor_pool.ipynb"
    headline = (Metric("max_ms", "ms", "lower"), Metric("p50_ms", "ms", "lower"),
                Metric("throughput_qps", "queries/s", "higher"), Metric("jain_index", "ratio", "higher"))
    tables = {"samples": {**CLOSED_LOOP_SAMPLES, "mode": "str"},
              "windows": window_columns(mode="str", loop="str", driver="str", pool_size="int", workers="int",
                                        semaphore="bool", duration_s="float")}

    def datasets(self, p: PoolParams) -> list:
        return [datasets.Orders(p.documents)]

    metrics = (Metric("throughput_qps", "queries/s", "higher"), Metric("p50_ms", "ms", "lower"),
               Metric("p99_ms", "ms", "lower"), Metric("p99_9_ms", "ms", "lower"), Metric("max_ms", "ms", "lower"),
               Metric("ops_per_task_min", "count", ""), Metric("ops_per_task_max", "count", ""),
               Metric("jain_index", "ratio", "higher"), Metric("errors", "count", "lower"),
               Metric("max_over_window", "ratio", "lower"), CPU_REJECTED_METRIC)

    def compute_metrics(self, run, rows) -> None:
        params = run.experiments.get(self.name, {}).get("params", {})
        summary = pool_summary(run)
        for _, r in summary.iterrows():
            v = f"{r['mode']}{setup_suffix(r.loop, r.driver)}"
            for q in ("throughput_qps", "p50_ms", "p99_ms", "max_ms", "ops_per_task_min", "ops_per_task_max",
                      "jain_index", "errors"):
                rows.put(v, q, r["repeat"], r[q])
            rows.put(v, "p99_9_ms", r["repeat"], r["p99.9_ms"])
            # the slowest query as a fraction of the measured window: 1 = it waited the whole run
            if params.get("duration_s"):
                rows.put(v, "max_over_window", r["repeat"], r["max_ms"] / (1000.0 * float(params["duration_s"])))
        put_cpu_rejected(rows, summary)

    def run(self, ctx) -> None:
        p: PoolParams = ctx.params
        note_timeouts(ctx)
        points = grid(loop=p.loops, driver=p.drivers, mode=p.modes)
        with ferretdb_backend_index(ctx, p.backend_index):
            for pt in ctx.order(points):
                pool = p.large_pool_size if pt["mode"] == "large_pool" else p.pool_size
                async_variant(ctx, variant_id(pt["mode"], pool=pool, loop=pt["loop"], driver=pt["driver"]),
                              loop=pt["loop"], driver=pt["driver"], pool_size=pool, tasks=p.tasks,
                              semaphore=pt["mode"] == "semaphore", duration_s=p.duration_s,
                              warmup_s=p.warmup_s, seed=p.seed, mode=pt["mode"])


EXPERIMENT = PoolFairness()
