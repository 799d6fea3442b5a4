"""The one interface every experiment implements.

An experiment module in `harness/experiments/` defines a subclass of `Experiment` and exposes an
instance as the module-level name `EXPERIMENT`; the registry discovers it (no list to edit).

    @dataclass(frozen=True)
    class CursorParams(Params):
        documents: int = 100_000          # defaults are the `full` profile: the seed's own sizes
        batch_sizes: tuple[int, ...] = (100, 1000, 10000)
        def validate(self):
            super().validate(); self.require_positive("documents")

    class CursorStall(Experiment):
        name = "mongo_cursor"
        title = "Event-loop stalls while iterating a large cursor"
        needs = ("mongodb",)
        params_type = CursorParams
        profiles = {"full": {}, "quick": {"documents": 20_000}, "smoke": {"documents": 2_000}}
        def datasets(self, p): return [datasets.Orders(p.documents)]
        def run(self, ctx): ...            # measure, then ctx.record("samples", rows)

`run()` executes in a fresh worker process (see `harness.worker`), once per repeat. It measures and
records raw data only: no summaries, no printing (statistics live in `harness.stats`).

Conventions for recorded tables (Parquet, one file per table per repeat):
- `samples`: one row per operation: `variant` (str, from `variant_id()`), `task` (int, 0-based),
  `start_s` (float, seconds since the variant's measured window opened), `latency_s` (float),
  `ok` (bool), plus whatever else the experiment needs.
- `windows`: one row per measured window, written by `ctx.window()`: variant, wall_s, cpu_s,
  cpu_user_s, cpu_system_s, ops, and the window's own fields (pool size, concurrency, ...).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import typing
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Iterator

import pandas as pd
import psutil

from ..errors import HarnessError
from ..servers import ServerStack

PROFILES = ("smoke", "quick", "full")  # smoke: tiny sizes for the tests; full: the seeds' sizes


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


@dataclass(frozen=True)
class Params:
    """Base for an experiment's parameters. Defaults are the `full` profile.

    Subclasses add fields with type annotations (int, float, str, bool, or tuples of those) and
    extend `validate()`; every field can be overridden from the CLI with `--set name=value`.
    """

    warmup_s: float = 1.0        # excluded from every recorded figure
    timeout_s: float = 900.0     # the worker is stopped (and the repeat recorded as failed) past this

    def validate(self) -> None:
        self.require_non_negative("warmup_s")
        self.require_positive("timeout_s")

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
            return annotation(raw)
    except (TypeError, ValueError):
        raise HarnessError(f"parameter {name} must be {getattr(annotation, '__name__', annotation)}, "
                           f"got {raw!r}") from None
    return raw


class Experiment:
    name: ClassVar[str]
    title: ClassVar[str]
    needs: ClassVar[tuple[str, ...]]           # server roles: "mongodb", "postgres"
    params_type: ClassVar[type[Params]] = Params
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"full": {}, "quick": {}, "smoke": {}}

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
        """Datasets (from `harness.datasets`) to load before the first repeat; outside any timing."""
        return []

    def run(self, ctx: "Context") -> None:
        raise NotImplementedError


class Window:
    """A measured window: wall time and this process's CPU time between enter and exit."""

    def __init__(self, variant: str, fields: dict[str, Any]):
        self.variant = variant
        self.fields = fields
        self.ops = 0           # set by the experiment: operations completed inside the window
        self.t0 = 0.0          # perf_counter() at open; samples' start_s are relative to it

    def __enter__(self) -> "Window":
        self._proc = psutil.Process()
        self._cpu0 = self._proc.cpu_times()
        self._pt0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self._pt0
        cpu1 = self._proc.cpu_times()
        self.cpu_user_s = cpu1.user - self._cpu0.user
        self.cpu_system_s = cpu1.system - self._cpu0.system

    def row(self) -> dict[str, Any]:
        return {"variant": self.variant, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
                "cpu_user_s": self.cpu_user_s, "cpu_system_s": self.cpu_system_s, "ops": self.ops,
                **self.fields}


class Context:
    """What `Experiment.run()` gets: parameters, servers, and where to record."""

    def __init__(self, experiment: Experiment, params: Params, servers: ServerStack, out_dir: Path,
                 repeat: int, profile: str):
        self.experiment = experiment
        self.params = params
        self.servers = servers
        self.out_dir = out_dir
        self.repeat = repeat
        self.profile = profile
        self.notes: dict[str, Any] = {}
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
        self._tables.setdefault(table, []).append(df)

    def note(self, key: str, value: Any) -> None:
        """A JSON-serialisable fact about this repeat (stored in result.json and the manifest)."""
        self.notes[key] = value

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

    def write_tables(self) -> list[str]:
        written = []
        for table, parts in self._tables.items():
            df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            df.to_parquet(self.out_dir / f"{table}.parquet", index=False)
            written.append(table)
        return written
