"""Beyond the seeds: does the interpreter, the server's latency or co-location explain
two departures in client CPU per request?

- seed 001 section 5 (`mongo`): 32 threads on one `MongoClient` (pool 32) against 200 asyncio tasks
  on `AsyncMongoClient` (pool 10), indexed `find_one`: mongo_models' `threads[workers=32,pool=32]`
  and `async[workers=200,pool=10,semaphore=off,loop=asyncio,driver=pymongo]`;
- seed 002 section 3 (`pg`): the fast regime (no pg_sleep) of pg_models, pool 20: `threads_psycopg`
  against `asyncio_psycopg` and `uvloop_asyncpg`.

Factors: interpreter (`pythons`, each with its own venv from `harness.core.interpreters`; every
free-threaded build installed also runs the threads models), placement (`shared` | `split`, from
`harness.core.placement`), added server round trip (`rtts_ms`, through the proxy of
`harness.core.network` when it exists and the stack has one; otherwise only 0 and a note saying the
latency factor is missing) and the drivers' versions (`drivers`; below). A cell is
family x python x placement x rtt (x driver level): one child process
(`python -m harness.experiments.departures.child SPEC OUT`, started with that interpreter's venv python)
runs the family's models back to back (order reversed on odd repeats), each with a warm-up and a
measured window. For `split` the worker pins the servers before the child starts and the child
pins itself first thing; both read back and are recorded. Cells run in a seeded random order per
repeat, so every level of every factor is spread over the repeat's time.

The driver factor. `drivers` lists levels, each one or more pins of one family's packages joined
by `+`: `pymongo=4.18.2`, `pymongo=4.15.*` (the newest 4.15 release), `psycopg=3.3.6+asyncpg=0.31.0`.
An entry that is only a version repeats the package of the entry before it, so that
`--set departures.drivers=pymongo=4.15.*,4.18.2,psycopg=3.3.6+asyncpg=0.31.0` (the `--set` parser
splits on commas) is three levels. Packages: pymongo, motor (the `mongo` family); psycopg,
psycopg-binary, psycopg-pool, asyncpg, uvloop (`pg`); pinning psycopg pins psycopg-binary to the same
version (the lock installs `psycopg[binary]`). The baseline level, `lock`, is every package as
requirements.lock pins it: the interpreters' own venvs, always measured; a level whose pins are the
lock's is that level (noted, not run twice). Each other level runs on one interpreter
(`driver_python`, default the first of `pythons`) in every placement x rtt, in its own venv
(`interpreters.ensure_pinned_venv`: the lock with only those pins overridden), built by `prepare()`
before any server starts. A level that does not install there (a version the index does not serve,
no wheel for the interpreter) is skipped in every repeat with pip's one-line reason. The child reads
every driver's version back (importlib.metadata) and each window records them; a read-back that does
not satisfy the level's pins fails the cell.

Workloads are the MongoDB family's `threads_variant`/`async_variant` and the PostgreSQL family's `run_variant`,
the code behind mongo_models and pg_models: the same measurement, only the conditions vary.

Variant ids: `<family>_<model>[python=3.12,placement=split,rtt_ms=0]` (mongo models: threads,
async); cell ids: `<family>[python=...,placement=...,rtt_ms=...]`; a driver level other than `lock`
adds `driver=<level>` (`driver=pymongo-4.18.2`, `driver=psycopg-3.3.6+asyncpg-0.31.0`).
Tables:
- `windows`: variant, cell, family, model, kind (threads | async), python (the factor level),
  python_version, python_build (gil | free-threaded), gil_enabled, python_executable, venv_mode,
  driver (the driver level: `lock` or the level's label), pymongo_version, motor_version,
  psycopg_version, psycopg_binary_version, psycopg_pool_version, asyncpg_version, uvloop_version
  (read back in the child; None where not installed),
  placement, server_cpus, client_cpus, rtt_ms, via_proxy, position (cell's place in the repeat),
  model_position, wall_s, cpu_s, cpu_user_s, cpu_system_s, cpu_wait_s, ops, completed (successful
  requests that ended in the window, `measure.completions_in_window`: the count behind throughput
  and CPU per request), errors, server_cpu_s (pg: the
  postmaster and its descendants; NaN for mongo), machine_busy_s and cpu_check (pg: cpu_s,
  server_cpu_s and machine_busy_s read by this process at the window's edges, `measure.EdgeCPU`;
  the child's own readings kept as cpu_child_s, server_cpu_child_s; NaN / '' for mongo),
  duration_s, workers, pool_size.
- `samples`: variant, cell, family, model, python, python_version, python_build, placement,
  rtt_ms, driver, task, start_s, latency_s, ok, error.
- `placements`: cell, position, placement, server_cpus, client_cpus, client_affinity (the child's
  `sched_getaffinity`), client_affinity_proc (its /proc status `Cpus_allowed_list`),
  server_affinity (JSON pid -> cores, read back), servers_pinned.
- `failures`: variant (one row per variant of a failed cell), cell, error, returncode, log_tail.
Notes: `interpreters`, `free_threaded`, `seed_python` (whether the seeds' Python 3.14 is installed
here), `drivers` (each level: pins, venv or the reason it was skipped), `latency`, `order`,
`ferretdb_backend_index`.
"""

from __future__ import annotations

import importlib.util
import json
import random
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pandas as pd

from ...core import datasets, interpreters, network, placement, processes, servers
from ...core.errors import HarnessError
from ...core.measure import EdgeCPU
from ...core.probe import GIL_COLUMNS
from ...core.servers import ServerStack
from ..analysis import CPU_REJECTED_METRIC, put_cpu_rejected
from ..base import Context, Experiment, Metric, Params, variant_id, window_columns
from ..mongo.workload import DOCUMENTS, ferretdb_backend_index, note_timeouts
from ..postgres.workload import MODELS as PG_MODELS
from ..postgres.workload import cpu_at_edges, find_postmaster
from .analysis import FACTORS, cells, effect_by_repeat, factor_cells, levels, windows

FAMILIES = ("mongo", "pg")
MONGO_MODELS = ("threads", "async")
CHILD_OVERHEAD_S = 60.0
# The seeds' interpreter (claims ledger 001-ctx-01, 002-ctx-02): measured only where installed.
SEED_PYTHON = "3.14"
# The packages a driver level may pin, and the family whose cells they shape.
DRIVER_FAMILIES = {"pymongo": "mongo", "motor": "mongo", "psycopg": "pg", "psycopg-binary": "pg",
                   "psycopg-pool": "pg", "asyncpg": "pg", "uvloop": "pg"}
# The seeds' versions (claims ledger 000-ctx-02: PyMongo 4.15; 001-ctx-02: 4.18.2; 002-ctx-03:
# psycopg 3.3.6, asyncpg 0.31.0 and uvloop 0.23.0, which is the lock's own).
SEED_DRIVERS = ("pymongo=4.15.*", "pymongo=4.18.2", "psycopg=3.3.6+asyncpg=0.31.0")
LOCK_LEVEL = "lock"
VERSION_COLUMNS = {name: name.replace("-", "_") + "_version" for name in interpreters.DRIVERS}


@dataclass(frozen=True)
class DriverLevel:
    """One level of the driver factor: `spec` as normalised (`psycopg=3.3.6+asyncpg=0.31.0`)."""

    spec: str
    family: str
    pins: tuple[tuple[str, str], ...]   # (package, version), psycopg-binary following psycopg

    @property
    def label(self) -> str:
        """`pymongo-4.18.2`: the level in variant ids and tables."""
        return self.spec.replace("=", "-")

    def pin_dict(self) -> dict[str, str]:
        return dict(self.pins)


def _parse_pin(entry: str, pin: str) -> tuple[str, str]:
    name, sep, version = pin.partition("=")
    version = version[1:] if version.startswith("=") else version  # NAME==VERSION as pip writes it
    name = interpreters.canonical(name.strip())
    if not sep or not name or not version.strip():
        raise HarnessError(f"parameter drivers: entry {entry!r}: expected NAME=VERSION pins joined by +, "
                           f"e.g. pymongo=4.18.2 or psycopg=3.3.6+asyncpg=0.31.0")
    if name not in DRIVER_FAMILIES:
        raise HarnessError(f"parameter drivers: entry {entry!r}: {name} is not a driver here "
                           f"(one of {', '.join(DRIVER_FAMILIES)})")
    try:
        interpreters.check_pin(name, version.strip())
    except HarnessError as e:
        raise HarnessError(f"parameter drivers: entry {entry!r}: {e}") from None
    return name, version.strip()


def parse_drivers(entries: tuple[str, ...]) -> list[DriverLevel]:
    """The levels of `drivers` (module docstring); a one-line HarnessError naming a malformed entry."""
    levels: list[DriverLevel] = []
    for raw in entries:
        entry = str(raw).strip()
        if not entry:
            continue
        if "=" not in entry:  # a bare version: the package of the entry before it
            if not levels or len(levels[-1].spec.split("+")) != 1:
                raise HarnessError(f"parameter drivers: entry {entry!r} names no package: write NAME=VERSION "
                                   "(pymongo=4.18.2); a bare version repeats the package of a one-pin "
                                   "entry before it")
            entry = f"{levels[-1].spec.split('=')[0]}={entry}"
        pins = [_parse_pin(entry, pin) for pin in entry.split("+")]
        names = [n for n, _ in pins]
        if len(set(names)) != len(names):
            raise HarnessError(f"parameter drivers: entry {entry!r} pins a package twice")
        families = {DRIVER_FAMILIES[n] for n in names}
        if len(families) != 1:
            raise HarnessError(f"parameter drivers: entry {entry!r} pins packages of both families "
                               "(mongo: pymongo, motor; pg: psycopg, psycopg-pool, asyncpg, uvloop); "
                               "give each family its own levels")
        full = dict(pins)
        if "psycopg" in full and "psycopg-binary" not in full:
            full["psycopg-binary"] = full["psycopg"]
        levels.append(DriverLevel("+".join(f"{n}={v}" for n, v in pins), families.pop(), tuple(full.items())))
    return levels


@dataclass(frozen=True)
class DeparturesParams(Params):
    pythons: tuple[str, ...] = ("3.11", "3.12", "3.13")
    free_threaded: bool = True                    # threads models also on free-threaded builds found
    placements: tuple[str, ...] = ("shared", "split")
    rtts_ms: tuple[float, ...] = (0.0, 1.0, 5.0)  # added round trip through the proxy
    families: tuple[str, ...] = FAMILIES
    duration_s: float = 2.0
    warmup_s: float = 0.5
    documents: int = DOCUMENTS["seed"]
    mongo_threads: int = 32
    mongo_tasks: int = 200
    mongo_pool: int = 10
    pg_models: tuple[str, ...] = ("threads_psycopg", "asyncio_psycopg", "uvloop_asyncpg")
    pg_clients: int = 200
    pg_pool: int = 20
    rows: int = 100_000
    seed: int = 1
    timeout_s: float = 1800.0
    # the driver factor (module docstring): levels besides `lock`, and the interpreter they run on
    # ("" = the first of `pythons`)
    drivers: tuple[str, ...] = SEED_DRIVERS
    driver_python: str = ""

    def __post_init__(self) -> None:
        # normalised (`pymongo=4.15.*,4.18.2` -> two full entries), so the plan and the manifest
        # list each level whole; a malformed entry is a HarnessError naming it
        object.__setattr__(self, "drivers", tuple(lv.spec for lv in parse_drivers(tuple(self.drivers))))

    def validate(self) -> None:
        super().validate()
        self.require_positive("duration_s", "documents", "mongo_threads", "mongo_tasks", "mongo_pool",
                              "pg_clients", "pg_pool")
        self.require_non_negative("rtts_ms")
        self.require_choice("placements", placement.PLACEMENTS)
        self.require_choice("families", FAMILIES)
        self.require_choice("pg_models", PG_MODELS)
        for name in ("pythons", "placements", "rtts_ms", "families"):
            if not getattr(self, name):
                raise HarnessError(f"parameter {name} must name at least one value")
        if "threads_psycopg" not in self.pg_models or len(self.pg_models) < 2:
            raise HarnessError("parameter pg_models must hold threads_psycopg and at least one async model")
        if getattr(self, "via_proxy", False) or getattr(self, "rtt_ms", 0.0):
            raise HarnessError("departures sets the round trip itself (rtts_ms): leave via_proxy/rtt_ms unset")
        if self.rows < 2:
            raise HarnessError(f"parameter rows must be at least 2, got {self.rows}")
        for r in self.pythons:
            interpreters.resolve(r)  # an interpreter that is not installed fails before anything starts
        if self.drivers:
            labels = {interpreters.resolve(r).label for r in self.pythons}
            if interpreters.resolve(self.driver_python or self.pythons[0]).label not in labels:
                raise HarnessError(f"parameter driver_python {self.driver_python} must be one of pythons "
                                   f"({', '.join(self.pythons)}): the driver levels are compared with the "
                                   "lock level on the same interpreter")

    def driver_levels(self) -> list[DriverLevel]:
        """The levels of the measured families (a level of a family not in `families` is not run)."""
        return [lv for lv in parse_drivers(self.drivers) if lv.family in self.families]

    def driver_interpreter(self) -> interpreters.Interpreter:
        return interpreters.resolve(self.driver_python or self.pythons[0])


@dataclass(frozen=True)
class Cell:
    family: str
    python: str        # factor level label: "3.12", "3.13t"
    placement: str
    rtt_ms: float
    models: tuple[str, ...]
    driver: str = LOCK_LEVEL  # the driver level's label

    def _params(self) -> dict:
        return {"python": self.python, "placement": self.placement, "rtt_ms": f"{self.rtt_ms:g}",
                **({"driver": self.driver} if self.driver != LOCK_LEVEL else {})}

    @property
    def id(self) -> str:
        return variant_id(self.family, **self._params())

    def variant(self, model: str) -> str:
        return variant_id(f"{self.family}_{model}", **self._params())


def model_kind(model: str) -> str:
    return "threads" if model.startswith("threads") else "async"


class Departures(Experiment):
    name = "departures"
    title = "What explains the departures from the seeds: interpreter x placement x server latency"
    needs = ("mongodb", "postgres")
    params_type = DeparturesParams
    analysis: ClassVar[str] = "harness.experiments.departures.analysis"
    family = "departures"
    ceiling = None
    drivers = ("pymongo", "psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
    notebook = "05_departures.ipynb"
    repeats: ClassVar[dict[str, int]] = {"full": 3, "seed": 3, "quick": 1, "smoke": 1}
    # as harness.experiments.departures.analysis names them; one cpu_ratio_<async model> per async model measured
    # (these two run in every profile; cpu_ratio_uvloop_asyncpg too where pg_models holds it). A ratio is
    # judged against the seed's, so neither direction is better.
    headline = (Metric("cpu_ratio_async", "ratio", ""), Metric("cpu_ratio_asyncio_psycopg", "ratio", ""),
                Metric("ratio_change", "ratio", ""), Metric("cpu_us_per_req", "us", "lower"))
    _factors = {"cell": "str", "family": "str", "python": "str", "python_version": "str",
                "python_build": "str", "placement": "str", "rtt_ms": "float", "driver": "str", "model": "str"}
    tables = {
        "windows": window_columns(**_factors, kind="str", gil_enabled="bool", python_executable="str",
                                  venv_mode="str", **dict.fromkeys(VERSION_COLUMNS.values(), "str"),
                                  server_cpus="str", client_cpus="str", via_proxy="bool",
                                  position="int", model_position="int", completed="int", errors="int",
                                  server_cpu_s="float", machine_busy_s="float", cpu_check="str",
                                  cpu_child_s="float", server_cpu_child_s="float",
                                  duration_s="float", workers="int", pool_size="int"),
        "samples": {"variant": "str", **_factors, "task": "int", "start_s": "float", "latency_s": "float",
                    "ok": "bool", "error": "any"},
        # PostgreSQL cells: the GIL probe's wake-ups, alone before the models (phase `floor`, no
        # model) and inside each model's window (`window`; offsets from its opening)
        "gil": {"variant": "str", **_factors, "phase": "str", **GIL_COLUMNS},
        "placements": {"cell": "str", "position": "int", "placement": "str", "server_cpus": "str",
                       "client_cpus": "str", "client_affinity": "str", "client_affinity_proc": "str",
                       "server_affinity": "str", "servers_pinned": "int"},
        "routes": {"cell": "str", "record": "str"},
        "failures": {"variant": "str", "cell": "str", "error": "str", "returncode": "any", "log_tail": "str"},
    }
    profiles = {
        "seed": {},
        "full": {"rtts_ms": (0.0, 5.0), "duration_s": 1.0, "warmup_s": 0.3, "documents": DOCUMENTS["full"],
                 "timeout_s": 900.0},
        "quick": {"pythons": ("3.11", "3.13"), "rtts_ms": (0.0, 5.0), "duration_s": 0.5, "warmup_s": 0.2,
                  "documents": DOCUMENTS["quick"], "pg_clients": 100, "timeout_s": 900.0, "drivers": ()},
        # the driver factor at smoke size: tests/test_driver_versions.py (two PyMongo versions)
        "smoke": {"pythons": ("3.11", "3.12"), "rtts_ms": (0.0, 1.0), "duration_s": 0.3, "warmup_s": 0.1, "drivers": (),
                  "documents": DOCUMENTS["smoke"], "mongo_threads": 4, "mongo_tasks": 20, "mongo_pool": 4,
                  "pg_models": ("threads_psycopg", "asyncio_psycopg"), "pg_clients": 8, "pg_pool": 4,
                  "rows": 10_000, "timeout_s": 300.0},
    }

    metrics = (Metric("cpu_us_per_req", "us", "lower"), Metric("throughput_rps", "req/s", "higher"),
               Metric("gil_wait_ms", "ms", "lower"), Metric("cpu_ratio_{model}", "ratio", ""),
               Metric("ctx_vol_per_req", "switches", ""), Metric("ctx_invol_per_req", "switches", ""),
               Metric("ratio_change", "ratio", ""), Metric("threads_cpu_change", "ratio", "lower"),
               Metric("async_cpu_change", "ratio", "lower"), CPU_REJECTED_METRIC)

    def compute_metrics(self, run, rows) -> None:
        w = windows(run)
        put_cpu_rejected(rows, w)
        for _, r in w.iterrows():
            for q in ("cpu_us_per_req", "throughput_rps", "gil_wait_ms", "ctx_vol_per_req", "ctx_invol_per_req"):
                rows.put(r["variant"], q, r["repeat"], r[q])
        c = cells(run)
        for _, r in c.iterrows():
            rows.put(r["cell"], f"cpu_ratio_{r['model']}", r["repeat"], r["cpu_ratio"])
        if c.empty:
            return
        for (family, model), fam in c.groupby(["family", "model"], sort=False):
            for factor in FACTORS:
                g = factor_cells(fam, factor)
                if g.empty:
                    continue
                base, others = levels(g, factor)
                for level in others:
                    v = variant_id(f"{family}_{model}", factor=factor, level=level)
                    for q, name in (("cpu_ratio", "ratio_change"), ("threads_cpu_us", "threads_cpu_change"),
                                    ("async_cpu_us", "async_cpu_change")):
                        for rep, val in effect_by_repeat(g, factor, base, level, q).items():
                            rows.put(v, name, rep, val)

    def datasets(self, p: DeparturesParams) -> list:
        out: list[datasets.Dataset] = []
        if "mongo" in p.families:
            out.append(datasets.Orders(p.documents))
        if "pg" in p.families:
            out.append(datasets.Accounts(p.rows))
        return out

    def prepare(self, p: DeparturesParams, log=None) -> dict:
        """Build every interpreter's venv and every driver level's (downloads, CPU): the study calls
        this before servers start. A level that cannot be installed is recorded with its reason (the
        repeats skip it); keys: the interpreter's label, `<label> <driver level>` for a level."""
        venvs = interpreters.prepare(list(p.pythons), log=log)
        ft = interpreters.free_threaded() if p.free_threaded else []
        for i in ft:
            interpreters.ensure_venv(i, log=log)
        out = {v.interpreter.label: v.record() for v in venvs}
        if p.driver_levels():
            interp = p.driver_interpreter()
            for lv in p.driver_levels():
                key = f"{interp.label} {lv.label}"
                if interpreters.is_locked(interp, lv.pin_dict()):
                    out[key] = {"pins": lv.pin_dict(), "same_as": LOCK_LEVEL}
                    continue
                try:
                    out[key] = interpreters.ensure_pinned_venv(interp, lv.pin_dict(), log=log).record()
                except interpreters.PinUnavailable as e:
                    out[key] = {"pins": lv.pin_dict(), "skipped": str(e)}
        return out

    def _driver_venvs(self, ctx: Context, p: DeparturesParams) -> tuple[list[DriverLevel], dict, dict]:
        """(levels to run, label -> venv, label -> why skipped): looked up, never built, here."""
        levels, venvs, skipped, note = [], {}, {}, {}
        if p.driver_levels():
            interp = p.driver_interpreter()
            for lv in p.driver_levels():
                rec: dict = {"family": lv.family, "pins": lv.pin_dict(), "python": interp.label}
                if interpreters.is_locked(interp, lv.pin_dict()):
                    note[lv.label] = {**rec, "same_as": LOCK_LEVEL,
                                      "why": "the lock's own versions: measured as the lock level"}
                    continue
                levels.append(lv)
                try:
                    venvs[lv.label] = interpreters.ensure_pinned_venv(interp, lv.pin_dict(), build=False)
                    note[lv.label] = {**rec, "venv": venvs[lv.label].record()}
                except interpreters.PinUnavailable as e:
                    skipped[lv.label] = str(e)
                    note[lv.label] = {**rec, "skipped": str(e)}
        ctx.note("drivers", note or "no driver level besides the lock's versions")
        return levels, venvs, skipped

    def run(self, ctx: Context) -> None:
        p: DeparturesParams = ctx.params
        stack: ServerStack = ctx.servers
        if "mongo" in p.families:
            note_timeouts(ctx)
        venvs = {v.interpreter.label: v for v in interpreters.prepare(list(p.pythons), build=False)}
        ft = interpreters.free_threaded() if p.free_threaded else []
        for i in ft:
            venvs[i.label] = interpreters.ensure_venv(i, build=False)
        ctx.note("interpreters", {k: v.record() for k, v in venvs.items()})
        ctx.note("free_threaded", [i.record() for i in ft] if ft else
                 "no free-threaded build is installed on this machine (PATH, pyenv, uv); none was "
                 "downloaded, so the threads models ran on GIL builds only")
        ctx.note("seed_python", _seed_python(venvs))
        levels, driver_venvs, unavailable = self._driver_venvs(ctx, p)
        with _proxy(stack) as stack:
            ctx.servers = stack
            self._run_cells(ctx, p, stack, venvs, ft, (levels, driver_venvs, unavailable))

    def _run_cells(self, ctx: Context, p: DeparturesParams, stack: ServerStack, venvs: dict, ft: list,
                   drivers: tuple[list[DriverLevel], dict, dict]) -> None:
        proxy = stack.toxiproxy is not None
        rtts = p.rtts_ms if proxy else (0.0,)
        ctx.note("latency", {"factor": "added round trip through the proxy (harness.core.network)",
                             "levels_ms": list(rtts), "via_proxy": proxy} if proxy else
                 {"factor": "missing", "levels_ms": [0.0], "via_proxy": False,
                  "reason": "harness.core.network or the Toxiproxy binary is not available: only rtt 0 "
                            "(direct loopback) was measured"})
        levels, driver_venvs, unavailable = drivers
        cells = self._cells(p, venvs, ft, rtts, ctx.repeat, levels)
        ctx.note("order", [c.id for c in cells])
        # every core the client or the servers may use now (a study run with --placement split has
        # already narrowed this process to the client's half)
        cpus = sorted(set(placement.allowed_cpus()).union(*placement.servers_affinity(stack).values()))
        ctx.note("cpus", cpus)
        index = ferretdb_backend_index(ctx, True) if "mongo" in p.families else nullcontext()
        with index:
            try:
                for pos, cell in enumerate(cells):
                    if cell.driver in unavailable:  # the level did not install: a skip, not a failure
                        for m in cell.models:
                            ctx.skip(cell.variant(m), unavailable[cell.driver])
                        continue
                    venv = venvs[cell.python] if cell.driver == LOCK_LEVEL else driver_venvs[cell.driver]
                    level = next((lv for lv in levels if lv.label == cell.driver), None)
                    self._run_cell(ctx, cell, pos, venv, cpus, proxy, level)
            finally:
                placement.apply(stack, "shared", cpus)  # servers back on every core

    def _cells(self, p: DeparturesParams, venvs: dict, ft: list, rtts: tuple[float, ...],
               repeat: int, levels: list[DriverLevel] | None = None) -> list[Cell]:
        cells = []
        for family in p.families:
            models = MONGO_MODELS if family == "mongo" else p.pg_models
            models = tuple(reversed(models)) if repeat % 2 else tuple(models)
            threads_only = tuple(m for m in models if model_kind(m) == "threads")
            labels = [interpreters.resolve(r).label for r in dict.fromkeys(p.pythons)]
            for label in dict.fromkeys(labels):
                for pl in p.placements:
                    for rtt in rtts:
                        cells.append(Cell(family, label, pl, rtt, models))
            for i in ft:
                for pl in p.placements:
                    for rtt in rtts:
                        cells.append(Cell(family, i.label, pl, rtt, threads_only))
            own = [lv for lv in levels or [] if lv.family == family]
            driver_python = p.driver_interpreter().label if own else ""
            for lv in own:  # the driver levels: on driver_python, in every placement x rtt
                for pl in p.placements:
                    for rtt in rtts:
                        cells.append(Cell(family, driver_python, pl, rtt, models, lv.label))
        random.Random(f"{p.seed}:{repeat}").shuffle(cells)
        return cells

    def _run_cell(self, ctx: Context, cell: Cell, pos: int, venv: interpreters.Venv, cpus: list[int],
                  proxy: bool, level: DriverLevel | None = None) -> None:
        p: DeparturesParams = ctx.params
        stack: ServerStack = ctx.servers
        try:
            rec = placement.apply(stack, cell.placement, cpus)
        except HarnessError as e:  # servers not on this machine, or one core: split cannot be measured
            for m in cell.models:
                ctx.skip(cell.variant(m), str(e))
            return
        with _route(stack, cell, proxy) as route:
            spec = {"family": cell.family, "models": list(cell.models), "cell": cell.id,
                    "variants": {m: cell.variant(m) for m in cell.models},
                    "client_cpus": rec["client_cpus"], "params": p.to_dict(),
                    "mongodb_uri": route.stack.mongodb_uri if cell.family == "mongo" else None,
                    "dsn": route.stack.postgres_dsn if cell.family == "pg" else None,
                    "postmaster_pid": (find_postmaster(stack.postgres_dsn, stack.postgres.pids)[0]
                                       if cell.family == "pg" else None)}
            child = self._child(ctx, venv, spec, pos)
            via_proxy = bool(route.record.get("via_proxy", proxy)) if isinstance(route.record, dict) else proxy
            if isinstance(route.record, dict) and route.record:
                ctx.record("routes", [{"cell": cell.id, "record": json.dumps(route.record)}])
        if child.error is not None or child.result is None:
            error = child.error or "the child wrote no result"
            # one row per variant of the cell: the worker marks each of them failed (contract C2)
            ctx.record("failures", [{"variant": cell.variant(m), "cell": cell.id, "error": error,
                                     "returncode": child.returncode, "log_tail": child.log_tail}
                                    for m in cell.models])
            ctx.log.warning("%s failed: %s", cell.id, error)
            return
        result = child.result
        runtime = result["runtime"]
        versions = result.get("drivers") or {}
        wrong = [f"{n} {versions.get(n) or 'not installed'} (the level pins {n}=={v})"
                 for n, v in (level.pins if level else ()) if not interpreters.pin_matches(versions.get(n), v)]
        if wrong:  # the venv is not what the level asks for: no figure of this level from it
            error = f"the child read back {', '.join(wrong)} from {venv.python}"
            ctx.record("failures", [{"variant": cell.variant(m), "cell": cell.id, "error": error,
                                     "returncode": child.returncode, "log_tail": child.log_tail}
                                    for m in cell.models])
            ctx.log.warning("%s failed: %s", cell.id, error)
            return
        factors = {"cell": cell.id, "family": cell.family, "python": cell.python,
                   "python_version": runtime["python"], "python_build": runtime["python_build"],
                   "placement": cell.placement, "rtt_ms": cell.rtt_ms, "driver": cell.driver}
        ctx.record("placements", [{
            "cell": cell.id, "position": pos, "placement": cell.placement,
            "server_cpus": _cpus(rec["server_cpus"]), "client_cpus": _cpus(rec["client_cpus"]),
            "client_affinity": _cpus(result["client_affinity"]),
            "client_affinity_proc": _cpus(result["client_affinity_proc"]),
            "server_affinity": json.dumps(rec["server_affinity"]), "servers_pinned": len(rec["server_affinity"])}])
        for k, (model, w) in enumerate(result["windows"].items()):
            ctx.record("windows", [{
                "variant": cell.variant(model), **factors, "model": model, "kind": model_kind(model),
                "gil_enabled": runtime["gil_enabled"], "python_executable": runtime["python_executable"],
                "venv_mode": venv.mode, **{col: versions.get(n) for n, col in VERSION_COLUMNS.items()},
                "server_cpus": _cpus(rec["server_cpus"]),
                "client_cpus": _cpus(rec["client_cpus"]), "via_proxy": via_proxy, "position": pos,
                "model_position": k, "wall_s": w["wall_s"], "cpu_s": w["cpu_s"],
                "cpu_user_s": w["cpu_user_s"], "cpu_system_s": w["cpu_system_s"],
                "cpu_wait_s": float(w.get("cpu_wait_s", float("nan"))),
                "ctx_voluntary": int(w.get("ctx_voluntary", -1)), "ctx_involuntary": int(w.get("ctx_involuntary", -1)),
                "ops": int(w["ops"]),
                "completed": int(w["completed"]), "errors": int(w.get("errors", 0)),
                "server_cpu_s": float(w.get("server_cpu_s", float("nan"))),
                **{k: w.get(k, float("nan")) for k in ("machine_busy_s", "cpu_child_s", "server_cpu_child_s")},
                "cpu_check": w.get("cpu_check", ""),
                "duration_s": p.duration_s, "workers": int(w["workers"]), "pool_size": int(w["pool_size"])}])
            s = pd.DataFrame(result["samples"][model])
            for key, value in {"variant": cell.variant(model), **factors, "model": model}.items():
                s[key] = value
            ctx.record("samples", s.astype({"task": "int32", "ok": "bool"}))
            gil = result.get("gil", {}).get(model)
            if gil:
                ctx.record("gil", [{"variant": cell.variant(model), **factors, "model": model, "phase": "window", **r}
                                   for r in gil])
        if result.get("gil_floor"):
            ctx.record("gil", [{"variant": cell.id, **factors, "model": "", "phase": "floor", **r}
                               for r in result["gil_floor"]])

    def _child(self, ctx: Context, venv: interpreters.Venv, spec: dict, pos: int) -> processes.ChildOutcome:
        """The cell's client process on the cell's interpreter (harness.experiments.departures.child). A
        PostgreSQL cell's windows get their client, server and machine CPU read here, at each
        window's edges (`postgres.workload.cpu_at_edges`), as pg_models' do: the child's own readings
        queue behind its clients."""
        p: DeparturesParams = ctx.params
        timeout = len(spec["models"]) * (p.warmup_s + p.duration_s) + CHILD_OVERHEAD_S
        postmaster = spec.get("postmaster_pid")
        with tempfile.TemporaryDirectory(prefix="departures-") as tmp, \
                EdgeCPU({"server": (postmaster, True)}) as cpu:
            child = processes.run_child(f"departures:{spec['cell']}", "harness.experiments.departures.child", spec,
                                        result_path=Path(tmp) / "out.json",
                                        log_path=ctx.artifacts / f"{pos:03d}_{spec['family']}.log",
                                        timeout_s=timeout, env=interpreters.child_env(), python=venv.python,
                                        tail_lines=30, on_start=lambda pid: cpu.add("client", pid))
        if spec["family"] == "pg" and child.result is not None:
            for w in child.result.get("windows", {}).values():
                if "edges" in w:
                    w.update(cpu_at_edges(cpu, w, postmaster is not None))
        return child


def _seed_python(venvs: dict) -> dict:
    """Whether the seeds' interpreter is installed here (found, never downloaded) and measured."""
    try:
        interp = interpreters.resolve(SEED_PYTHON)
    except HarnessError as e:
        return {"version": SEED_PYTHON, "installed": False, "measured": False,
                "note": f"no Python {SEED_PYTHON} is installed on this machine (PATH, pyenv, uv); none was "
                        f"downloaded, so the seeds' interpreter was not measured", "error": str(e)}
    return {"version": SEED_PYTHON, "installed": True, "measured": interp.label in venvs,
            "interpreter": interp.record(),
            "note": f"Python {interp.version} is installed ({interp.path})" + (
                "" if interp.label in venvs else f"; add it to pythons to measure it (--set "
                f"departures.pythons=...,{SEED_PYTHON})")}


def _cpus(cpus) -> str:
    return ",".join(str(c) for c in cpus)


@contextmanager
def _proxy(stack: ServerStack) -> Iterator[ServerStack]:
    """The stack with a Toxiproxy (one started for this repeat if the stack has none), or without
    one when harness.core.network or the binary is missing (the latency factor is then not measured)."""
    if getattr(stack, "toxiproxy", None) is not None:
        yield stack
        return
    if importlib.util.find_spec("harness.core.network") is None or servers.toxiproxy_binary() is None:
        yield stack
        return
    with servers.provision((servers.PROXY,)) as pstack:
        yield replace(stack, toxiproxy=pstack.toxiproxy)


def _route(stack: ServerStack, cell: Cell, proxy: bool):
    if not proxy:
        return nullcontext(types.SimpleNamespace(stack=stack, record={}))
    needs = ("mongodb",) if cell.family == "mongo" else ("postgres",)
    return network.route(stack, needs, via_proxy=True, rtt_ms=cell.rtt_ms, jitter_ms=0.0)


EXPERIMENT = Departures()
