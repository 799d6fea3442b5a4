"""Seed 002: threads vs asyncio for a database-heavy request, five client models, two regimes.

Variants: every model of `harness.experiments.postgres.workload.MODELS` x `slow_ms` (10 = the seed's
slow queries, 0 = fast) x `pools` (connections), each named `<model>[slow_ms=<ms>,pool=<n>]`, each
measured in its own child interpreter (`python -m harness.experiments.postgres.workload`, started
through `harness.core.processes.run_child` with a hard timeout), so one model's threads, loop or GC
cannot disturb another's figures. The child runs
`clients` closed-loop clients over the seed's three-query request, excludes `warmup_s`, and
measures a `duration_s` window; this worker only records what the child returns.

The pool-bound regime, reached by calibration (`bound_pools`; regime `bound`): the seed's 10 ms
queries at pool 20 make the pool the limit only on a client that can serve its bound (about 1,800
req/s) with CPU to spare; on two cores shared with the server, no model can (it would take 0.8-2.4
cores of client CPU). So, in the run's first repeat and per bound pool, after the seed's cells,
each model of `bound_models` has its client and server CPU per request read from its own seed cell
(`<model>[slow_ms=10,pool=<n>]`: the seed's queries, the same pool); `pool_bound_regime` turns each
into the database time at which the pool's bound needs at most `bound_client_cores` of client CPU
and `bound_machine_share` of the machine (and a window of `bound_cycles` requests per client); the
costliest model's, the longest, is chosen (`bound_costs`), later repeats keep it, and every model
of `bound_models` runs at it, named `<model>[regime=bound,pool=<n>]`. The choice is the
`bound_regime` table; a regime out of reach skips its cells with the reason. The seed's literal
cells (10 ms, pool 20) stay, as the seed's parameters and whatever regime they give here.

The client-CPU ceiling regime, reached by placement and a probe (`split_pools`; regime `split`):
the seed's "threads hit the CPU ceiling" at 10 ms and pool 50 needs a client whose CPU is all busy
and nothing else at its limit. On two cores shared with the server no model gets there: in
fourteen runs threads + psycopg ran at 84-117% of a core with the machine at 156-171% of its 200%,
so no label applied and lesson 002-decide read `premise not met`. So, after the bound cells, the
seed's slowest cells at each split pool run again with the servers on one half of the cores and
the client on the other (`harness.core.placement.client_alone`), named
`<model>[regime=split,pool=<n>]`, over a `split_duration_s` window. A whole core can still be too
much: on a fast client threads + psycopg cost the client about what each request cost
the server, and the pool (its statements slower under the server's load) stopped the threads at 76%
of their core. So, in the run's first repeat and per split pool, a probe of `split_probe_model`
on the split placement (`<model>[regime=split_probe,pool=<n>]`, `split_probe_s`) reads the client's
and the server's CPU per request and the unloaded database time, and `split_client_share` turns
them into the client's share of its cores: the largest at which the probed model's ceiling stays
below the pool's bound over `split_pool_headroom` and needs at most `split_server_share` of the
servers' cores. A share below the client's cores is a CPU quota (`harness.core.cgroup.quota`, set
on this worker so the children inherit it); later repeats keep the choice. The windows record
`client_cores`, the capacity each child reads back under its affinity and quota, which the
analysis uses as the client's capacity. Servers that are not processes on this machine (Docker, a
URI elsewhere), a single core, or a quota that cannot be set here skip the cells with the reason,
before any is measured.

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
  psycopg_autocommit, calibration_requests, gil_enabled, python, threads_in_process,
  client_cores (the CPU the child may use, in cores, read back by the child: its affinity capped by
  its CPU quota; half the cores, or a share of them, in the split cells).
- `calibration`: variant, model, regime, slow_ms, pool, latency_s: requests issued one at a time
  by one client after the measured phase, on the warm pool (nothing queues); their median is the
  per-request database time from which `harness.experiments.postgres.analysis` derives the pool bound
  (pool / database time).
- `failures`: variant, model, slow_ms, pool, error, returncode, log_tail; a failed variant is
  recorded here and the others go on.
- `bound_regime`: per bound pool, the costliest model's readings (cost_model, cost_variant: the seed
  cell they come from; client_us, server_us: CPU per request) and what `pool_bound_regime` chose
  from them (db_ms, bound_rps, cycle_s, window_s, warmup_s, the cores the bound needs, which
  condition set it, reachable, reason); cost_ok is False when some model's cell gave no usable
  reading (cost_note says which), and a later repeat then chooses for itself. Every model's reading
  and the time it alone would need are the repeat's note `bound_costs_pool<n>`.
- `split_regime`: per split pool, the probe's readings (probe_model, probe_variant, probe_ok,
  probe_note; client_us, server_us: CPU per request; db_ms: its unloaded database time; the
  client's and the servers' cores) and what `split_client_share` chose from them (share_cores,
  quota, ceiling_rps, pool_bound_rps, by_pool_cores, by_server_cores, limited_by,
  server_cores_needed, reachable, reason, chosen_in_repeat).
Artifacts: one `<model>_slow<ms>_pool<n>.log` per variant (the child's stdout/stderr).

The pool bound and the Little's-law check are computed from these raw tables in the analysis.
"""

from __future__ import annotations

import math
import os
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from ...core import cgroup, datasets, placement, stats
from ...core.errors import HarnessError
from ...core.measure import find_postmaster
from ...core.tables import read_table
from ..analysis import CPU_REJECTED_METRIC, put_cpu_rejected
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import ASYNCIO_DEFAULT_LOOP, bound_regime, db_time_s, models_table, split_regime
from .workload import MODELS, SEED_MODELS, VariantSpec, fmt_ms, run_in_child
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
    # The pool-bound regime reached by calibration: a database time per request chosen
    # before its cells are measured, from every bound model's client and server CPU per request in
    # its seed cell (the slowest `slow_ms`, the same pool), so that the pool's bound needs at most
    # `bound_client_cores` of client CPU for the costliest model and at most `bound_machine_share`
    # of the machine in total. () = off.
    bound_pools: tuple[int, ...] = (20,)
    bound_models: tuple[str, ...] = SEED_MODELS
    bound_client_cores: float = 0.5
    bound_machine_share: float = 0.5
    bound_cycles: int = 20                       # the window holds at least this many requests per client
    bound_warmup_cycles: int = 3
    bound_step_ms: float = 5.0                   # the database time is rounded up to a multiple of it
    bound_max_window_s: float = 40.0             # longer than this: the regime is out of reach, said so
    # The client-CPU ceiling regime reached by placement (lesson 002-decide): the seed's
    # slowest cells at these pools again, the client on half the cores and the servers on the
    # other. () = off.
    split_pools: tuple[int, ...] = (50,)
    split_models: tuple[str, ...] = SEED_MODELS
    split_duration_s: float = 5.0                # measured window per split cell
    # The client's share of its core, chosen before the split cells by a probe (the run's first
    # repeat; later repeats keep it): `split_probe_model` on the split placement for
    # `split_probe_s` gives the client and server CPU per request, and `split_client_share` the
    # largest CPU share at which that model's ceiling stays below the pool's bound divided by
    # `split_pool_headroom` and needs at most `split_server_share` of the servers' cores. A fast
    # client with a whole core outruns the server's core or meets the pool first.
    split_probe_model: str = "threads_psycopg"
    split_probe_s: float = 2.0
    split_pool_headroom: float = 1.5
    split_server_share: float = 0.7
    split_min_cores: float = 0.2                 # a smaller share: the regime is out of reach, said so
    split_core_step: float = 0.05                # the share is rounded down to a multiple of it
    split_quota_period_ms: float = 10.0          # the kernel's quota period (short: smooth throttling)

    def validate(self) -> None:
        super().validate()
        self.require_choice("models", MODELS)
        self.require_positive("pools", "clients", "duration_s", "calibration_requests")
        self.require_non_negative("slow_ms")
        if self.rows < 2:
            raise HarnessError(f"parameter rows must be at least 2, got {self.rows}")
        if not self.models or not self.pools or not self.slow_ms:
            raise HarnessError("parameters models, pools and slow_ms must each name at least one value")
        self.require_choice("bound_models", MODELS)
        self.require_positive("bound_client_cores", "bound_machine_share", "bound_cycles",
                              "bound_step_ms", "bound_max_window_s")
        self.require_non_negative("bound_warmup_cycles")
        self.require_choice("split_models", MODELS)
        self.require_positive("split_duration_s", "split_probe_s", "split_pool_headroom", "split_server_share",
                              "split_min_cores", "split_core_step", "split_quota_period_ms")
        self.require_choice("split_probe_model", MODELS)
        for name in ("bound_pools", "split_pools"):
            if any(pool < 1 for pool in getattr(self, name)):
                raise HarnessError(f"parameter {name} must hold positive pool sizes, got {getattr(self, name)!r}")

    def child_timeout_s(self, slow_ms: float, warmup_s: float | None = None, duration_s: float | None = None) -> float:
        calibration = self.calibration_requests * (slow_ms / 1000.0 + 0.05)
        warmup = self.warmup_s if warmup_s is None else warmup_s
        duration = self.duration_s if duration_s is None else duration_s
        return warmup + duration + calibration + CHILD_OVERHEAD_S


def variant_name(model: str, slow_ms: float, pool: int) -> str:
    return variant_id(model, slow_ms=fmt_ms(slow_ms), pool=pool)


BOUND = "bound"   # the calibrated pool-bound regime's name in the tables and metric names


def bound_variant_name(model: str, pool: int) -> str:
    """A calibrated cell's name: the same in every repeat, whatever database time that repeat chose."""
    return variant_id(model, regime=BOUND, pool=pool)


SPLIT = "split"   # the client-CPU ceiling regime's name: the seed's slow cells, client and servers on their own cores
SPLIT_PROBE = "split_probe"   # the probe that chooses the split cells' client share (one per run and split pool)


def split_variant_name(model: str, pool: int) -> str:
    return variant_id(model, regime=SPLIT, pool=pool)


def split_probe_variant_name(model: str, pool: int) -> str:
    return variant_id(model, regime=SPLIT_PROBE, pool=pool)


def pool_bound_regime(client_us: float, server_us: float, cores: int, pool: int, clients: int,
                      client_cores: float = 0.5, machine_share: float = 0.5, cycles: int = 20,
                      warmup_cycles: int = 3, step_ms: float = 5.0, floor_ms: float = 10.0,
                      max_window_s: float = 40.0) -> dict:
    """The database time per request that makes `pool` connections the limit on this machine.

    A closed loop of `clients` > `pool` clients, each request holding a connection for about
    `db_ms`, cannot exceed the pool's bound, pool / db_ms. Reaching it costs the client `client_us`
    of CPU per request (read in its seed cell, `bound_costs`) and the server
    `server_us`: the bound is a regime this machine can hold only while rate x client_us stays
    within `client_cores` and rate x (client_us + server_us) within `machine_share` of its cores.
    So: rate = min(client_cores / client_us, machine_share x cores / (client_us + server_us)),
    db_ms = pool / rate, rounded up to `step_ms` and never below `floor_ms` (the seed's 10 ms: a
    machine fast enough for the seed's regime gets the seed's). Server CPU unknown (NaN: a server
    elsewhere) leaves only the client's condition. The window holds `cycles` requests per client
    (a client's cycle is clients / rate at the bound) and the warm-up `warmup_cycles`.

    Returns db_ms, bound_rps (pool / db_ms), cycle_s, window_s, warmup_s, client_cores_needed,
    machine_cores_needed, limited_by ('client CPU' or 'machine CPU': which condition set the rate),
    and `reachable` with `reason` ('' when reachable): unreachable when the inputs are unusable or
    the window would exceed `max_window_s`."""
    out: dict = {"db_ms": math.nan, "bound_rps": math.nan, "cycle_s": math.nan, "window_s": math.nan,
                 "warmup_s": math.nan, "client_cores_needed": math.nan, "machine_cores_needed": math.nan,
                 "limited_by": "", "reachable": False, "reason": ""}
    if not (math.isfinite(client_us) and client_us > 0) or clients <= pool:
        out["reason"] = ("no client CPU per request" if clients > pool
                         else f"{clients} clients do not outnumber {pool} connections: no queue to bind")
        return out
    by_client = client_cores * 1e6 / client_us
    by_machine = machine_share * cores * 1e6 / (client_us + server_us) if math.isfinite(server_us) else math.inf
    rate = min(by_client, by_machine)
    db_ms = max(floor_ms, math.ceil(pool * 1000.0 / rate / step_ms) * step_ms)
    bound = pool * 1000.0 / db_ms
    cycle = clients / bound
    out.update(db_ms=db_ms, bound_rps=bound, cycle_s=cycle, window_s=cycles * cycle, warmup_s=warmup_cycles * cycle,
               client_cores_needed=bound * client_us / 1e6,
               machine_cores_needed=bound * (client_us + (server_us if math.isfinite(server_us) else 0.0)) / 1e6,
               limited_by="client CPU" if by_client <= by_machine else "machine CPU")
    if out["window_s"] > max_window_s:
        out["reason"] = (f"a {db_ms:g} ms database time needs a {out['window_s']:.0f} s window for {cycles} requests "
                         f"per client, above bound_max_window_s={max_window_s:g}")
        return out
    out["reachable"] = True
    return out


REGIME_KEYS = ("db_ms", "bound_rps", "cycle_s", "window_s", "warmup_s", "client_cores_needed", "machine_cores_needed",
               "limited_by", "reachable", "reason")


def bound_costs(windows: pd.DataFrame, p: PgModelsParams, pool: int, cores: int) -> tuple[dict, dict]:
    """The pool-bound regime for `pool`, chosen from the seed cells already measured (`windows`, as
    recorded): each model of `bound_models` at the slowest `slow_ms` (the seed's 10 ms) and this
    pool, its client and server CPU per request (per request ended in the window, as
    `cpu_us_per_req`), each turned into a database time by `pool_bound_regime`; the longest, the
    costliest model's, is chosen, so the bound needs at most `bound_client_cores` of client CPU
    for every model. The seed cells are client-bound here, and a model's CPU per request there is
    15-40% below its cost at the bound (in one full run, asyncio + psycopg 808 us at 10 ms, 969 us at the
    bound); the costliest cell, threads + psycopg's, and the rounding up have kept every model
    within the half core in the committed runs (METHODS). The fast cells read 20-40% lower still, and
    twice as noisy; a pilot of one model there read 330, 704 and 978 us in three runs and chose
    15, 30 and 40 ms, the first too short for asyncio + psycopg to stay below its CPU.

    Returns (the `bound_regime` row, {model: its reading and the database time it alone needs}).
    Out of reach, with the reason, when the grid has no such cell for some bound model, or its
    cell failed or read CPU that does not fit the machine (`cpu_check`): then `cost_ok` is False
    and a later repeat chooses for itself."""
    floor_ms = max(p.slow_ms)
    row: dict = {"pool": pool, "cost_model": "", "cost_variant": "", "cost_ok": False, "cost_note": "",
                 "client_us": math.nan, "server_us": math.nan, "cores": cores, "clients": p.clients}
    per_model: dict = {}
    regimes: dict[str, dict] = {}
    missing: list[str] = []

    def regime_for(client_us: float, server_us: float) -> dict:
        return pool_bound_regime(client_us, server_us, cores, pool, p.clients,
                                 client_cores=p.bound_client_cores, machine_share=p.bound_machine_share,
                                 cycles=p.bound_cycles, warmup_cycles=p.bound_warmup_cycles,
                                 step_ms=p.bound_step_ms, floor_ms=floor_ms, max_window_s=p.bound_max_window_s)

    for model in p.bound_models:
        variant = variant_name(model, floor_ms, pool)
        cell = windows[windows["variant"] == variant] if len(windows) else windows
        if floor_ms <= 0 or not len(cell):
            missing.append(f"{variant} was not measured")
            continue
        w = cell.iloc[0]
        if str(w.get("cpu_check") or ""):
            missing.append(f"{variant}'s CPU readings do not fit the machine ({w['cpu_check']})")
            continue
        completed = int(w["completed"])
        client_us = stats.cpu_per_op_us(float(w["cpu_s"]), completed)
        server_us = stats.cpu_per_op_us(float(w["server_cpu_s"]), completed)
        regimes[model] = regime = regime_for(client_us, server_us)
        per_model[model] = {"variant": variant, "client_us": client_us, "server_us": server_us,
                            **{k: regime[k] for k in ("db_ms", "limited_by", "reachable", "reason")}}
    regime = regime_for(math.nan, math.nan)   # unreachable until read
    if missing:
        row["cost_note"] = "; ".join(missing)
        regime["reason"] = (f"no usable CPU per request for every bound model at {floor_ms:g} ms and pool {pool}: "
                            f"{row['cost_note']}")
    elif per_model:
        costliest = max(per_model, key=lambda m: (per_model[m]["db_ms"], per_model[m]["client_us"]))
        c = per_model[costliest]
        row.update(cost_model=costliest, cost_variant=c["variant"], cost_ok=True,
                   client_us=c["client_us"], server_us=c["server_us"])
        regime = regimes[costliest]
    return {**row, **{k: regime[k] for k in REGIME_KEYS}}, per_model


def split_client_share(client_us: float, server_us: float, db_ms: float, pool: int, client_cores: int,
                       server_cores: int, pool_headroom: float = 1.5, server_share: float = 0.7,
                       step: float = 0.05, min_cores: float = 0.2) -> dict:
    """The CPU share, in cores, that puts a model costing the client `client_us` per request at its
    CPU ceiling in the split cells, and nothing else at its limit.

    With `share` cores the model serves at most share / client_us requests a second. That ceiling
    must stay below the pool's bound (pool / `db_ms`, the probe's unloaded database time) divided by
    `pool_headroom`, and need at most `server_share` of the servers' cores (`server_us` per request):
    rate = min(pool bound / pool_headroom, server_share x server_cores / server_us), and share =
    rate x client_us, rounded down to `step`. A share at or above the client's own cores needs no
    quota: the client keeps its whole cores (a slow client, until its server's
    core is the co-limit). Server CPU unknown (NaN) leaves only the pool's condition.

    Returns share_cores, quota (True when below the client's cores), ceiling_rps (share /
    client_us), pool_bound_rps, by_pool_cores, by_server_cores, limited_by ('client cores',
    'pool' or 'server CPU': which condition set the share), server_cores_needed, reachable and
    reason ('' when reachable): out of reach when a reading is unusable or the share would be below
    `min_cores`."""
    out: dict = {"share_cores": math.nan, "quota": False, "ceiling_rps": math.nan, "pool_bound_rps": math.nan,
                 "by_pool_cores": math.nan, "by_server_cores": math.nan, "limited_by": "",
                 "server_cores_needed": math.nan, "reachable": False, "reason": ""}
    if not (math.isfinite(client_us) and client_us > 0 and math.isfinite(db_ms) and db_ms > 0):
        out["reason"] = "the probe gave no client CPU per request or no database time"
        return out
    bound = pool * 1000.0 / db_ms
    by_pool = bound / pool_headroom * client_us / 1e6
    by_server = (server_share * server_cores * 1e6 / server_us * client_us / 1e6
                 if math.isfinite(server_us) and server_us > 0 else math.inf)
    limits = {"client cores": float(client_cores), "pool": by_pool, "server CPU": by_server}
    limited_by = min(limits, key=lambda k: limits[k])
    share = limits[limited_by]
    if limited_by != "client cores":
        share = math.floor(share / step + 1e-9) * step
    ceiling = share * 1e6 / client_us
    out.update(share_cores=share, quota=limited_by != "client cores", ceiling_rps=ceiling, pool_bound_rps=bound,
               by_pool_cores=by_pool, by_server_cores=by_server, limited_by=limited_by,
               server_cores_needed=ceiling * server_us / 1e6 if math.isfinite(server_us) else math.nan)
    if share < min_cores:
        out["reason"] = (f"the client would get {share:.2f} of a core (set by the {limited_by}: {client_us:.0f} us "
                         f"of client CPU per request against {server_us:.0f} us of server), below "
                         f"split_min_cores={min_cores:g}")
        return out
    out["reachable"] = True
    return out


SPLIT_KEYS = ("share_cores", "quota", "ceiling_rps", "pool_bound_rps", "by_pool_cores", "by_server_cores",
              "limited_by", "server_cores_needed", "reachable", "reason")


def artifact_stem(model: str, slow_ms: float, pool: int) -> str:
    return f"{model}_slow{fmt_ms(slow_ms)}_pool{pool}"


# Each model's figures per repeat (variant `<regime>.pool<P>.<model>`): unit and better direction
MODEL_UNITS = {"rps": ("req/s", "higher"), "p50_ms": ("ms", "lower"), "p99_ms": ("ms", "lower"),
               "mean_ms": ("ms", "lower"), "p99_p50_ratio": ("ratio", "lower"), "cpu_pct": ("% of a core", "lower"),
               "cpu_wait_pct": ("% of a core", ""), "cpu_us_per_req": ("us", "lower"),
               "server_cpu_pct": ("% of a core", ""), "machine_cpu_pct": ("% of a core", ""),
               "other_cpu_pct": ("% of a core", ""), "server_cpu_us_per_req": ("us", "lower"),
               "ctx_vol_per_req": ("switches", ""), "ctx_invol_per_req": ("switches", ""),
               "server_ctx_per_req": ("switches", ""),
               "db_time_ms": ("ms", ""), "pool_bound_rps": ("req/s", ""), "pool_bound_frac": ("ratio", ""),
               "held_ms": ("ms", ""), "held_over_db_time": ("ratio", ""), "pool_busy_frac": ("ratio", ""),
               "pool_query_frac": ("ratio", ""), "littles_law_ms": ("ms", ""), "littles_law_ratio": ("ratio", ""),
               "ops_per_client_min": ("requests", "higher"), "ops_per_client_max": ("requests", ""),
               "jain": ("ratio", "higher"), "errors": ("count", "lower")}
MODEL_QUANTITIES = tuple(MODEL_UNITS)
RATIO_QUANTITIES = ("rps", "cpu_us_per_req", "p99_ms")   # each pair of models, a before b in MODELS
CHOSEN_UNITS = {"db_ms": "ms", "client_cores_needed": "cores", "machine_cores_needed": "cores",
                "share_cores": "cores", "ceiling_rps": "req/s", "server_cores_needed": "cores"}


class PgModels(Experiment):
    name = "pg_models"
    title = ("Threads vs asyncio against PostgreSQL: five client models, slow and fast queries, two pools, "
             "and the pool-bound regime reached by calibration")
    needs = ("postgres",)
    params_type = PgModelsParams
    profiles = {
        "seed": {},
        "full": {"duration_s": 2.0, "warmup_s": 0.5, "calibration_requests": 20, "split_duration_s": 4.0},
        # quick: pool 20 only (the seed's first comparison), 1 s windows
        "quick": {"clients": 100, "pools": (20,), "duration_s": 1.0, "warmup_s": 0.3,
                  "calibration_requests": 20, "split_pools": (20,), "split_duration_s": 1.0},
        "smoke": {"clients": 8, "pools": (4,), "duration_s": 0.4, "warmup_s": 0.2,
                  "calibration_requests": 3, "rows": 10_000, "timeout_s": 240.0,
                  "bound_pools": (4,),
                  "bound_cycles": 2, "bound_warmup_cycles": 1, "bound_max_window_s": 5.0,
                  # 8 clients on 4 connections would get a tenth of a core, and each child's start
                  # with it: the smoke test checks the quota's path, not the regime
                  "split_pools": (4,), "split_duration_s": 0.4, "split_probe_s": 0.4,
                  "split_pool_headroom": 0.25},
    }
    repeats = {"smoke": 1, "quick": 1, "full": 8, "seed": 10}   # full: docs/POWER.md (002-cpu, -tail need 6)
    analysis = "harness.experiments.postgres.analysis"
    family = "postgres"
    ceiling = "pgbench"
    drivers = ("psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
    notebook = "03_postgres_models.ipynb"
    headline = (Metric("rps", "req/s", "higher"), Metric("p99_ms", "ms", "lower"),
                Metric("cpu_us_per_req", "us", "lower"))
    tables = {**pg_tables(window_columns, OTHER_COLUMNS),
              # one row per repeat and bound pool: the costliest model's readings and the database time chosen
              "bound_regime": {"pool": "int", "cost_model": "str", "cost_variant": "str", "cost_ok": "bool",
                               "cost_note": "str", "client_us": "float", "server_us": "float", "cores": "int",
                               "clients": "int",
                               "db_ms": "float", "bound_rps": "float", "cycle_s": "float", "window_s": "float",
                               "warmup_s": "float", "client_cores_needed": "float",
                               "machine_cores_needed": "float", "limited_by": "str", "reachable": "bool",
                               "reason": "str", "chosen_in_repeat": "int"},
              # one row per repeat and split pool: the probe's readings and the client's CPU share chosen
              "split_regime": {"pool": "int", "probe_model": "str", "probe_variant": "str", "probe_ok": "bool",
                               "probe_note": "str", "client_us": "float", "server_us": "float", "db_ms": "float",
                               "client_cores": "int", "server_cores": "int", "share_cores": "float",
                               "quota": "bool", "ceiling_rps": "float", "pool_bound_rps": "float",
                               "by_pool_cores": "float", "by_server_cores": "float", "limited_by": "str",
                               "server_cores_needed": "float", "reachable": "bool", "reason": "str",
                               "chosen_in_repeat": "int"}}

    metrics = (*(Metric(name, unit, better) for name, (unit, better) in MODEL_UNITS.items()),
               *(Metric(f"{q}_ratio.{a}_over_{b}", "ratio", "") for q in RATIO_QUANTITIES
                 for a, b in combinations(MODELS, 2)),
               *(Metric(name, "req/s", "higher") for name in ("rps_min", "rps_max", "asyncio_rps_min",
                                                              "asyncio_rps_max")),
               Metric("per_connection_rps", "req/s", ""),
               *(Metric(f"chosen_{q}", unit, "") for q, unit in CHOSEN_UNITS.items()),
               *(Metric(name, "us", "") for name in ("cost_client_us", "probe_client_us", "probe_server_us")),
               CPU_REJECTED_METRIC)

    def compute_metrics(self, run, rows) -> None:
        t = models_table(run)
        if not t.empty:
            calib = run.table(self.name, "calibration")
            for _, r in t.iterrows():
                v = f"{r['regime']}.pool{int(r['pool'])}.{r['model']}"
                for q in MODEL_QUANTITIES:
                    rows.put(v, q, r["repeat"], r[q], r["limit"])
            put_cpu_rejected(rows, t)
            for (regime, pool, rep), g in t.groupby(["regime", "pool", "repeat"], sort=False):
                base = f"{regime}.pool{int(pool)}"
                by_model = g.set_index("model")
                seed = by_model.loc[[m for m in SEED_MODELS if m in by_model.index], "rps"]
                if len(seed):
                    rows.put(base, "rps_min", rep, seed.min())
                    rows.put(base, "rps_max", rep, seed.max())
                aio = by_model.loc[[m for m in ASYNCIO_DEFAULT_LOOP if m in by_model.index], "rps"]
                if len(aio):
                    rows.put(base, "asyncio_rps_min", rep, aio.min())
                    rows.put(base, "asyncio_rps_max", rep, aio.max())
                c = calib[(calib["regime"] == regime) & (calib["pool"] == pool) & (calib["repeat"] == rep)]
                if len(c):
                    db = db_time_s(c)
                    rows.put(base, "pool_bound_rps", rep, pool / db)
                    rows.put(base, "per_connection_rps", rep, 1.0 / db)
                for q in RATIO_QUANTITIES:
                    for a, b in combinations([m for m in MODELS if m in by_model.index], 2):
                        den = float(by_model.at[b, q])
                        rows.put(base, f"{q}_ratio.{a}_over_{b}", rep,
                                 float(by_model.at[a, q]) / den if den else math.nan)
        chosen = ((bound_regime(run), "bound", ("db_ms", "client_cores_needed", "machine_cores_needed"),
                   {"cost_client_us": "client_us"}),
                  (split_regime(run), "split", ("share_cores", "ceiling_rps", "server_cores_needed"),
                   {"probe_client_us": "client_us", "probe_server_us": "server_us"}))
        for table, regime, quantities, readings in chosen:   # what each calibrated regime chose, and from what
            for _, r in table.iterrows():
                if bool(r["reachable"]):
                    base = f"{regime}.pool{int(r['pool'])}"
                    for q in quantities:
                        rows.put(base, f"chosen_{q}", r["repeat"], r[q])
                    for name, column in readings.items():
                        rows.put(base, name, r["repeat"], r[column])

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
        for pool in p.bound_pools:
            failed += self._run_bound(ctx, p, pool, dsn, pid)
        probes = 0
        for pool in p.split_pools:
            split_failed, probed = self._run_split(ctx, p, pool, dsn, pid)
            failed += split_failed
            probes += probed
        ctx.note("load_average_after", list(os.getloadavg()))
        ctx.note("variants_failed", failed)
        total = (len(p.slow_ms) * len(p.pools) * len(p.models) + len(p.bound_pools) * len(p.bound_models)
                 + len(p.split_pools) * len(p.split_models) + probes)
        if len(failed) == total:
            raise HarnessError(f"all {total} variants failed; see the failures table and artifacts")


    def _run_bound(self, ctx: Context, p: PgModelsParams, pool: int, dsn: str, pid: int | None) -> list[str]:
        """The calibrated pool-bound cells of one pool: `bound_costs` reads each bound model's CPU
        per request from this repeat's seed cells and chooses the costliest model's database time
        (the first repeat's choice is kept); every bound model then runs at it. Returns the variants
        that failed; a regime out of reach skips its cells with the reason, before any of them is
        measured."""
        names = {model: bound_variant_name(model, pool) for model in p.bound_models}
        earlier = _earlier_choice(ctx, pool)
        if earlier is not None:   # one regime per run: the first repeat's choice, kept
            ctx.record("bound_regime", [earlier])
            ctx.note(f"bound_regime_pool{pool}", earlier)
            return self._run_bound_cells(ctx, p, pool, dsn, pid, names, earlier)
        windows = ctx.recorded("windows")
        chosen, per_model = bound_costs(pd.concat(windows, ignore_index=True) if windows else pd.DataFrame(),
                                        p, pool, len(os.sched_getaffinity(0)))
        chosen["chosen_in_repeat"] = ctx.repeat
        ctx.record("bound_regime", [chosen])
        ctx.note(f"bound_regime_pool{pool}", chosen)
        ctx.note(f"bound_costs_pool{pool}", per_model)
        return self._run_bound_cells(ctx, p, pool, dsn, pid, names, chosen)

    def _run_bound_cells(self, ctx: Context, p: PgModelsParams, pool: int, dsn: str, pid: int | None,
                         names: dict[str, str], regime: dict) -> list[str]:
        if not regime["reachable"]:
            for name in names.values():
                ctx.skip(name, f"pool-bound regime out of reach at pool {pool}: {regime['reason']}")
            return []
        ctx.log.info("pool-bound regime at pool %d: %g ms per request, bound %.0f req/s, window %.1f s",
                     pool, regime["db_ms"], regime["bound_rps"], regime["window_s"])
        failed = []
        for model in ctx.order(p.bound_models):
            spec = VariantSpec(
                variant=names[model], model=model, dsn=dsn, pool=pool, clients=p.clients,
                slow_ms=regime["db_ms"], warmup_s=max(p.warmup_s, regime["warmup_s"]),
                duration_s=max(p.duration_s, regime["window_s"]), rows=p.rows, seed=p.seed,
                calibration_requests=p.calibration_requests, postmaster_pid=pid,
                psycopg_autocommit=p.psycopg_autocommit, regime=BOUND)
            ctx.log.info("running %s", spec.variant)
            timeout = p.child_timeout_s(spec.slow_ms, warmup_s=spec.warmup_s, duration_s=spec.duration_s)
            if not run_in_child(ctx, spec, timeout, f"{model}_{BOUND}_pool{pool}"):
                failed.append(spec.variant)
        return failed


    def _run_split(self, ctx: Context, p: PgModelsParams, pool: int, dsn: str,
                   pid: int | None) -> tuple[list[str], int]:
        """The split cells of one pool: the seed's slowest queries, every model of `split_models`
        with the client on half the cores and the servers on the other (`placement.client_alone`,
        undone after the pool's cells), and the client held to the CPU share chosen for the run
        (`_split_share`: a probe in the first repeat, kept by later ones; a share below the
        client's cores is a cgroup quota, `cgroup.quota`). Returns (the variants that failed, the
        probes run); a placement or quota that cannot be set, or a regime out of reach, skips every
        cell with the reason, before any is measured."""
        names = {model: split_variant_name(model, pool) for model in p.split_models}
        slow = max(p.slow_ms)

        def skip_all(why: str) -> None:
            for name in names.values():
                ctx.skip(name, f"client-CPU ceiling regime out of reach at pool {pool}: {why}")

        with ExitStack() as stack:
            try:
                where = stack.enter_context(placement.client_alone(ctx.servers))
            except HarnessError as e:
                skip_all(str(e))
                return [], 0
            ctx.note(f"split_placement_pool{pool}", where)
            ctx.log.info("split cells at pool %d: servers on cores %s, client on %s", pool,
                         where["server_cpus"], where["client_cpus"])
            chosen, failed, probed = self._split_share(ctx, p, pool, dsn, pid, where)
            if not chosen["reachable"]:
                skip_all(chosen["reason"])
                return failed, probed
            if chosen["quota"]:
                try:
                    held = stack.enter_context(cgroup.quota(chosen["share_cores"],
                                                            round(p.split_quota_period_ms * 1000)))
                except cgroup.QuotaError as e:
                    skip_all(f"the client needs {chosen['share_cores']:g} of a core ({chosen['limited_by']}) "
                             f"and no CPU quota can be set here: {e}")
                    return failed, probed
                ctx.note(f"split_quota_pool{pool}", held)
            ctx.log.info("split cells at pool %d: client share %g cores (%s)", pool, chosen["share_cores"],
                         chosen["limited_by"])
            for model in ctx.order(p.split_models):
                spec = VariantSpec(
                    variant=names[model], model=model, dsn=dsn, pool=pool, clients=p.clients, slow_ms=slow,
                    warmup_s=p.warmup_s, duration_s=p.split_duration_s, rows=p.rows, seed=p.seed,
                    calibration_requests=p.calibration_requests, postmaster_pid=pid,
                    psycopg_autocommit=p.psycopg_autocommit, regime=SPLIT)
                ctx.log.info("running %s", spec.variant)
                timeout = p.child_timeout_s(slow, duration_s=spec.duration_s)
                if not run_in_child(ctx, spec, timeout, f"{model}_{SPLIT}_pool{pool}"):
                    failed.append(spec.variant)
            return failed, probed

    def _split_share(self, ctx: Context, p: PgModelsParams, pool: int, dsn: str, pid: int | None,
                     where: dict) -> tuple[dict, list[str], int]:
        """The client's CPU share for the split cells of `pool`: an earlier repeat's choice, or a
        probe of `split_probe_model` on the split placement (the client's whole cores) for
        `split_probe_s`, whose client and server CPU per request and unloaded database time
        `split_client_share` turns into a share. Records the `split_regime` row; returns (it, the
        variants that failed, the probes run)."""
        earlier = _earlier_choice(ctx, pool, "split_regime", "probe_ok")
        if earlier is not None:   # one regime per run: the first repeat's choice, kept
            ctx.record("split_regime", [earlier])
            ctx.note(f"split_regime_pool{pool}", earlier)
            return earlier, [], 0
        slow, model = max(p.slow_ms), p.split_probe_model
        spec = VariantSpec(
            variant=split_probe_variant_name(model, pool), model=model, dsn=dsn, pool=pool, clients=p.clients,
            slow_ms=slow, warmup_s=p.warmup_s, duration_s=p.split_probe_s, rows=p.rows, seed=p.seed,
            calibration_requests=p.calibration_requests, postmaster_pid=pid,
            psycopg_autocommit=p.psycopg_autocommit, regime=SPLIT_PROBE)
        ctx.log.info("running %s", spec.variant)
        ok = run_in_child(ctx, spec, p.child_timeout_s(slow, duration_s=spec.duration_s),
                          f"{model}_{SPLIT_PROBE}_pool{pool}")
        row: dict = {"pool": pool, "probe_model": model, "probe_variant": spec.variant, "probe_ok": False,
                     "probe_note": "", "client_us": math.nan, "server_us": math.nan, "db_ms": math.nan,
                     "client_cores": len(where["client_cpus"]), "server_cores": len(where["server_cpus"]),
                     "chosen_in_repeat": ctx.repeat}
        if ok:
            w = _last(ctx, "windows", spec.variant)
            calibration = _last(ctx, "calibration", spec.variant, every=True)
            if str(w.get("cpu_check") or ""):
                row["probe_note"] = f"the probe's CPU readings do not fit the machine ({w['cpu_check']})"
            else:
                completed = int(w["completed"])
                row.update(probe_ok=True, client_us=stats.cpu_per_op_us(float(w["cpu_s"]), completed),
                           server_us=stats.cpu_per_op_us(float(w["server_cpu_s"]), completed),
                           db_ms=1000.0 * float(stats.percentiles(calibration["latency_s"].to_numpy(), [50.0])[0]))
        else:
            row["probe_note"] = f"the probe {spec.variant} failed"
        share = split_client_share(row["client_us"], row["server_us"], row["db_ms"], pool, row["client_cores"],
                                   row["server_cores"], pool_headroom=p.split_pool_headroom,
                                   server_share=p.split_server_share, step=p.split_core_step,
                                   min_cores=p.split_min_cores)
        if row["probe_note"]:
            share["reason"] = row["probe_note"]
        chosen = {**row, **{k: share[k] for k in SPLIT_KEYS}}
        ctx.record("split_regime", [chosen])
        ctx.note(f"split_regime_pool{pool}", chosen)
        return chosen, [] if ok else [spec.variant], 1


def _last(ctx: Context, table: str, variant: str, every: bool = False):
    """The rows `ctx` recorded for `variant` in `table` in this repeat: the last one, or all."""
    frame = pd.concat(ctx.recorded(table), ignore_index=True)
    frame = frame[frame["variant"] == variant]
    return frame if every else frame.iloc[-1]


def _earlier_choice(ctx: Context, pool: int, table: str = "bound_regime", ok: str = "cost_ok") -> dict | None:
    """What an earlier repeat of this run chose for `pool` in `table` (the bound cells' database
    time, the split cells' client share: the first repeat that chose one from usable readings,
    `ok`, reachable or not), so that every repeat measures one regime: repeats run in order, each in
    its own worker, and a repeat's tables are on disk before the next starts. None in the first
    repeat, or when no earlier repeat had usable readings (this one tries)."""
    run_dir = ctx.artifacts.parent.parent
    for k in range(ctx.repeat):
        path = run_dir / f"r{k}" / f"{table}.parquet"
        if not path.exists():
            continue
        rows = read_table(path)
        rows = rows[(rows["pool"] == pool) & rows[ok]]
        if len(rows):
            return {key: (v.item() if hasattr(v, "item") else v) for key, v in rows.iloc[0].to_dict().items()}
    return None


EXPERIMENT = PgModels()
