"""The notebook kit: what every study notebook does, done one way, so a notebook reads
parameters -> load -> table -> plot.

    run = notebook.open_run(run_dir, notebook="01_mongo_cursor_pool.ipynb",
                            figures_dir=figures_dir, figure_formats=figure_formats)
    if notebook.has(run, "mongo_cursor"):                 # ran, with at least one ok cell
        display(notebook.headline(run, "mongo_cursor"))   # its headline metrics over repeats
        table = notebook.aggregate(mongo.cursor_summary(run), by="variant", values=["total_s"])
        fig, ax = plt.subplots(); ...
        notebook.save(fig, "mongo_cursor_summary", experiments=["mongo_cursor"])

- `open_run()` opens the run and remembers where this notebook's figures go;
- `has()` is the one way to ask whether an experiment ran with ok cells (it says why not, once);
- `aggregate()` turns one row per repeat into one row per group and figure: the median, the
  interval, the CV, n and the stability flag, all from `harness.stats.summarise` (never a mean of
  per-request samples: a repeat is the unit of evidence);
- `metrics()` / `headline()`: an experiment's per-repeat figures from its analysis module
  (`Experiment.analysis`), aggregated the same way;
- `show()` displays a table and also stores it in the executed notebook (a JSON output the
  report does not render), so tests can check the printed values against the run (`shown()`);
- `save()` wraps `figures.save_figure` with the run, notebook and parameters given to `open_run()`.
Figures are drawn from ok cells only (`Run.table` keeps those); `cells_note()` states how many.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import figures, registry, stats
from .errors import HarnessError
from .store import Run

SUMMARY_COLUMNS = ("n", "median", "ci_low", "ci_high", "cv", "unstable", "stability")
TABLE_MIME = "application/vnd.harness.table+json"
_told: set[str] = set()   # experiments `has()` has already explained


@dataclass
class _Session:
    run: Run
    notebook: str
    figures_dir: Path
    formats: tuple[str, ...]
    parameters: dict[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ("mongodb", "postgres")


_session: _Session | None = None


def open_run(run_dir: str | Path, *, notebook: str = "", figures_dir: str | Path = "../figures",
             figure_formats: str | Iterable[str] = figures.DEFAULT_FORMATS,
             roles: Sequence[str] = ("mongodb", "postgres"), **parameters: Any) -> Run:
    """The run at `run_dir`; later `save()` calls write to `figures_dir` in `figure_formats`,
    stamped with this run, `notebook` and the notebook's `parameters`."""
    global _session
    run = Run(Path(run_dir))
    _session = _Session(run, notebook, Path(figures_dir), figures.parse_formats(figure_formats),
                        {"run_dir": str(run_dir), **parameters}, tuple(roles))
    return run


def _current(run: Run | None = None) -> _Session:
    if _session is None or (run is not None and run is not _session.run):
        raise HarnessError("call notebook.open_run(run_dir, ...) first")
    return _session


def has(run: Run, experiment: str) -> bool:
    """True when `experiment` ran in `run` with at least one ok cell. Otherwise prints why, once."""
    entry = run.experiments.get(experiment)
    cells = run.cells(experiment) if entry is not None else pd.DataFrame()
    ok = bool(len(cells)) and bool((cells["status"] == "ok").any())
    if not ok and experiment not in _told:
        _told.add(experiment)
        why = ("not in this run" if entry is None else
               f"status {entry.get('status')}: {entry.get('error') or 'no ok cell'}")
        print(f"-- {experiment}: {why}; its sections are skipped")
    return ok


def cells_note(run: Run, experiment: str) -> str:
    """'12 of 12 cells ok (3 repeats)': what the figures of an experiment stand on."""
    cells = run.cells(experiment)
    ok = int((cells["status"] == "ok").sum())
    skipped = int((cells["status"] == "skipped").sum())
    return (f"{ok} of {len(cells)} cells ok" + (f", {skipped} skipped" if skipped else "")
            + f" ({cells['repeat'].nunique()} repeats)")


def aggregate(frame: pd.DataFrame, by: str | Sequence[str], values: str | Sequence[str]) -> pd.DataFrame:
    """One row per group of `by` and column of `values`, over the frame's repeats (one row per
    repeat and group): `stats.summarise` of the values -> n, median, ci_low, ci_high, cv, unstable,
    stability. Groups keep their first-seen order; `by=[]` is one group of every row."""
    by = [by] if isinstance(by, str) else list(by)
    values = [values] if isinstance(values, str) else list(values)
    if frame.empty:
        return pd.DataFrame(columns=[*by, "figure", *SUMMARY_COLUMNS])
    missing = [c for c in (*by, *values) if c not in frame.columns]
    if missing:
        raise HarnessError(f"aggregate: no column {', '.join(missing)} (columns: {', '.join(map(str, frame.columns))})")
    rows = []
    groups = frame.groupby(by, sort=False, dropna=False) if by else [((), frame)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        for v in values:
            s = stats.summarise(pd.to_numeric(g[v], errors="coerce").to_numpy())
            rows.append({**dict(zip(by, key)), "figure": v, **{c: s[c] for c in SUMMARY_COLUMNS}})
    return pd.DataFrame(rows)


def metrics(run: Run, experiment: str) -> pd.DataFrame:
    """The experiment's per-repeat figures (its analysis module's `metrics(run)`, contract C1),
    aggregated over repeats: variant, metric, unit, better, n, median, ci_low, ci_high, cv,
    unstable, stability."""
    module = registry.analysis_of(experiment)
    if module is None:
        raise HarnessError(f"experiment {experiment} declares no analysis module")
    frame = module.metrics(run)
    frame = frame[frame["experiment"] == experiment]
    out = aggregate(frame, by=["variant", "metric", "unit", "better"], values="value")
    return out.drop(columns="figure")


def headline(run: Run, experiment: str) -> pd.DataFrame:
    """`metrics()` restricted to the experiment's declared headline metrics, in their order."""
    names = [m.name for m in registry.get(experiment).headline]
    table = metrics(run, experiment)
    table = table[table["metric"].isin(names)]
    order = {n: i for i, n in enumerate(names)}
    return table.sort_values("metric", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def show(table: pd.DataFrame, key: str) -> None:
    """Display `table`, and keep it under `key` in the notebook's outputs for `shown()`."""
    from IPython.display import display

    display(table)
    display({TABLE_MIME: {"key": key, "table": json.loads(table.to_json(orient="split", date_format="iso"))}},
            raw=True)


def shown(executed_notebook: str | Path) -> dict[str, pd.DataFrame]:
    """Every table `show()` displayed in an executed notebook, by key."""
    import io

    import nbformat

    nb = nbformat.read(str(executed_notebook), as_version=4)
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = o.get("data", {}).get(TABLE_MIME)
            if data is not None:
                out[data["key"]] = pd.read_json(io.StringIO(json.dumps(data["table"])), orient="split")
    return out


def save(fig: Any, name: str, experiments: Iterable[str] = (), **parameters: Any) -> list[Path]:
    """Save `fig` as `name` with `figures.save_figure`, for the run `open_run()` opened."""
    s = _current()
    paths = figures.save_figure(fig, name, s.run, notebook=s.notebook, experiments=list(experiments),
                                figures_dir=s.figures_dir, formats=s.formats,
                                parameters={**s.parameters, **parameters}, roles=s.roles)
    print("saved", ", ".join(p.name for p in paths))
    return paths
