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
  interval, the CV, n and the stability flag, all from `harness.core.stats.summarise` (never a mean of
  per-request samples: a repeat is the unit of evidence);
- `metrics()` / `headline()`: an experiment's per-repeat figures from its analysis module
  (`Experiment.analysis`), aggregated the same way;
- `table()` is how a notebook displays a table: `display(notebook.table(frame))` (a DataFrame or a
  Styler) renders every missing value as "—" (`NA_REP`), never "NaN"; the values are not changed;
- `show()` displays a table that way and also stores it in the executed notebook (a JSON output the
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

from ..core import figures, profiles, stats
from ..core.errors import HarnessError
from ..core.store import Run
from ..experiments import registry
from ..judging import claims

SUMMARY_COLUMNS = ("n", "median", "ci_low", "ci_high", "cv", "unstable", "stability")
TABLE_MIME = "application/vnd.harness.table+json"
NA_REP = "—"   # how a displayed table shows a missing value (NaN, None, NA), instead of "NaN"
_told: set[str] = set()   # experiments `has()` has already explained


@dataclass
class _Session:
    run: Run
    notebook: str
    figures_dir: Path | None       # None: figures.default_dir(run)
    formats: tuple[str, ...]
    parameters: dict[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ("mongodb", "postgres")


_session: _Session | None = None


def open_run(run_dir: str | Path, *, notebook: str = "", figures_dir: str | Path = "",
             figure_formats: str | Iterable[str] = figures.DEFAULT_FORMATS,
             roles: Sequence[str] = ("mongodb", "postgres"), **parameters: Any) -> Run:
    """The run at `run_dir`; later `save()` calls write to `figures_dir` (empty: `figures.default_dir`,
    so figures/ only for the reference run) in `figure_formats`, stamped with this run, `notebook`
    and the notebook's `parameters`."""
    global _session
    run = Run(Path(run_dir))
    _session = _Session(run, notebook, Path(figures_dir) if figures_dir else None,
                        figures.parse_formats(figure_formats),
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
    """The experiment's per-repeat figures (its own `compute_metrics`, contract C1), aggregated
    over repeats: variant, metric, unit, better, n, median, ci_low, ci_high, cv, unstable, stability."""
    frame = claims.experiment_metrics(run, experiment)
    out = aggregate(frame, by=["variant", "metric", "unit", "better"], values="value")
    return out.drop(columns="figure")


def headline(run: Run, experiment: str) -> pd.DataFrame:
    """`metrics()` restricted to the experiment's declared headline metrics, in their order."""
    names = [m.name for m in registry.get(experiment).headline]
    table = metrics(run, experiment)
    table = table[table["metric"].isin(names)]
    order = {n: i for i, n in enumerate(names)}
    return table.sort_values("metric", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def _missing(value: Any) -> bool:
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _blank_missing(values: pd.Index) -> pd.Index:
    """An index (one level) with its missing labels read as NA_REP (for display only)."""
    if not values.hasnans:
        return values
    return pd.Index([NA_REP if _missing(v) else v for v in values], name=values.name, dtype=object)


def _blank_axis(axis: pd.Index) -> pd.Index:
    if isinstance(axis, pd.MultiIndex):
        levels = [axis.get_level_values(i) for i in range(axis.nlevels)]
        if not any(level.hasnans for level in levels):
            return axis
        return pd.MultiIndex.from_arrays([_blank_missing(level) for level in levels], names=axis.names)
    return _blank_missing(axis)


class Table:
    """A DataFrame as a notebook displays it (pandas' own HTML and text, with its display options
    such as `display.float_format`), except that every missing value reads NA_REP."""

    def __init__(self, frame: pd.DataFrame):
        frame = frame.copy()
        for i in range(frame.shape[1]):  # floats keep their dtype (and format); NaN is na_rep's
            col = frame.iloc[:, i]
            if not pd.api.types.is_float_dtype(col.dtype) and col.isna().any():
                frame.isetitem(i, col.astype(object).map(lambda v: NA_REP if _missing(v) else v))
        frame.index, frame.columns = _blank_axis(frame.index), _blank_axis(frame.columns)
        self.frame = frame

    def _options(self) -> dict[str, Any]:
        max_rows, min_rows = pd.get_option("display.max_rows"), pd.get_option("display.min_rows")
        if max_rows and min_rows and len(self.frame) > max_rows:  # truncated as pandas does: min_rows shown
            max_rows = min(min_rows, max_rows)
        return {"na_rep": NA_REP, "float_format": pd.get_option("display.float_format"),
                "max_rows": max_rows, "max_cols": pd.get_option("display.max_columns"),
                "show_dimensions": pd.get_option("display.show_dimensions")}

    def _repr_html_(self) -> str:
        return str(self.frame.to_html(notebook=True, **self._options()))

    def __repr__(self) -> str:
        return str(self.frame.to_string(line_width=pd.get_option("display.width"), **self._options()))


def table(data: Any) -> Any:
    """What to `display()` for `data`, a DataFrame (or Series) or a pandas Styler, so that no cell
    reads "NaN": missing values render as NA_REP ("—"). The values are not changed, only how they
    read; a Styler keeps its own formats and colours. Anything else is returned as it is."""
    from pandas.io.formats.style import Styler

    if isinstance(data, pd.Series):
        data = data.to_frame()
    if isinstance(data, pd.DataFrame):
        return Table(data)
    if isinstance(data, Styler):
        # wrap each cell's formatter (a Styler's own, or pandas' default, which prints "nan");
        # Styler.format(na_rep=...) alone would reset the formats the Styler was given
        funcs, index_funcs = getattr(data, "_display_funcs", None), getattr(data, "_display_funcs_index", None)
        if funcs is None or index_funcs is None:
            return data.format(na_rep=NA_REP)
        rows, cols = data.data.shape
        for r in range(rows):
            for c in range(cols):
                funcs[(r, c)] = _na_first(funcs[(r, c)])
            for level in range(data.data.index.nlevels):
                index_funcs[(r, level)] = _na_first(index_funcs[(r, level)])
        return data
    return data


def _na_first(formatter: Any) -> Any:
    """`formatter`, except that a missing value it would print as nan/None/<NA> (or cannot format)
    reads NA_REP; a Styler's own text for a missing value ("— (not measured)") is kept."""
    def fmt(value: Any) -> Any:
        if not _missing(value):
            return formatter(value)
        try:
            text = formatter(value)
        except (TypeError, ValueError):
            return NA_REP
        return NA_REP if str(text).strip().lower() in {"nan", "none", "<na>", "nat", ""} else text
    return fmt


def show(frame: pd.DataFrame, key: str) -> None:
    """Display `frame` (through `table()`), and keep it under `key` in the notebook's outputs for
    `shown()`."""
    from IPython.display import display

    display(table(frame))
    display({TABLE_MIME: {"key": key, "table": json.loads(frame.to_json(orient="split", date_format="iso"))}},
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


# a category's colour in flame graphs (core.profiles); frames no pattern names are grey
FLAME_COLOURS = {profiles.GIL: "#d62728", profiles.LOCKS: "#bcbd22", profiles.SYSCALLS: "#ff7f0e",
                 profiles.BSON: "#9467bd", profiles.DRIVER_C: "#8c564b", profiles.DRIVER_PY: "#1f77b4",
                 profiles.LOOP: "#2ca02c", profiles.HARNESS: "#e377c2"}


def flame_graph(ax: Any, stacks: Sequence[tuple[Sequence[str], int]], title: str, min_share: float = 0.005) -> None:
    """Draw `stacks` (core.profiles) on `ax` as a flame graph: callers at the bottom, each box as wide
    as its share of the samples, coloured by the category its frame names (grey: none)."""
    nodes = profiles.flame_nodes(stacks, min_share=min_share)
    for depth, start, width, frame in nodes:
        colour = FLAME_COLOURS.get(profiles.frame_category(frame), "#c7c7c7")
        ax.add_patch(_rectangle((start, depth), width, 0.95, colour))
        if width > 0.06:
            ax.text(start + 0.003, depth + 0.45, frame.split(" (", 1)[0][: int(width * 90)], fontsize=6,
                    va="center", clip_on=True)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, max((d for d, *_ in nodes), default=0) + 1)
    ax.set_yticks([])
    ax.set_xlabel("share of the samples")
    ax.set_title(title, fontsize=9)


def _rectangle(xy: tuple[float, float], width: float, height: float, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle(xy, width, height, facecolor=colour, edgecolor="white", linewidth=0.3)
