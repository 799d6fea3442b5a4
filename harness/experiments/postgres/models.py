"""Seed 002: threads vs asyncio for a database-heavy request, five client models, two regimes.

Variants: every model of `harness.experiments.postgres.workload.MODELS` x `slow_ms` (10 = the seed's
slow queries, 0 = fast) x `pools` (connections), each named `<model>[slow_ms=<ms>,pool=<n>]`, each
measured in its own child interpreter (`python -m harness.experiments.postgres.workload`, started
through `harness.core.processes.run_child` with a hard timeout), so one model's threads, loop or GC
cannot disturb another's figures. The child runs
`clients` closed-loop clients over the seed's three-query request, excludes `warmup_s`, and
measures a `duration_s` window; this worker only records what the child returns.

Tables (one repeat):
- `samples`: variant, task (client id 0..clients-1), start_s (since the window opened), latency_s,
  ok, wait_s (waiting for a pooled connection), hold_s (connection held by the request), error,
  model, regime, slow_ms, pool. Only requests that started and finished inside the window.
- `windows`: variant, wall_s, cpu_s (the child's process CPU over the window, all threads),
  cpu_user_s, cpu_system_s, cpu_wait_s (the child's threads runnable but waiting for a core: the CPU
  it wanted and did not get), ops (successful requests that started and ended in the window),
  completed (successful requests that ended in the window: the throughput's count,
  `measure.completions_in_window`), errors, ops_all (requests
  completed over the whole child run, warm-up and drain included), pool_held_s (connection-seconds
  the clients held pooled connections inside the window, `workload.held_in_window`), server_cpu_s (CPU of the
  PostgreSQL postmaster and its descendants over the same window; NaN when the server is not a
  process on this machine, see `server_cpu_source`), machine_busy_s (busy CPU time of every
  process on the machine, all cores: shows other load on a shared machine),
  server_procs_open/close, model, regime,
  slow_ms, pool, clients, duration_s, warmup_s, rows, loop, driver, loop_impl,
  psycopg_autocommit, calibration_requests, gil_enabled, python, threads_in_process.
- `calibration`: variant, model, regime, slow_ms, pool, latency_s: requests issued one at a time
  by one client after the measured phase, on the warm pool (nothing queues); their median is the
  per-request database time from which `harness.experiments.postgres.analysis` derives the pool bound
  (pool / database time).
- `failures`: variant, model, slow_ms, pool, error, returncode, log_tail; a failed variant is
  recorded here and the others go on.
Artifacts: one `<model>_slow<ms>_pool<n>.log` per variant (the child's stdout/stderr).

The pool bound and the Little's-law check are computed from these raw tables in the analysis.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...core import datasets
from ...core.errors import HarnessError
from ...core.measure import find_postmaster
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, grid, variant_id, window_columns
from .workload import MODELS, VariantSpec, fmt_ms, run_in_child
from .workload import tables as pg_tables

CHILD_OVERHEAD_S = 60.0   # interpreter start, pool open, drain: added to each child's own time limit


@dataclass(frozen=True)
class PgModelsParams(Params):
    models: tuple[str, ...] = MODELS
    slow_ms: tuple[float, ...] = (10.0, 0.0)     # pg_sleep per request; 0 = the fast regime
    pools: tuple[int, ...] = (20, 50)            # connections in the pool
    clients: int = 200                           # concurrent closed-loop clients (threads or tasks)
    duration_s: float = 5.0                      # measured window per variant
    warmup_s: float = 1.0                        # clients run, nothing recorded
    rows: int = 100_000                          # size of the acct table
    calibration_requests: int = 50               # sequential single-client requests per variant
    psycopg_autocommit: bool = False             # the seed uses psycopg's default (transactions)
    seed: int = 20261130                         # per-client random ids: Random(f"{seed}:{task}")
    timeout_s: float = 900.0

    def validate(self) -> None:
        super().validate()
        self.require_choice("models", MODELS)
        self.require_positive("pools", "clients", "duration_s", "calibration_requests")
        self.require_non_negative("slow_ms")
        if self.rows < 2:
            raise HarnessError(f"parameter rows must be at least 2, got {self.rows}")
        if not self.models or not self.pools or not self.slow_ms:
            raise HarnessError("parameters models, pools and slow_ms must each name at least one value")

    def child_timeout_s(self, slow_ms: float) -> float:
        calibration = self.calibration_requests * (slow_ms / 1000.0 + 0.05)
        return self.warmup_s + self.duration_s + calibration + CHILD_OVERHEAD_S


def variant_name(model: str, slow_ms: float, pool: int) -> str:
    return variant_id(model, slow_ms=fmt_ms(slow_ms), pool=pool)


def artifact_stem(model: str, slow_ms: float, pool: int) -> str:
    return f"{model}_slow{fmt_ms(slow_ms)}_pool{pool}"


class PgModels(Experiment):
    name = "pg_models"
    title = "Threads vs asyncio against PostgreSQL: five client models, slow and fast queries, two pools"
    needs = ("postgres",)
    params_type = PgModelsParams
    profiles = {
        "seed": {},
        "full": {"duration_s": 2.0, "warmup_s": 0.5, "calibration_requests": 20},
        # quick: pool 20 only (the seed's first comparison), 1 s windows
        "quick": {"clients": 100, "pools": (20,), "duration_s": 1.0, "warmup_s": 0.3,
                  "calibration_requests": 20},
        "smoke": {"clients": 8, "pools": (4,), "duration_s": 0.4, "warmup_s": 0.2,
                  "calibration_requests": 3, "rows": 10_000, "timeout_s": 240.0},
    }
    repeats = {"smoke": 1, "quick": 1, "full": 10, "seed": 10}
    analysis = "harness.experiments.postgres.analysis"
    family = "postgres"
    ceiling = "pgbench"
    drivers = ("psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
    notebook = "03_postgres_models.ipynb"
    headline = (Metric("rps", "req/s", "higher"), Metric("p99_ms", "ms", "lower"),
                Metric("cpu_us_per_req", "us", "lower"))
    tables = pg_tables(window_columns, OTHER_COLUMNS)

    def datasets(self, p: PgModelsParams) -> list:
        return [datasets.Accounts(p.rows)]

    def run(self, ctx: Context) -> None:
        p: PgModelsParams = ctx.params
        dsn = ctx.servers.postgres_dsn
        pid, how = find_postmaster(dsn, ctx.servers.postgres.pids)
        ctx.note("server_cpu", {"postmaster_pid": pid, "found": how,
                                "measured": pid is not None,
                                "note": "server CPU = postmaster + descendants over each window; "
                                        "NaN when the server is not a process on this machine"})
        ctx.note("cpu_count", os.cpu_count())
        ctx.note("cpu_affinity", sorted(os.sched_getaffinity(0)))
        ctx.note("load_average_before", list(os.getloadavg()))
        failed = []
        for pt in ctx.order(grid(slow_ms=p.slow_ms, pool=p.pools, model=p.models)):
            slow, pool, model = pt["slow_ms"], pt["pool"], pt["model"]
            spec = VariantSpec(
                variant=variant_name(model, slow, pool), model=model, dsn=dsn, pool=pool,
                clients=p.clients, slow_ms=slow, warmup_s=p.warmup_s, duration_s=p.duration_s,
                rows=p.rows, seed=p.seed, calibration_requests=p.calibration_requests,
                postmaster_pid=pid, psycopg_autocommit=p.psycopg_autocommit)
            ctx.log.info("running %s", spec.variant)
            if not run_in_child(ctx, spec, p.child_timeout_s(slow), artifact_stem(model, slow, pool)):
                failed.append(spec.variant)
        ctx.note("load_average_after", list(os.getloadavg()))
        ctx.note("variants_failed", failed)
        total = len(p.slow_ms) * len(p.pools) * len(p.models)
        if len(failed) == total:
            raise HarnessError(f"all {total} variants failed; see the failures table and artifacts")


EXPERIMENT = PgModels()
