"""Threads against asyncio on the same indexed find_one workload (seed 001, section 5).

- `threads`: a synchronous `MongoClient` with `maxPoolSize` equal to the thread count, for each
  count in `thread_counts` (the seed: 32 and 100);
- `async`: `AsyncMongoClient` (or Motor: `drivers`) with `tasks` tasks on a `pool_size` pool,
  bare and behind a FIFO semaphore (`semaphores`), on every loop in `loops` (uvloop: beyond the seed).
Each variant: `warmup_s` of the workload, then `duration_s` measured; every worker draws customers
from its own seeded RNG. Client CPU is the process's CPU over the measured window (`windows.cpu_s`,
user + system, `time.process_time()`), so CPU per query is `cpu_s / ops`.

Variant ids: `threads[workers=32,pool=32]`, `async[workers=200,pool=10,semaphore=off,loop=asyncio,driver=pymongo]`.
Tables:
- `samples`: variant, mode, loop ("threads" for threads), driver ("pymongo-sync" for threads),
  pool_size, workers, semaphore, task, start_s, latency_s, ok, error.
- `windows`: variant, wall_s, cpu_s, cpu_user_s, cpu_system_s, ops, mode, loop, driver, pool_size,
  workers, semaphore, duration_s.
Notes: `ferretdb_backend_index`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import datasets
from ..mongo_workload import (DOCUMENTS, DRIVERS, LOOPS, async_variant, ferretdb_backend_index, grid,
                              threads_variant)
from .base import Experiment, Params, variant_id


@dataclass(frozen=True)
class ModelsParams(Params):
    documents: int = DOCUMENTS["full"]
    duration_s: float = 4.0
    thread_counts: tuple[int, ...] = (32, 100)
    tasks: int = 200
    pool_size: int = 10
    semaphores: tuple[bool, ...] = (False, True)
    loops: tuple[str, ...] = LOOPS
    drivers: tuple[str, ...] = DRIVERS
    seed: int = 1
    backend_index: bool = True
    timeout_s: float = 300.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "duration_s", "thread_counts", "tasks", "pool_size")
        self.require_choice("loops", LOOPS)
        self.require_choice("drivers", DRIVERS)


class ThreadsVsAsyncio(Experiment):
    name = "mongo_models"
    title = "Threads with MongoClient against asyncio with AsyncMongoClient: throughput and CPU per query"
    needs = ("mongodb",)
    params_type = ModelsParams
    profiles = {"full": {},
                "quick": {"documents": DOCUMENTS["quick"], "duration_s": 2.0, "warmup_s": 0.5},
                "smoke": {"documents": DOCUMENTS["smoke"], "duration_s": 0.3, "warmup_s": 0.1,
                          "thread_counts": (4,), "tasks": 20, "pool_size": 4, "drivers": ("pymongo",),
                          "loops": ("asyncio",)}}

    def datasets(self, p: ModelsParams) -> list:
        return [datasets.Orders(p.documents)]

    def run(self, ctx) -> None:
        p: ModelsParams = ctx.params
        with ferretdb_backend_index(ctx, p.backend_index):
            for n in p.thread_counts:
                threads_variant(ctx, variant_id("threads", workers=n, pool=n), threads=n, pool_size=n,
                                duration_s=p.duration_s, warmup_s=p.warmup_s, seed=p.seed, mode="threads")
            for loop, driver in grid(p.loops, p.drivers):
                for sem in p.semaphores:
                    variant = variant_id("async", workers=p.tasks, pool=p.pool_size, semaphore=sem, loop=loop,
                                         driver=driver)
                    async_variant(ctx, variant, loop=loop, driver=driver, pool_size=p.pool_size, tasks=p.tasks,
                                  semaphore=sem, duration_s=p.duration_s, warmup_s=p.warmup_s, seed=p.seed,
                                  mode="async")


EXPERIMENT = ThreadsVsAsyncio()
