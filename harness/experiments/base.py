"""The one interface every experiment implements.

An experiment module in `harness/experiments/` defines a subclass of `Experiment` and exposes an
instance as the module-level name `EXPERIMENT`; the registry discovers it (no list to edit).

    @dataclass(frozen=True)
    class CursorParams(Params):
        documents: int = 100_000          # defaults are the `seed` profile: the seed's own sizes
        batch_sizes: tuple[int, ...] = (100, 1000, 10000)
        def validate(self):
            super().validate(); self.require_positive("documents")

    class CursorStall(Experiment):
        name = "mongo_cursor"
        title = "Event-loop stalls while iterating a large cursor"
        needs = ("mongodb",)
        params_type = CursorParams
        profiles = {"seed": {}, "full": {"documents": 20_000}, "quick": {"documents": 20_000},
                    "smoke": {"documents": 2_000}}
        repeats = {"smoke": 1, "quick": 1, "full": 10, "seed": 10}
        analysis = "harness.experiments.mongo.analysis"            # the family's tables (notebooks)
        metrics = (Metric("max_stall_ms", "ms", "lower"), Metric("total_s", "s", "lower"))
        headline = (Metric("max_stall_ms", "ms", "lower"),)
        tables = {"samples": {"variant": "str", "latency_s": "float", "ok": "bool", ...},
                  "windows": window_columns(batch_size="int")}
        def datasets(self, p): return [datasets.Orders(p.documents)]
        def run(self, ctx):
            for pt in ctx.order(grid(method="iterate", batch_size=ctx.params.batch_sizes)):
                ...                        # measure variant_id(pt["method"], batch_size=...), then
                                           # ctx.record("samples", rows): checked against `tables`
        def compute_metrics(self, run, rows):
            for _, r in cursor_summary(run).iterrows():   # from its tables, ok cells only
                rows.put(r.variant, "max_stall_ms", r["repeat"], r.stall_max_ms)   # checked against `metrics`

`run()` executes in a fresh worker process (see `harness.running.worker`), once per repeat. It measures and
records raw data only: no summaries, no printing (statistics live in `harness.core.stats`).

Conventions for recorded tables (Parquet, one file per table per repeat):
- `samples`: one row per operation: `variant` (str, from `variant_id()`), `task` (int, 0-based),
  `start_s` (float, seconds since the variant's measured window opened), `latency_s` (float),
  `ok` (bool), plus whatever else the experiment needs.
- `windows`: one row per measured window, written by `ctx.window()`: variant, wall_s, cpu_s,
  cpu_user_s, cpu_system_s, cpu_wait_s (its threads' run-queue wait: `measure.thread_waits`),
  ctx_voluntary, ctx_involuntary (the process's context switches in the window), ops, and the window's
  own fields (pool size, concurrency, ...).
"""

from __future__ import annotations

import itertools
import logging
import math
import numbers as numbers_
import re
import typing
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd

from ..core.config import PROFILES
from ..core.errors import HarnessError
from ..core.measure import Window  # re-exported: experiments use base.Window
from ..core.servers import ServerStack, not_answering
from ..core.tables import write_table

T = TypeVar("T")



def variant_id(label: str, **params: Any) -> str:
    """The one way to name a variant: `pool[size=10,semaphore=on]`."""
    if not params:
        return label
    inner = ",".join(f"{k}={_fmt(v)}" for k, v in params.items())
    return f"{label}[{inner}]"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def grid(**axes: Any) -> list[dict[str, Any]]:
    """The one expansion of a parameter grid: every combination of the axes' values, the first axis
    varying slowest, as dicts ready for `variant_id(label, **point)`. A scalar is a one-value axis.

        grid(loop=("asyncio", "uvloop"), pool=(10, 20))
        -> [{"loop": "asyncio", "pool": 10}, {"loop": "asyncio", "pool": 20}, {"loop": "uvloop", ...}, ...]
    """
    names = list(axes)
    values = [tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in axes.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


@dataclass(frozen=True)
class Metric:
    """A figure an experiment declares (`Experiment.metrics`): its name, unit and better direction.
    A `{field}` in the name stands for one word of letters, digits and underscores
    (`openloop_r{k}_p99_ms`), for the figures a parameter multiplies."""

    name: str        # e.g. "max_stall_ms"
    unit: str        # e.g. "ms", "queries/s"
    better: str      # "higher", "lower", or "" where neither is better

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower", ""):
            raise ValueError(f"Metric {self.name}: better must be higher, lower or '', got {self.better!r}")

    def matches(self, metric: str) -> bool:
        if "{" not in self.name:
            return metric == self.name
        pattern = r"\w+".join(re.escape(part) for part in re.split(r"\{\w+\}", self.name))
        return re.fullmatch(pattern, metric) is not None


KINDS = ("str", "int", "float", "bool", "any")
OTHER_COLUMNS = "*"   # a schema key: columns beyond the declared ones are allowed (kind "any")


def window_columns(**fields: str) -> dict[str, str]:
    """The schema of a `windows` table: what `Context.window()` always writes, plus `fields`."""
    return {"variant": "str", "wall_s": "float", "cpu_s": "float", "cpu_user_s": "float",
            "cpu_system_s": "float", "cpu_wait_s": "float", "ctx_voluntary": "int", "ctx_involuntary": "int",
            "ops": "int", **fields}


def _kind_ok(series: pd.Series, kind: str) -> bool:
    values = series.dropna()
    if kind == "any" or values.empty:
        return True
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) or kind == "bool":
        return kind == "bool" and (pd.api.types.is_bool_dtype(dtype)
                                   or all(isinstance(v, (bool, np.bool_)) for v in values))
    numbers = all(isinstance(v, numbers_.Real) and not isinstance(v, (bool, np.bool_)) for v in values) \
        if pd.api.types.is_object_dtype(dtype) else pd.api.types.is_numeric_dtype(dtype)
    if kind == "float":
        return numbers
    if kind == "int":
        # a missing value turns an int column into floats (or objects): the values must stay whole
        return pd.api.types.is_integer_dtype(dtype) or (numbers and all(float(v).is_integer() for v in values))
    if kind == "str":
        return all(isinstance(v, str) for v in values)
    raise ValueError(f"unknown column kind {kind!r}; use one of {', '.join(KINDS)}")


def check_table(experiment: str, schemas: dict[str, dict[str, str]], table: str, df: pd.DataFrame) -> None:
    """Raise HarnessError naming the table and columns when `df` is off the declared schema."""
    if table not in schemas:
        raise HarnessError(f"{experiment} recorded table {table!r}, which it does not declare "
                           f"(declared: {', '.join(sorted(schemas)) or 'none'})")
    schema = schemas[table]
    declared = {c: k for c, k in schema.items() if c != OTHER_COLUMNS}
    missing = [c for c in declared if c not in df.columns]
    extra = [] if OTHER_COLUMNS in schema else [c for c in df.columns if c not in declared]
    wrong = [f"{c} (not {k})" for c, k in declared.items() if c in df.columns and not _kind_ok(df[c], k)]
    problems = [f"{label}: {', '.join(map(str, cols))}"
                for label, cols in (("missing", missing), ("undeclared", extra), ("wrong kind", wrong)) if cols]
    if problems:
        raise HarnessError(f"{experiment} table {table!r} is off its schema: {'; '.join(problems)}")


@dataclass(frozen=True)
class Params:
    """Base for an experiment's parameters. Defaults are the `seed` profile (the seeds' own sizes).

    Subclasses add fields with type annotations (int, float, str, bool, or tuples of those) and
    extend `validate()`; every field can be overridden from the CLI with `--set name=value`.
    """

    warmup_s: float = 1.0        # excluded from every recorded figure
    timeout_s: float = 900.0     # the worker is stopped (and the repeat recorded as failed) past this
    # The network path (harness.core.network, contract C4): through Toxiproxy, and the delay it adds to
    # each round trip (one downstream latency toxic of rtt_ms ± jitter_ms, whole milliseconds).
    via_proxy: bool = False
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0

    def validate(self) -> None:
        from ..core.network import check_setting

        self.require_non_negative("warmup_s")
        self.require_positive("timeout_s")
        check_setting(self.via_proxy, self.rtt_ms, self.jitter_ms)
        for f in fields(self):  # a list runs each entry as a variant: a repeated one would run twice
            values = getattr(self, f.name)
            if isinstance(values, tuple):
                twice = sorted({repr(v) for v in values if values.count(v) > 1})
                if twice:
                    raise HarnessError(f"parameter {f.name} lists {', '.join(twice)} more than once")

    # -- helpers for validate(): each names the parameter in its message
    def require_positive(self, *names: str) -> None:
        for n in names:
            values = getattr(self, n)
            for v in values if isinstance(values, tuple) else (values,):
                if not v > 0:
                    raise HarnessError(f"parameter {n} must be positive, got {v!r}")

    def require_non_negative(self, *names: str) -> None:
        for n in names:
            values = getattr(self, n)
            for v in values if isinstance(values, tuple) else (values,):
                if v < 0:
                    raise HarnessError(f"parameter {n} must be zero or more, got {v!r}")

    def require_choice(self, name: str, choices: tuple[str, ...]) -> None:
        values = getattr(self, name)
        for v in values if isinstance(values, tuple) else (values,):
            if v not in choices:
                raise HarnessError(f"parameter {name} must be one of {', '.join(choices)}; got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in fields(self)}


def _coerce(name: str, annotation: Any, raw: Any) -> Any:
    """Turn a CLI string (or JSON value) into the field's type, naming the field on failure."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(annotation)
        items = raw if isinstance(raw, (list, tuple)) else [x for x in str(raw).split(",") if x != ""]
        return tuple(_coerce(name, inner, x) for x in items)
    try:
        if annotation is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if annotation in (int, float, str):
            if annotation is int and isinstance(raw, str):
                return int(raw.replace("_", ""))
            value = annotation(raw)
            # float("nan") and float("inf") parse, but no duration, size or rate can be either
            if annotation is float and not math.isfinite(value):
                raise ValueError(raw)
            return value
    except (TypeError, ValueError):
        raise HarnessError(f"parameter {name} must be {getattr(annotation, '__name__', annotation)}, "
                           f"got {raw!r}") from None
    return raw


class Experiment:
    name: ClassVar[str]
    title: ClassVar[str]
    needs: ClassVar[tuple[str, ...]]           # server roles: "mongodb", "postgres"
    params_type: ClassVar[type[Params]] = Params
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"seed": {}, "full": {}, "quick": {}, "smoke": {}}
    # fraction of failed operations a cell tolerates (overload is itself the subject: fastapi)
    failure_tolerance: ClassVar[float] = 0.0
    # True if run() writes to a server: the study checkpoints and vacuums after it
    writes: ClassVar[bool] = False
    # False: not part of `harness study` (a check of the tooling); `harness run <name>` still runs it
    in_study: ClassVar[bool] = True
    # True: one pass after every other experiment's repeats, never repeated (`--repeat` included)
    after_repeats: ClassVar[bool] = False
    # Declarations read by the worker, the study, the summary and the tests (contract C5):
    tables: ClassVar[dict[str, dict[str, str]]] = {}   # table -> column -> kind (KINDS); checked by record()
    headline: ClassVar[tuple[Metric, ...]] = ()          # the figures the summary and report lead with
    metrics: ClassVar[tuple[Metric, ...]] = ()           # every figure compute_metrics puts (MetricRows checks)
    analysis: ClassVar[str] = ""                         # dotted path of the analysis module (its tables)
    # set by hand, stands for the code in the experiment's version (registry.version); "" = its code
    version: ClassVar[str] = ""
    # Traits, read by the code that must never parse the name (an experiment named otherwise keeps them):
    family: ClassVar[str] = ""                  # "postgres", "mongo", "fastapi", "departures", "verify", ...
    ceiling: ClassVar[str | None] = None        # the in-run ceiling (calibration) its throughputs are divided by
    drivers: ClassVar[tuple[str, ...]] = ()     # packages whose versions shape its figures (compare's checks)
    notebook: ClassVar[str] = ""                # the notebook (notebooks/) that shows it; "" for none
    # repeats per profile (`--repeat N` overrides): full and seed >= 3, 10 where a window is a few
    # seconds and the seed's claim hangs on it (pool, cursor, client, the PostgreSQL models);
    # quick is one repeat (a quick run stays within about 4 minutes)
    repeats: ClassVar[dict[str, int]] = {"smoke": 1, "quick": 1, "full": 3, "seed": 3}

    def params(self, profile: str, overrides: dict[str, Any] | None = None) -> Params:
        """The profile's parameters with `overrides` applied, validated."""
        if profile not in PROFILES:
            raise HarnessError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
        hints = typing.get_type_hints(self.params_type)
        known = {f.name for f in fields(self.params_type)}
        values = dict(self.profiles.get(profile, {}))
        for k, v in (overrides or {}).items():
            if k not in known:
                raise HarnessError(f"{self.name} has no parameter {k!r}; it has: {', '.join(sorted(known))}")
            values[k] = _coerce(k, hints[k], v)
        p = self.params_type(**values)
        p.validate()
        return p

    def datasets(self, params: Params) -> list:
        """Datasets (from `harness.core.datasets`) to load before the first repeat; outside any timing."""
        return []

    def run(self, ctx: Context) -> None:
        raise NotImplementedError

    def compute_metrics(self, run: Any, rows: Any) -> None:
        """Put this experiment's per-repeat figures of `run` (a `store.Run`) into `rows` (an
        `analysis.MetricRows` bound to this experiment and its declared `metrics`), from ok cells
        only. The summary and the claims read figures from here and nowhere else."""


class ServersDown(HarnessError):
    """A server the experiment needs stopped answering between two of its cells. The worker fails
    every remaining cell of the repeat at once with this one-line reason (which names the server
    and its address): without the check each cell waited out its own time-outs against the dead
    server, ~40 s apiece."""


class CellOrder(list):
    """The list `Context.order()` returns. Iterating it checks, before every item but the first,
    that the servers the experiment needs still answer, and raises `ServersDown` if one does not.
    The check runs between cells, never inside a measured window."""

    def __init__(self, items: Iterable[Any], check: Callable[[], str | None]):
        super().__init__(items)
        self._check = check

    def __iter__(self) -> Iterator[Any]:
        for k, item in enumerate(super().__iter__()):
            if k and (reason := self._check()):
                raise ServersDown(reason)
            yield item


class Context:
    """What `Experiment.run()` gets: parameters, servers, and where to record."""

    def __init__(self, experiment: Experiment, params: Params, servers: ServerStack, out_dir: Path,
                 repeat: int):
        self.experiment = experiment
        # Any: each experiment reads it as its own Params subclass (`p: PoolParams = ctx.params`)
        self.params: Any = params
        self.servers = servers
        self.out_dir = out_dir
        self.repeat = repeat      # 0-based; `order()` counterbalances variants with it
        self.notes: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}   # variant -> reason, from `skip()`
        self.log = logging.getLogger(f"harness.{experiment.name}")
        self._tables: dict[str, list[pd.DataFrame]] = {}

    @property
    def artifacts(self) -> Path:
        """A directory for raw files an external tool writes (Locust CSVs, pgbench logs)."""
        d = self.out_dir / "artifacts"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def record(self, table: str, rows: pd.DataFrame | list[dict] | dict[str, Any]) -> None:
        """Append rows to `table`; written as `<table>.parquet` when the repeat ends."""
        if not table.isidentifier():
            raise ValueError(f"table name must be an identifier, got {table!r}")
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        if self.experiment.tables:  # an experiment that declares no tables is caught by tests/test_registry.py
            check_table(self.experiment.name, self.experiment.tables, table, df)
        self._tables.setdefault(table, []).append(df)

    def note(self, key: str, value: Any) -> None:
        """A JSON-serialisable fact about this repeat (stored in result.json and the manifest)."""
        self.notes[key] = value

    def order(self, items: Iterable[T]) -> list[T]:
        """`items` in this repeat's order: as given on even repeats, reversed on odd ones, so that
        variants compared with each other run back to back and neither always runs first.
        Iterating the result checks the servers between items (`CellOrder`)."""
        out = list(items)
        return CellOrder(out[::-1] if self.repeat % 2 else out,
                         lambda: not_answering(self.servers, self.experiment.needs))

    def skip(self, variant: str, reason: str) -> None:
        """Mark `variant` skipped in this repeat (its cell is `skipped`, with `reason`)."""
        self.skipped[variant] = reason
        self.log.info("skipping %s: %s", variant, reason)

    @contextmanager
    def window(self, variant: str, **fields: Any) -> Iterator[Window]:
        """Measure wall and CPU time of the block and record it in the `windows` table."""
        w = Window(variant, fields)
        with w:
            yield w
        self.record("windows", [w.row()])

    def recorded(self, table: str) -> list[pd.DataFrame]:
        """What has been recorded so far in `table` (one frame per `record()` call)."""
        return list(self._tables.get(table, []))

    def recorded_tables(self) -> list[str]:
        """Names of the tables recorded so far."""
        return list(self._tables)

    def write_tables(self) -> list[str]:
        written = []
        for table, parts in self._tables.items():
            df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            write_table(df, self.out_dir / f"{table}.parquet")
            written.append(table)
        return written
