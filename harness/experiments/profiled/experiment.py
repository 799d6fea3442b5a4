"""Why, not only how much: one pass after every measured repeat, py-spy attached to the client.

The measured experiments say how much CPU each client model spends per request; this pass says
where it goes. For each part below, every model runs twice back to back with the same workload and
parameters: a plain window, then one with py-spy sampling the client process (`measure.Window`),
the order alternating from one model to the next. A part samples native frames at `rate_hz`
(pausing the process at each sample), native frames at `low_rate_hz`, or Python frames only at
`rate_hz` without pausing it (`--nonblocking`): pausing a client of many threads at 100 Hz slowed
it severalfold on the first profiled reference (32 threads kept 14% of their throughput, 200
threads 10–31%), and a profile of a client slowed that much is not of the client as measured.

- `pg_fast`: the four PostgreSQL models of seed 002, fast queries (pg_models' fast regime; 002-cpu);
- `pg_bound`: the same models on a pool-bound regime, `pg_bound_ms` of database time per request
  (pg_models' bound regime chooses its own per machine; this pass takes a fixed one, 30 ms: the
  one it chose on the reference machine);
- `mongo_models`: 32 threads on a synchronous MongoClient against 200 asyncio tasks on
  AsyncMongoClient with a 10-connection pool (001-models);
- `mongo_cursor`: one task draining the orders collection with the server's default batches
  against `batch_size=1000`, again and again for the window (001-cursor);
- `pg_bound_low`: pg_bound with native frames at `low_rate_hz` (the interpreter lock's share needs
  native frames);
- `pg_fast_python`, `mongo_models_python`: pg_fast and mongo_models, Python frames only;
- `pg_fast_perf`, `pg_bound_perf`, `mongo_models_perf`: the same workloads sampled by Linux perf
  (`core.profiles`): on-CPU samples, native and Python frames, nothing paused. perf names Python
  frames only from CPython 3.13, so each window of these parts, plain and profiled, runs in a child
  on `perf_python`'s venv (`profiled.child`); their shares are of that interpreter's client.

Tables: `windows` (one per model and window, `profiled` saying which, `python` the interpreter
that ran it; the client's CPU and context switches as every window has them), `profiles` (the
profiled window's samples by category, `core.profiles`), `failures`. Each profiled window's stacks
are kept among the artifacts as a speedscope file (`profile_<variant>.speedscope.json`, for an
interactive look at https://www.speedscope.app). Per-operation samples are not kept: nothing here is judged, and the
windows hold the counts the profiler's cost is read from.

Kept apart from every verdict: no ledger row names this experiment, it runs once after the other
experiments' repeats (`after_repeats`), and no other experiment's table holds a profiled window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import datasets, interpreters, processes, profiles
from ...core.measure import EdgeCPU, Window, error_text
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, window_columns
from ..mongo.workload import DOCUMENTS, async_client, ferretdb_backend_index, orders, run_async
from ..postgres.workload import SEED_MODELS, VariantSpec, cpu_at_edges, find_postmaster, measure_in_child
from .analysis import variant_figures
from .child import mongo_window

NATIVE, LOW_RATE, PYTHON, PERF = "native", "native, low rate", "python", "perf"
# part: (the workload it runs, how it is sampled, the lesson it explains)
PARTS = {"pg_fast": ("pg_fast", NATIVE, "002-cpu"), "pg_bound": ("pg_bound", NATIVE, "002-bound"),
         "mongo_models": ("mongo_models", NATIVE, "001-models"), "mongo_cursor": ("mongo_cursor", NATIVE, "001-cursor"),
         "pg_bound_low": ("pg_bound", LOW_RATE, "002-cpu"), "pg_fast_python": ("pg_fast", PYTHON, "002-cpu"),
         "mongo_models_python": ("mongo_models", PYTHON, "001-models"),
         "pg_fast_perf": ("pg_fast", PERF, "002-cpu"), "pg_bound_perf": ("pg_bound", PERF, "002-cpu"),
         "mongo_models_perf": ("mongo_models", PERF, "001-models")}
# how each way of sampling names its profile's file (`core.profiles`)
PROFILER = {NATIVE: profiles.NATIVE, LOW_RATE: profiles.NATIVE, PYTHON: profiles.PYTHON, PERF: profiles.PERF}
MONGO_MODELS = ("threads", "async")
CURSOR_MODELS = ("default", "batch")
CHILD_OVERHEAD_S = 60.0
CHILD = "harness.experiments.profiled.child"   # a perf part's windows, on the perf interpreter
CATEGORY_KEYS = tuple(profiles.KEYS.values())


@dataclass(frozen=True)
class ProfiledParams(Params):
    parts: tuple[str, ...] = tuple(PARTS)
    pg_models: tuple[str, ...] = SEED_MODELS
    pg_pool: int = 20
    pg_clients: int = 200
    pg_bound_ms: float = 30.0
    rows: int = 100_000
    mongo_threads: int = 32
    mongo_tasks: int = 200
    mongo_pool: int = 10
    cursor_batch: int = 1000
    documents: int = DOCUMENTS["seed"]
    duration_s: float = 5.0
    warmup_s: float = 1.0
    rate_hz: int = profiles.RATE_HZ
    low_rate_hz: int = 20
    perf_python: str = "3.13"     # the interpreter of the perf parts (perf_jit trampolines)
    seed: int = 20261130
    timeout_s: float = 1800.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("pg_pool", "pg_clients", "rows", "mongo_threads", "mongo_tasks", "mongo_pool",
                              "cursor_batch", "documents", "duration_s", "rate_hz", "low_rate_hz")
        self.require_choice("parts", tuple(PARTS))
        self.require_choice("pg_models", SEED_MODELS)


class Profiled(Experiment):
    name = "profiled"
    title = "Where each client model spends its CPU: py-spy profiles and the profiler's own cost"
    needs = ("postgres", "mongodb")
    params_type = ProfiledParams
    family = "profiled"
    drivers = ("psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop", "pymongo", "py-spy")
    after_repeats = True
    profiles = {
        "seed": {},
        # 8 s windows: about 800 samples a busy thread at 100 Hz, a category's share within a few percent
        "full": {"documents": DOCUMENTS["full"], "duration_s": 8.0},
        "quick": {"documents": DOCUMENTS["quick"], "duration_s": 1.5, "warmup_s": 0.5},
        "smoke": {"documents": DOCUMENTS["smoke"], "duration_s": 0.6, "warmup_s": 0.2, "rows": 10_000,
                  "pg_models": ("threads_psycopg", "asyncio_asyncpg"), "pg_clients": 8, "pg_pool": 4,
                  "mongo_threads": 4, "mongo_tasks": 20, "mongo_pool": 4, "cursor_batch": 100,
                  "timeout_s": 600.0,
                  # each workload and each way of sampling once (the low rate is native sampling at
                  # another rate, and leaves a pool-bound smoke window of 0.6 s without a sample)
                  "parts": ("pg_fast", "pg_fast_python", "pg_fast_perf", "mongo_models", "mongo_models_python",
                            "mongo_models_perf", "mongo_cursor")},
    }
    repeats = {"smoke": 1, "quick": 1, "full": 1, "seed": 1}
    headline = (Metric("profiled_over_plain", "ratio", "higher"),)   # the profiler's own cost first
    tables = {
        "windows": window_columns(part="str", model="str", profiled="bool", completed="int",
                                  profile_error="str", **{OTHER_COLUMNS: "any"}),
        "profiles": {"variant": "str", "part": "str", "model": "str", "category": "str", "label": "str",
                     "samples": "int", "share": "float"},
        "failures": {"variant": "str", "part": "str", "model": "str", "profiled": "bool", "error": "str"},
    }
    metrics = (Metric("throughput_plain", "ops/s", "higher"), Metric("throughput_profiled", "ops/s", "higher"),
               Metric("profiled_over_plain", "ratio", "higher"), Metric("cpu_us_per_op", "us", "lower"),
               Metric("cpu_us_per_op_profiled", "us", "lower"), Metric("ctx_vol_per_op", "switches", ""),
               Metric("ctx_invol_per_op", "switches", ""), Metric("samples", "count", ""),
               Metric("sampled_over_active", "ratio", ""), Metric("rate_hz", "Hz", ""),
               Metric("native_frames", "flag", ""), Metric("on_cpu", "flag", ""), Metric("python", "version", ""),
               Metric("share_{category}", "share", ""), Metric("cpu_us_{category}", "us", ""))

    def datasets(self, p: ProfiledParams) -> list:
        return [datasets.Accounts(p.rows), datasets.Orders(p.documents)]

    analysis = "harness.experiments.profiled.analysis"
    notebook = "07_profiles.ipynb"

    def compute_metrics(self, run, rows) -> None:
        for _, r in variant_figures(run).iterrows():
            for m in ("throughput_plain", "throughput_profiled", "profiled_over_plain", "cpu_us_per_op",
                      "cpu_us_per_op_profiled", "ctx_vol_per_op", "ctx_invol_per_op", "samples", "sampled_over_active",
                      "rate_hz", "native_frames", "on_cpu", "python",
                      *(f"share_{k}" for k in CATEGORY_KEYS), *(f"cpu_us_{k}" for k in CATEGORY_KEYS)):
                rows.put(r["variant"], m, r["repeat"], r.get(m))

    def run(self, ctx: Context) -> None:
        p: ProfiledParams = ctx.params
        with ferretdb_backend_index(ctx, "mongo_models" in p.parts):   # as mongo_models queries
            self._parts(ctx, p)

    def _parts(self, ctx: Context, p: ProfiledParams) -> None:
        k = 0
        for part in p.parts:
            workload = PARTS[part][0]
            for model in (p.pg_models if workload.startswith("pg_") else
                          MONGO_MODELS if workload == "mongo_models" else CURSOR_MODELS):
                for profiled in ((False, True) if k % 2 == 0 else (True, False)):
                    self._window(ctx, part, model, profiled)
                k += 1

    def _window(self, ctx: Context, part: str, model: str, profiled: bool) -> None:
        p: ProfiledParams = ctx.params
        variant = f"{part}.{model}"
        workload, sampling, _lesson = PARTS[part]
        rate = p.low_rate_hz if sampling == LOW_RATE else p.rate_hz
        out = profiles.profile_path(ctx.artifacts, variant, PROFILER[sampling], rate) if profiled else None
        ctx.log.info("running %s%s", variant, f" profiled ({sampling}, {rate} Hz)" if profiled else "")
        try:
            if sampling == PERF:
                window = self._in_child(ctx, workload, variant, model, out)
            elif workload.startswith("pg_"):
                window = self._pg(ctx, workload, variant, model, out)
            elif workload == "mongo_models":
                window = self._mongo(ctx, model, out)
            else:
                window = self._cursor(ctx, model, out)
        except Exception as e:  # one variant's failure is recorded; the others still run
            ctx.record("failures", [{"variant": variant, "part": part, "model": model, "profiled": profiled,
                                     "error": error_text(e)}])
            ctx.log.warning("%s failed: %s", variant, error_text(e))
            return
        window.setdefault("python", platform.python_version())   # this process's, or its child's on it
        error = str(window.pop("profile_error", "") or "")
        ctx.record("windows", [{**window, "variant": variant, "part": part, "model": model, "profiled": profiled,
                                "profile_error": error, "sampling": sampling if profiled else "",
                                "rate_hz": rate if profiled else 0}])
        if out is not None and not error:
            stacks = profiles.read_collapsed(out)
            got = profiles.counts(stacks)
            total = sum(got.values())
            ctx.record("profiles", [{"variant": variant, "part": part, "model": model, "category": profiles.KEYS[c],
                                     "label": c, "samples": int(got[c]), "share": got[c] / total if total else 0.0}
                                    for c in profiles.NAMES])
            # kept once, as speedscope (read back by `profiles.read_speedscope`): the collapsed text holds the same
            profiles.write_speedscope(stacks, variant, ctx.artifacts / f"profile_{variant}.speedscope.json")
        if out is not None:
            out.unlink(missing_ok=True)

    def _pg_spec(self, ctx: Context, workload: str, variant: str, model: str, out: Path | None) -> VariantSpec:
        p: ProfiledParams = ctx.params
        pid, _how = find_postmaster(ctx.servers.postgres_dsn, ctx.servers.postgres.pids)
        slow_ms = p.pg_bound_ms if workload == "pg_bound" else 0.0
        return VariantSpec(variant=variant, model=model, dsn=ctx.servers.postgres_dsn, pool=p.pg_pool,
                           clients=p.pg_clients, slow_ms=slow_ms, warmup_s=p.warmup_s, duration_s=p.duration_s,
                           rows=p.rows, seed=p.seed, calibration_requests=0, postmaster_pid=pid,
                           regime=workload.removeprefix("pg_"), profile=str(out) if out else "")

    def _pg(self, ctx: Context, workload: str, variant: str, model: str, out: Path | None) -> dict[str, Any]:
        p: ProfiledParams = ctx.params
        spec = self._pg_spec(ctx, workload, variant, model, out)
        timeout = p.warmup_s + p.duration_s + CHILD_OVERHEAD_S
        result, child = measure_in_child(ctx, spec, timeout, f"{variant.replace('.', '_')}{'_profiled' if out else ''}")
        if result is None:
            raise RuntimeError(child.error or "the child returned no result")
        return {k: v for k, v in result["window"].items() if not isinstance(v, (list, dict))}

    def _mongo_args(self, p: ProfiledParams, model: str) -> dict[str, Any]:
        return dict(model=model, threads=p.mongo_threads, tasks=p.mongo_tasks, pool=p.mongo_pool,
                    duration_s=p.duration_s, warmup_s=p.warmup_s, seed=p.seed)

    def _mongo(self, ctx: Context, model: str, out: Path | None) -> dict[str, Any]:
        return mongo_window(ctx.servers, **self._mongo_args(ctx.params, model), profile=out)

    def _in_child(self, ctx: Context, workload: str, variant: str, model: str, out: Path | None) -> dict[str, Any]:
        """A perf part's window in a child on `perf_python`'s venv (`profiled.child`), the profiled
        one with perf's trampolines on; a PostgreSQL window's CPU read here at its edges."""
        p: ProfiledParams = ctx.params
        venv = interpreters.ensure_venv(interpreters.resolve(p.perf_python), build=False)
        if workload.startswith("pg_"):
            pg = self._pg_spec(ctx, workload, variant, model, out)
            spec: dict[str, Any] = {"pg": dataclasses.asdict(pg)}
            postmaster = pg.postmaster_pid
        else:
            spec = {"mongo": {**self._mongo_args(p, model), "profile": str(out) if out else ""},
                    "mongodb_uri": ctx.servers.mongodb_uri}
            postmaster = None
        stem = f"{variant.replace('.', '_')}{'_profiled' if out else ''}"
        with tempfile.TemporaryDirectory(prefix="profiled-") as tmp, \
                EdgeCPU({"server": (postmaster, True)}) as cpu:
            child = processes.run_child(f"profiled:{stem}", CHILD, spec, result_path=Path(tmp) / "out.json",
                                        log_path=ctx.artifacts / f"{stem}.log",
                                        # perf's samples are named and folded in the child, after its window
                                        timeout_s=p.warmup_s + p.duration_s + 3 * CHILD_OVERHEAD_S,
                                        env=interpreters.child_env(profiles.perf_env(out)), python=venv.python,
                                        on_start=lambda pid: cpu.add("client", pid))
            if child.error is not None or child.result is None:
                raise RuntimeError(child.error or "the child returned no result")
            window = child.result["window"]
            if postmaster is not None:
                window.update(cpu_at_edges(cpu, window, True))
        window["python"] = child.result["runtime"]["python"]
        return {k: v for k, v in window.items() if not isinstance(v, (list, dict))}

    def _cursor(self, ctx: Context, model: str, out: Path | None) -> dict[str, Any]:
        p: ProfiledParams = ctx.params
        batch = p.cursor_batch if model == "batch" else 0

        async def main() -> dict[str, Any]:
            async with async_client(ctx.servers.mongodb_uri, driver="pymongo") as client:
                col = orders(client)
                await _drain(col, batch, p.warmup_s)
                with Window(f"mongo_cursor.{model}", {"batch_size": batch}, profile=out) as w:
                    w.ops = await _drain(col, batch, p.duration_s)
                row = w.row()
                row.update(completed=w.ops, errors=0, profile_error=w.profile_error or "")
                return row

        return run_async(main)


async def _drain(col: Any, batch: int, seconds: float) -> int:
    """Read the whole collection (`batch` documents a reply; 0 = the server's default), again until
    `seconds` have passed (at least once); the documents read."""
    n, stop = 0, time.perf_counter() + seconds
    while True:
        async for _doc in col.find({}, **({"batch_size": batch} if batch else {})):
            n += 1
        if time.perf_counter() >= stop:
            return n
        await asyncio.sleep(0)


EXPERIMENT = Profiled()
