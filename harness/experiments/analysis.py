"""Raw tables -> summary tables and per-repeat metrics, per experiment family (used by notebooks,
the claims and the run summary).

Each experiment declares its figures (`Experiment.metrics`: name, unit, better direction) and
computes them (`Experiment.compute_metrics(run, rows)`) into a `MetricRows`, whose frame is one long
form, one row per figure and repeat (from ok cells only):

    experiment  str    e.g. "mongo_pool"
    variant     str    e.g. "bare"; "" for a figure of the experiment as a whole
    metric      str    e.g. "throughput_qps"
    unit        str    e.g. "queries/s", "ms", "count", "ratio"
    repeat      int    the repeat the value comes from: repeats are the unit of evidence, never
                       the per-operation samples of one window
    value       float
    better      str    "higher", "lower", or "" where neither is better
    bottleneck  str    the variant's measured limiting resource, where the experiment names one

The claims ledger refers to a figure by its dotted name `experiment.variant.metric`
(`experiment.metric` when variant is ""), which `metric_name()` builds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..core import stats
from ..core.errors import HarnessError
from ..core.measure import cpu_consistency
from .base import Metric

METRIC_COLUMNS = ("experiment", "variant", "metric", "unit", "repeat", "value", "better", "bottleneck")
BUSY = 0.9   # a resource at or above this fraction of its capacity is saturated (every family's rules)


def machine_limit(machine_pct: float, cores: float, users: dict[str, float]) -> str | None:
    """The rule every family's bottleneck shares for the whole machine: when it is >= BUSY busy,
    `database_cpu` if the database (key "database" of `users`, % of a core) is its largest user
    (of `users` and everything else on the machine), else `machine_cpu`; None when not busy."""
    if not machine_pct >= BUSY * 100.0 * cores:
        return None
    known = sum(v for v in users.values() if not math.isnan(v))
    everyone = {**users, "other": machine_pct - known}
    largest = max(everyone, key=lambda k: -1.0 if math.isnan(everyone[k]) else everyone[k])
    return "database_cpu" if largest == "database" else "machine_cpu"


def demand_pct(cpu_pct: float, wait_pct: float) -> float:
    """The CPU a process wanted (% of a core): what it ran plus how long its threads were runnable
    but waiting for a core (`measure.thread_waits`). Every family's client/app CPU rule compares
    this with the process's capacity; a wait not measured (NaN: older runs, no schedstat) counts 0,
    so such a rule reads CPU alone, as before the wait was measured."""
    return cpu_pct + (0.0 if math.isnan(wait_pct) else wait_pct)


def cores(run: Any) -> int:
    """Cores the run could use (a `store.Run`): its CPU affinity, else the machine's logical count."""
    machine = run.manifest.get("environment", {}).get("machine", {})
    affinity = machine.get("cpu_affinity")
    return len(affinity) if affinity else int(machine.get("cpu_count_logical") or 0)


# A window whose CPU readings do not fit the machine (`measure.cpu_consistency`: client + server <=
# machine <= cores x wall, within its tolerance) loses every CPU figure; each family counts such
# windows per repeat as `<experiment>.all.cpu_windows_rejected` (unit "windows", lower is better).
CPU_REJECTED = "cpu_windows_rejected"


def fit_cpu(client_s: float, server_s: float, machine_s: float, wall_s: float,
            cores: int) -> tuple[float, float, float, str]:
    """One window's (client, server, machine) CPU seconds and its check ('' when they fit the
    machine, else the broken inequality, `measure.cpu_consistency`): all three NaN when they do not
    fit, so no figure is built from them. Applied to the stored readings of every run, old ones
    included. A reading not measured (NaN) is left out of the check and stays NaN."""
    check = cpu_consistency(client_s, server_s, machine_s, wall_s, cores)
    if check:
        return math.nan, math.nan, math.nan, check
    return client_s, server_s, machine_s, ""


CPU_REJECTED_METRIC = Metric(CPU_REJECTED, "windows", "lower")   # declared by each experiment that puts it


def put_cpu_rejected(rows: MetricRows, table: pd.DataFrame) -> None:
    """`<experiment>.all.cpu_windows_rejected` per repeat: the windows of `table` (one row a window,
    with `repeat` and `cpu_check`) whose CPU readings did not fit the machine."""
    if table.empty or "cpu_check" not in table:
        return
    for rep, g in table.groupby("repeat"):
        rows.put("all", CPU_REJECTED, int(rep), int((g["cpu_check"].fillna("") != "").sum()))


def metric_name(experiment: str, variant: str, metric: str) -> str:
    """The dotted name the claims ledger uses for a figure."""
    return f"{experiment}.{variant}.{metric}" if variant else f"{experiment}.{metric}"


class MetricRows:
    """One experiment's per-repeat figures; `frame()` gives the long form above. Each figure's unit
    and better direction come from the experiment's declaration (`Experiment.metrics`): a name it
    does not declare is an error, never a guess. NaN and None are skipped."""

    def __init__(self, experiment: str, declared: Sequence[Metric]) -> None:
        self.experiment = experiment
        self._exact = {m.name: m for m in declared if "{" not in m.name}
        self._templates = [m for m in declared if "{" in m.name]
        self._rows: list[dict[str, Any]] = []

    def declared(self, metric: str) -> Metric:
        found = self._exact.get(metric) or next((m for m in self._templates if m.matches(metric)), None)
        if found is None:
            raise HarnessError(f"{self.experiment} puts figure {metric!r}, which its `metrics` do not declare")
        return found

    def put(self, variant: str, metric: str, repeat: Any, value: Any, bottleneck: str = "") -> None:
        declared = self.declared(metric)
        if value is None:
            return
        v = float(value)
        if math.isnan(v):
            return
        self._rows.append({"experiment": self.experiment, "variant": variant, "metric": metric,
                           "unit": declared.unit, "repeat": int(repeat), "value": v,
                           "better": declared.better, "bottleneck": bottleneck})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows, columns=list(METRIC_COLUMNS))


def named_medians(frame: pd.DataFrame) -> dict[str, float]:
    """{dotted name: median over repeats} of a metrics frame (`claims.named`, for printing figures)."""
    if frame.empty:
        return {}
    out = {}
    for (e, v, m), g in frame.groupby(["experiment", "variant", "metric"], sort=True):
        out[metric_name(e, v, m)] = stats.summarise(g["value"].to_numpy())["median"]
    return out


# -- the client's CPU per operation in its two parts ------------------------------------------------

CPU_PARTS = (("user", "cpu_user_s"), ("system", "cpu_system_s"))
PARTS = (*(part for part, _ in CPU_PARTS), "both")   # the figures each repeat gives


def _parts_by_repeat(windows: pd.DataFrame, keys: Sequence[str], n_cores: int,
                     done: str) -> pd.DataFrame:
    """Per group of `keys` and repeat, the median window's user and system µs per operation; windows
    whose CPU readings do not fit the machine (`fit_cpu`) are left out, as from every CPU figure."""
    rows = []
    for _, w in windows.iterrows():
        _, _, _, check = fit_cpu(float(w["cpu_s"]), float(w.get("server_cpu_s", math.nan)),
                                 float(w.get("machine_busy_s", math.nan)), float(w["wall_s"]), n_cores)
        if check:
            continue
        row = {k: w[k] for k in [*keys, "repeat"]}
        ops = int(w[done]) if pd.notna(w[done]) else 0   # nothing counted: NaN figures, not an error
        for part, col in CPU_PARTS:
            row[part] = stats.cpu_per_op_us(float(w[col]), ops)
        row["both"] = row["user"] + row["system"]
        rows.append(row)
    per_window = pd.DataFrame(rows, columns=[*keys, "repeat", *PARTS])
    return per_window.groupby([*keys, "repeat"], sort=True)[list(PARTS)].median().reset_index()


def cpu_parts(windows: pd.DataFrame, keys: Sequence[str], n_cores: int, done: str = "completed") -> pd.DataFrame:
    """The client's CPU per operation split into user and system (kernel) time, and both, per group
    of `keys` (e.g. regime, pool, model): in each repeat the median window's µs per operation, then
    over repeats `stats.summarise` (`<part>_us` the estimate, `<part>_us_low`/`_high` its interval),
    and the system part's share of both. Which part moves tells interpretation (user space) from
    system calls (kernel) when a CPU figure differs between machines (docs/RESULTS.md, 002-cpu).
    `windows`: a family's raw `windows` table with `repeat`, `wall_s`, `cpu_s`, `cpu_user_s`,
    `cpu_system_s` and the operations completed (`done`)."""
    by_repeat = _parts_by_repeat(windows, keys, n_cores, done)
    out = []
    for key, g in by_repeat.groupby(list(keys), sort=True):
        row: dict[str, Any] = dict(zip(keys, key))   # a list of keys groups by tuples
        for part in PARTS:
            s = stats.summarise(g.set_index("repeat")[part].to_dict())
            row.update({f"{part}_us": s["estimate"], f"{part}_us_low": s["ci_low"], f"{part}_us_high": s["ci_high"]})
        row["system_share"] = float((g["system"] / g["both"]).median())
        row["n_repeats"] = int(g["repeat"].nunique())
        out.append(row)
    return pd.DataFrame(out)


def cpu_parts_ratio(windows: pd.DataFrame, keys: Sequence[str], by: str, a: str, b: str, n_cores: int,
                    done: str = "completed") -> pd.DataFrame:
    """Per group of `keys`, option `a` over option `b` of column `by` (e.g. model threads_psycopg
    over uvloop_asyncpg) in user, system and both parts of the client's CPU per operation: paired by
    repeat (`stats.paired_ratio`: the geometric-mean ratio and its interval), from the per-repeat
    medians of `cpu_parts`."""
    by_repeat = _parts_by_repeat(windows, [*keys, by], n_cores, done)
    out = []
    for key, g in by_repeat.groupby(list(keys), sort=True):
        row: dict[str, Any] = dict(zip(keys, key))   # a list of keys groups by tuples
        sides = {opt: g[g[by] == opt].set_index("repeat") for opt in (a, b)}
        if sides[a].empty or sides[b].empty:
            continue
        for part in PARTS:
            r = stats.paired_ratio(sides[a][part].to_dict(), sides[b][part].to_dict())
            row.update({part: r["ratio"], f"{part}_low": r["ci_low"], f"{part}_high": r["ci_high"]})
            if part == "both":   # a window with both parts counts in each
                row["n_pairs"] = int(r["n_pairs"])
        out.append(row)
    return pd.DataFrame(out)
