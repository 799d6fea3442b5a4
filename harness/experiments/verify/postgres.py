"""`harness verify` on PostgreSQL: seed 002's checks on a user's own request.

The request is the workload file's statements (`harness.core.workload_file`), run in order on one pooled
connection, with parameters drawn per request from seeded generators. Each client model of seed 002
(`load.models`, by default threads+psycopg, asyncio+psycopg, asyncio+asyncpg, uvloop+asyncpg) runs
it at each pool size in `pools` with `clients` closed-loop clients, each variant in its own child
interpreter: the very machinery of `pg_models` (`harness.experiments.postgres.workload`), so the window, the warm-up,
the client, server and machine CPU and the calibration of the per-request database time are the
study's own. Every request runs in a transaction started READ ONLY, on sessions opened with
`default_transaction_read_only=on` (`harness.core.workload_file` names the three guards).

Before the variants, each `{ column = "table.column" }` generator becomes a list of up to `sample`
values read from the target (a seeded TABLESAMPLE; a read, outside every window), and `preflight`
runs each statement once through each driver the models use, in a read-only transaction rolled
back: a statement the server refuses stops the repeat in one line naming it. `harness verify`
runs the same pre-flight before the first repeat (`harness.running.verify.prepare`), so no repeat starts
on a workload that cannot run; here it guards `harness run verify_postgres` and a local target,
whose server exists only once the run has started it.

Variants: `<model>[pool=<n>]`, in `ctx.order()`. Tables: those of `pg_models`
(`harness.experiments.postgres.workload.tables`), so `harness.experiments.postgres.analysis.models_table`
derives the figures;
the checks and verdicts are `harness.experiments.verify.analysis`'s. A variant whose failed requests pass
`load.max_error_rate` stops the repeat (the rest of its cells fail with that reason).

`in_study` is false: `harness study` never runs it; `harness verify FILE` (or `harness run
verify_postgres --set workload=JSON`) does. With no workload given it runs
`examples/workloads/postgres_accounts.toml` on the local servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from dataclasses import dataclass
from typing import Any

from ...core import datasets, workload_file
from ...core.config import REPO_ROOT
from ...core.errors import HarnessError
from ...core.measure import error_text, find_postmaster
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, variant_id, window_columns
from ..postgres.analysis import models_table
from ..postgres.workload import MODELS, READ_ONLY_SESSION, SEED_MODELS, VariantSpec, run_in_child
from ..postgres.workload import tables as pg_tables
from . import reach, rights

EXAMPLE = REPO_ROOT / "examples" / "workloads" / "postgres_accounts.toml"
CHILD_OVERHEAD_S = 60.0
REGIME = "workload"
PREFLIGHT_STATEMENT_TIMEOUT_MS = 30_000   # a pre-flight statement that runs longer is refused


@dataclass(frozen=True)
class VerifyPostgresParams(Params):
    workload: str = ""                     # the workload file's body as JSON; "" = EXAMPLE
    models: tuple[str, ...] = SEED_MODELS
    pools: tuple[int, ...] = (20,)
    clients: int = 200
    duration_s: float = 3.0
    calibration_requests: int = 20
    rows: int = 100_000                    # the local `acct` table (target = "local" only)
    timeout_s: float = 900.0
    trusted_functions: tuple[str, ...] = ()   # functions whose bodies are not walked (--trust-function)
    writable_role_ok: bool = False         # run as a role that can write, off the study's own cluster
    idle_target: bool = False              # the user says nothing else writes: watch the row counters

    def __post_init__(self) -> None:
        if not self.workload:               # the manifest holds the body actually run
            object.__setattr__(self, "workload", workload_file.body_json(EXAMPLE))

    def validate(self) -> None:
        super().validate()
        self.require_choice("models", MODELS)
        self.require_positive("pools", "clients", "duration_s", "calibration_requests", "rows")
        body = workload_file.from_json(self.workload, "parameter workload")
        if body.get("postgres") is None:
            raise HarnessError("parameter workload: verify_postgres needs a [postgres] section")
        workload_file.check_caps(self, ("clients", "pools", "duration_s"))

    def body(self) -> dict[str, Any]:
        return json.loads(self.workload)

    def child_timeout_s(self) -> float:
        return self.warmup_s + self.duration_s + self.calibration_requests * 0.5 + CHILD_OVERHEAD_S


def sample_column(dsn: str, column: str, n: int, seed: int) -> list[Any]:
    """Up to `n` values of `table.column`, a seeded sample (the same on every run of one table),
    read on a read-only connection."""
    import psycopg
    from psycopg import sql

    table, col = column.split(".")
    with psycopg.connect(dsn, connect_timeout=10, options=READ_ONLY_SESSION) as conn:
        est = (conn.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (table,)).fetchone()
               or (None,))[0]
        if est is None:
            raise HarnessError(f"postgres.params: table {table!r} of column {column!r} does not exist on the target")
        pct = 100.0 if not est or est <= 0 else min(100.0, 100.0 * 2 * n / est)
        q = sql.SQL("SELECT {c} FROM {t} TABLESAMPLE BERNOULLI (%s) REPEATABLE (%s) WHERE {c} IS NOT NULL "
                    "LIMIT %s").format(c=sql.Identifier(col), t=sql.Identifier(table))
        try:
            values = [r[0] for r in conn.execute(q, (pct, seed, n)).fetchall()]
        except psycopg.Error as e:
            raise HarnessError(f"postgres.params: cannot sample {column}: {error_text(e, 200)}") from None
    if not values:
        raise HarnessError(f"postgres.params: column {column} has no values to sample")
    return [float(v) if hasattr(v, "as_tuple") else v for v in values]   # Decimal -> float (JSON)


def generators(dsn: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
    """The workload's generators with every column sample resolved to a choice list."""
    out = {}
    for name, g in params.items():
        if "column" in g:
            out[name] = {"choice": sample_column(dsn, g["column"], int(g.get("sample", 1000)), seed)}
        else:
            out[name] = g
    return out


def statements(request: list[str]) -> tuple[dict[str, Any], ...]:
    out = []
    for sql_text in request:
        asyncpg_sql, names = workload_file.to_asyncpg(sql_text)
        out.append({"psycopg": workload_file.to_psycopg(sql_text), "asyncpg": asyncpg_sql, "names": names})
    return tuple(out)


@dataclass(frozen=True)
class Guarded:
    """What the guards found before the load: the note the run keeps, and the row counters to
    compare against after each variant (None when they are not watched)."""
    note: dict[str, Any]
    rows_before: dict[str, tuple[int, int, int]] | None

    def check_rows(self, dsn: str, when: str) -> None:
        if self.rows_before is not None:
            with _catalog_connection(dsn) as conn:
                rights.compare(self.rows_before, rights.row_changes(conn), when)


def _catalog_connection(dsn: str) -> Any:
    import psycopg

    try:
        return psycopg.connect(dsn, connect_timeout=10, autocommit=True, options=READ_ONLY_SESSION)
    except psycopg.Error as e:
        raise HarnessError(f"target: could not connect to read the catalog: {error_text(e, 200)}") from None


def guarded_preflight(dsn: str, body: dict[str, Any], gens: dict[str, Any], p: VerifyPostgresParams,
                      *, own: bool = False) -> Guarded:
    """The guards in order, each a one-line HarnessError: the role's rights (a role that can write
    is refused off the study's own cluster), the walk of what each statement reaches, then the
    pre-flight, with the row counters read before and after it where they are watched."""
    request = body["postgres"]["request"]
    with _catalog_connection(dsn) as conn:
        role = rights.read(conn, dsn, own=own)
        rights.check(role, p.writable_role_ok)
        found = reach.check(conn, request, p.trusted_functions)
        watched = (role.study_cluster or p.idle_target) and role.counts_rows
        before = rights.row_changes(conn) if watched else None
    preflight(dsn, request, gens, p.models, int(body.get("seed", 1)))
    guarded = Guarded({"role": role.as_note(), "reach": found.as_note(),
                       "rows_watched": watched if role.counts_rows else "no: track_counts is off"}, before)
    guarded.check_rows(dsn, "during the pre-flight")
    return guarded


def preflight(dsn: str, request: list[str], gens: dict[str, Any], models: tuple[str, ...], seed: int) -> None:
    """Each statement once, with parameters drawn as a request draws them, in one transaction
    started READ ONLY and rolled back, through psycopg and (when a model uses it) asyncpg, which
    types parameters differently. The first statement the server refuses (a write inside a CTE or
    a function, a syntax error, a missing table, a parameter of the wrong type, a statement past
    PREFLIGHT_STATEMENT_TIMEOUT_MS) raises a one-line HarnessError naming it."""
    program = statements(request)
    values = workload_file.draw(gens, random.Random(f"{seed}:preflight"))
    _preflight_psycopg(dsn, request, program, values)
    if any(m.endswith("asyncpg") for m in models):
        asyncio.run(_preflight_asyncpg(dsn, request, program, values))


def _refused(request: list[str], k: int, driver: str, e: BaseException) -> HarnessError:
    shown = request[k] if len(request[k]) <= 80 else request[k][:77] + "..."
    return HarnessError(f"postgres.request[{k}] {shown!r}: refused in the read-only pre-flight ({driver}): "
                        f"{' '.join(error_text(e, 300).split())}")


def _preflight_psycopg(dsn: str, request: list[str], program: tuple[dict[str, Any], ...],
                       values: dict[str, Any]) -> None:
    import psycopg

    options = f"{READ_ONLY_SESSION} -c statement_timeout={PREFLIGHT_STATEMENT_TIMEOUT_MS}"
    try:
        conn = psycopg.connect(dsn, connect_timeout=10, options=options)
    except psycopg.Error as e:
        raise HarnessError(f"target: the pre-flight could not connect: {error_text(e, 200)}") from None
    with conn:
        conn.read_only = True
        for k, st in enumerate(program):
            try:
                cur = conn.execute(st["psycopg"], values)
                if cur.description is not None:
                    cur.fetchall()
            except psycopg.Error as e:
                raise _refused(request, k, "psycopg", e) from None
        conn.rollback()


async def _preflight_asyncpg(dsn: str, request: list[str], program: tuple[dict[str, Any], ...],
                             values: dict[str, Any]) -> None:
    import asyncpg

    settings = {"default_transaction_read_only": "on", "statement_timeout": str(PREFLIGHT_STATEMENT_TIMEOUT_MS)}
    try:
        conn = await asyncpg.connect(dsn, timeout=10, server_settings=settings)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        raise HarnessError(f"target: the pre-flight could not connect: {error_text(e, 200)}") from None
    try:
        transaction = conn.transaction(readonly=True)
        await transaction.start()
        try:
            for k, st in enumerate(program):
                try:
                    await conn.fetch(st["asyncpg"], *[values[n] for n in st["names"]])
                except Exception as e:   # asyncpg's argument errors are not all PostgresError
                    raise _refused(request, k, "asyncpg", e) from None
        finally:
            await transaction.rollback()
    finally:
        await conn.close()


class VerifyPostgres(Experiment):
    name = "verify_postgres"
    title = "harness verify: seed 002's checks on a workload file's PostgreSQL request"
    needs = ("postgres",)
    in_study = False
    params_type = VerifyPostgresParams
    profiles = {"seed": {}, "full": {}, "quick": {},
                "smoke": {"clients": 8, "pools": (4,), "duration_s": 0.4, "warmup_s": 0.2,
                          "calibration_requests": 3, "rows": 10_000, "timeout_s": 240.0}}
    repeats = {"smoke": 1, "quick": 1, "full": 5, "seed": 5}
    analysis = "harness.experiments.verify.analysis"
    family = "verify"
    ceiling = None
    drivers = ("psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
    notebook = "06_workload.ipynb"
    headline = (Metric("rps", "req/s", "higher"), Metric("p99_ms", "ms", "lower"),
                Metric("cpu_us_per_req", "us", "lower"))
    tables = pg_tables(window_columns, OTHER_COLUMNS)

    metrics = (Metric("rps", "req/s", "higher"), Metric("p50_ms", "ms", "lower"), Metric("p99_ms", "ms", "lower"),
               Metric("p99_p50_ratio", "ratio", "lower"), Metric("cpu_us_per_req", "us", "lower"),
               Metric("pool_bound_frac", "ratio", ""), Metric("db_time_ms", "ms", "lower"),
               *(Metric(n, "switches", "") for n in ("ctx_vol_per_req", "ctx_invol_per_req", "server_ctx_per_req")))

    def compute_metrics(self, run, rows) -> None:
        for _, r in models_table(run, self.name).iterrows():
            for m in self.metrics:
                rows.put(r["variant"], m.name, int(r["repeat"]), r[m.name], r["limit"])

    def datasets(self, p: VerifyPostgresParams) -> list:
        return [datasets.Accounts(p.rows)] if p.body().get("dataset") == "accounts" else []

    def run(self, ctx: Context) -> None:
        p: VerifyPostgresParams = ctx.params
        body = p.body()
        dsn = ctx.servers.postgres_dsn
        pid, how = find_postmaster(dsn, ctx.servers.postgres.pids)
        ctx.note("server_cpu", {"postmaster_pid": pid, "found": how, "measured": pid is not None})
        ctx.note("cpu_count", os.cpu_count())
        gens = generators(dsn, body["postgres"].get("params", {}), int(body.get("seed", 1)))
        ctx.note("generators", {n: ({"choice_of": len(g["choice"])} if "choice" in g else g) for n, g in gens.items()})
        own = ctx.servers.postgres is not None and ctx.servers.postgres.source != "env"
        guarded = guarded_preflight(dsn, body, gens, p, own=own)
        for key, value in guarded.note.items():
            ctx.note(key, value)
        program = statements(body["postgres"]["request"])
        limit = float(body.get("load", {}).get("max_error_rate", 0.05))
        for pool, model in ctx.order([(pool, m) for pool in p.pools for m in p.models]):
            spec = VariantSpec(
                variant=variant_id(model, pool=pool), model=model, dsn=dsn, pool=pool,
                clients=p.clients, slow_ms=0.0, warmup_s=p.warmup_s, duration_s=p.duration_s, rows=p.rows,
                seed=int(body.get("seed", 1)), calibration_requests=p.calibration_requests,
                postmaster_pid=pid, statements=program, params=gens, read_only=True, regime=REGIME)
            ctx.log.info("running %s", spec.variant)
            ok = run_in_child(ctx, spec, p.child_timeout_s(), f"{model}_pool{pool}")
            if not ok:
                raise HarnessError(f"{spec.variant} failed: {ctx.recorded('failures')[-1]['error'].iloc[0]}")
            w = ctx.recorded("windows")[-1].iloc[0]
            failed = ctx.recorded("samples")[-1]
            failed = failed[~failed["ok"].astype(bool)]
            workload_file.check_error_rate(spec.variant, int(w["ops"]), int(w["errors"]), limit,
                                           next(iter(failed["error"]), ""))
            guarded.check_rows(dsn, f"while {spec.variant} ran")


EXPERIMENT = VerifyPostgres()
