"""Claims: every row of the seeds' ledger (`harness.ledger`, `claims_ledger.csv`) judged against a
run's repeats.

Bands and margins were written into the ledger before the reference run, and are not moved after it.

Verdicts, from the t-interval on the log of the per-repeat values of a / b (harness.stats; 95%,
TOST at 5% for equivalence), decided in this order:
    not comparable   comparison `absolute`
    equivalent       TOST inside the margin (equivalence rows)
    not reproduced   the interval lies wholly on the side opposite to the seed's (for equivalence
                     rows: wholly outside the margin)
    inconclusive     the interval includes the reference (shown: the smallest effect the run could
                     have detected); also fewer than 2 repeats (no interval)
    reproduced       the interval excludes the reference on the seed's side and, where a band is
                     stated, overlaps it
    direction only   the interval excludes the reference on the seed's side, but lies wholly
                     outside the band
plus `not measured in this run` when a figure is missing. Every judged row is a test at 5%, so
about `ALPHA x judged rows` verdicts may be wrong by chance alone (`chance_wrong`).

Removed from the earlier ledger, because they could not fail: Little's-law rows (in a closed loop,
clients / throughput is the mean latency by construction) and the per-connection and pool-bound
figures of seed 002 (set by the 10 ms pg_sleep parameter). The pool-bound claim is judged instead
by each model's throughput against the pool bound measured from calibration requests.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from . import stats
from .ledger import (  # noqa: F401 -- re-exported: the ledger's names are part of this module's API
    COLUMNS,
    COMPARISONS,
    DIRECTIONS,
    DOCUMENTS,
    KINDS,
    LEDGER_PATH,
    ROLES,
    Expression,
    ExpressionError,
    Missing,
    load,
    parse,
    refs,
)
from .store import Run

ALPHA = stats.ALPHA

NOT_COMPARABLE = "not comparable"
EQUIVALENT = "equivalent"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
NOT_MEASURED = "not measured in this run"
SETUP_SAME = "setup: same as the seed"
SETUP_DIFFERS = "setup: differs from the seed"
CONTEXT = "not a measurement"
VERDICTS = (NOT_COMPARABLE, EQUIVALENT, NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, DIRECTION_ONLY,
            NOT_MEASURED)
JUDGED = (EQUIVALENT, NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, DIRECTION_ONLY)
STATUSES = VERDICTS + (SETUP_SAME, SETUP_DIFFERS, CONTEXT)

# -- per-repeat figures of a run --------------------------------------------------------------------

def analysis_paths() -> list[str]:
    """Dotted paths of the analysis modules, from the registry (the one discovery: each experiment
    declares its module as `Experiment.analysis`)."""
    from . import registry

    return sorted({e.analysis for e in registry.all_experiments().values() if getattr(e, "analysis", None)})


def collect_frame(run: Run) -> tuple[pd.DataFrame, dict[str, str]]:
    """Every analysis module's per-repeat figures (contract C1) in one frame, and the errors of
    modules that could not compute theirs (their claims stay unmeasured; the rest go on)."""
    from .analysis import METRIC_COLUMNS

    frames, errors = [], {}
    try:
        paths = analysis_paths()
    except Exception as e:  # an experiment module that does not import
        return pd.DataFrame(columns=list(METRIC_COLUMNS)), {"harness.registry": f"{type(e).__name__}: {e}"}
    for path in paths:
        name = path.rsplit(".", 1)[-1]
        try:  # one module at a time: a module that fails leaves only its own claims unmeasured
            got = importlib.import_module(path).metrics(run)
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        if not isinstance(got, pd.DataFrame) or not set(METRIC_COLUMNS) <= set(got.columns):
            errors[name] = "metrics(run) did not return the per-repeat frame of contract C1"
            continue
        frames.append(got[list(METRIC_COLUMNS)])
    frames = [f for f in frames if not f.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(METRIC_COLUMNS))
    return frame, errors


def by_repeat(frame: pd.DataFrame) -> dict[str, dict[int, float]]:
    """{dotted name: {repeat: value}} from a C1 frame."""
    from .analysis import metric_name

    out: dict[str, dict[int, float]] = {}
    for row in frame.itertuples(index=False):
        out.setdefault(metric_name(row.experiment, row.variant, row.metric), {})[int(row.repeat)] = float(row.value)
    return out


def _param(run: Run, name: str) -> float:
    """`experiment.field`, or `experiment.field.min` / `.max` for a grid (a list parameter);
    a grid without suffix reads as its largest value."""
    exp, _, field = name.partition(".")
    field, _, agg = field.partition(".")
    params = run.experiments.get(exp, {}).get("params", {})
    if field not in params or agg not in ("", "min", "max"):
        raise Missing(f"param:{name}")
    v = params[field]
    if isinstance(v, (list, tuple)):
        v = (min(v) if agg == "min" else max(v)) if v else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Missing(f"param:{name}")
    return float(v)


def per_repeat(run: Run, series: Mapping[str, Mapping[int, float]], text: str) -> dict[int, float]:
    """An expression evaluated in each repeat that has every metric it reads: {repeat: value}."""
    if not text:
        return {}
    expr = parse(text, allow_variables=())
    metric_refs = [r for r in expr.refs if not r.startswith("param:")]
    for r in metric_refs:
        if r not in series:
            raise Missing(r)
    repeats = sorted(set.intersection(*(set(series[r]) for r in metric_refs))) if metric_refs else [0]
    if not repeats:
        raise Missing(f"no repeat has all of {', '.join(metric_refs)}")
    out = {}
    for k in repeats:
        def lookup(name: str, k=k) -> float:
            return _param(run, name[len("param:"):]) if name.startswith("param:") else series[name][k]
        try:
            v = float(expr.evaluate(lookup))
        except ZeroDivisionError:
            continue
        if math.isfinite(v):
            out[k] = v
    return out


# -- verdicts ------------------------------------------------------------------------------------

def judge(row: Mapping[str, Any], logs: np.ndarray) -> dict[str, Any]:
    """The verdict of one measurement row from the per-repeat log ratios log(a_k / b_k).

    `row` needs comparison, direction, reference, band_low, band_high, margin (floats or NaN)."""
    comparison = row["comparison"]
    ref = float(row.get("reference") or 1.0)
    if isinstance(row.get("reference"), float) and math.isnan(row["reference"]):
        ref = 1.0
    s = stats.log_ratio_summary(logs, reference=ref)
    out: dict[str, Any] = {"n": s["n"], "value": s["ratio"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                           "p_value": s["p_value"], "detectable": s["detectable_ratio"]}
    if comparison == "absolute":
        out["verdict"] = NOT_COMPARABLE
        return out
    if s["n"] == 0:
        out["verdict"] = NOT_MEASURED
        return out
    lo, hi = s["ci_low"], s["ci_high"]
    if comparison == "equivalence":
        t = stats.tost(logs, float(row["margin"]), reference=ref)
        out["p_value"] = t["p_value"]
        low_m, high_m = ref / (1 + float(row["margin"])), ref * (1 + float(row["margin"]))
        if t["equivalent"]:
            out["verdict"] = EQUIVALENT
        elif s["n"] >= 2 and (hi < low_m or lo > high_m):
            out["verdict"] = NOT_REPRODUCED
        else:
            out["verdict"] = INCONCLUSIVE
        return out
    if s["n"] < 2 or not (math.isfinite(lo) and math.isfinite(hi)):
        out["verdict"] = INCONCLUSIVE
        return out
    above = row["direction"] == ">"
    seed_side = lo > ref if above else hi < ref
    opposite = hi < ref if above else lo > ref
    if opposite:
        out["verdict"] = NOT_REPRODUCED
    elif not seed_side:
        out["verdict"] = INCONCLUSIVE
    else:
        band = (row.get("band_low"), row.get("band_high"))
        has_band = all(b is not None and not (isinstance(b, float) and math.isnan(b)) for b in band)
        if has_band and (hi < float(band[0] or 0.0) or lo > float(band[1] or 0.0)):
            out["verdict"] = DIRECTION_ONLY
        else:
            out["verdict"] = REPRODUCED
    return out


def _interpreter(run: Run) -> str:
    env = run.manifest.get("environment", {})
    py = env.get("python") or {}
    if isinstance(py, Mapping):
        impl = py.get("implementation", "")
        ver = py.get("version", "")
        label = f"{impl} {ver}".strip()
        if py.get("gil_enabled") is False:
            label += " (free-threaded)"
        return label or "unknown"
    return str(py) or "unknown"


def _experiment_state(run: Run, names: tuple[str, ...]) -> str | None:
    """Why the experiments behind a claim give no number, if that is the reason."""
    for name in names:
        exp = name.split(":", 1)[-1].split(".", 1)[0]
        entry = run.experiments.get(exp)
        if entry is None:
            return f"experiment {exp} not in this run"
        if entry.get("status") in ("failed", "skipped"):
            return f"experiment {exp} {entry.get('status')}"
    return None


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def _median(d: Mapping[int, float]) -> float | None:
    return float(np.median(list(d.values()))) if d else None


def evaluate(run: Run, frame: pd.DataFrame | None = None, ledger: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every ledger row against `run`: the figures it used (medians of a and b over repeats, the
    ratio a / b with its 95% interval, n, the smallest detectable ratio) and its verdict."""
    if frame is None:
        frame, errors = collect_frame(run)
    else:
        errors = {}
    series = by_repeat(frame)
    ledger = load() if ledger is None else ledger
    interpreter = _interpreter(run)
    rows = []
    for c in ledger.to_dict("records"):
        seed = _num(c["seed_value"])
        row = {"claim_id": c["claim_id"], "document": c["document"], "kind": c["kind"],
               "section": c["section"], "sentence": c["sentence"], "seed_value": seed,
               "seed_unit": c["seed_unit"], "comparison": c["comparison"], "direction": c["direction"],
               "reference": c["reference"], "band_low": c["band_low"], "band_high": c["band_high"],
               "margin": c["margin"], "a": c["a"], "b": c["b"], "a_median": None, "b_median": None,
               "n": 0, "value": None, "ci_low": None, "ci_high": None, "p_value": None,
               "detectable": None, "verdict": CONTEXT, "server": "", "missing": "",
               "interpreter": interpreter, "note": c["note"]}
        if c["kind"] != "context":
            present = c["role"] in run.manifest.get("servers", {})
            row["server"] = run.server_label(c["role"]) if present else f"no {c['role']} server in this run"
            try:
                a = per_repeat(run, series, c["a"])
                row["a_median"] = _median(a)
                if c["kind"] == "setup":
                    row["value"] = row["a_median"]
                    row["verdict"] = SETUP_SAME if seed is not None and row["value"] == seed else SETUP_DIFFERS
                else:
                    b = per_repeat(run, series, c["b"]) if c["b"] else {k: 1.0 for k in a}
                    row["b_median"] = _median(b) if c["b"] else None
                    logs = stats._paired_logs(a, b)
                    if not len(logs):
                        raise Missing("no repeat with both figures positive")
                    row.update(judge(c, logs))
            except Missing as m:
                row["verdict"] = NOT_MEASURED
                row["missing"] = _experiment_state(run, refs(c["a"]) + refs(c["b"])) or f"no {m.name}"
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["metric_errors"] = errors
    out.attrs["run_id"] = run.id
    return out


def summary(evaluated: pd.DataFrame) -> pd.DataFrame:
    """Verdict counts by kind, per seed (measurement rows only), with the rows judged per seed."""
    m = evaluated[evaluated["kind"] == "measurement"]
    t = pd.crosstab(m["document"], m["verdict"])
    t = t.reindex(columns=[v for v in VERDICTS if v in t.columns], fill_value=0)
    t["judged"] = t[[v for v in JUDGED if v in t.columns]].sum(axis=1)
    return t


def chance_wrong(evaluated: pd.DataFrame, alpha: float = ALPHA) -> dict[str, float]:
    """How many verdicts chance alone would make wrong: each judged row is a test at `alpha`."""
    judged = int(evaluated["verdict"].isin(JUDGED).sum())
    return {"judged_rows": judged, "alpha": alpha, "expected_wrong": alpha * judged}


_COLOURS = {REPRODUCED: "#d7f0dd", EQUIVALENT: "#d7f0dd", DIRECTION_ONLY: "#eef6d0",
            NOT_REPRODUCED: "#f8d7da", INCONCLUSIVE: "#fdf1d6", NOT_COMPARABLE: "#e3ecfa",
            NOT_MEASURED: "#eeeeee", SETUP_SAME: "#e3ecfa", SETUP_DIFFERS: "#fdf1d6", CONTEXT: "#ffffff"}


def style(evaluated: pd.DataFrame, columns: tuple[str, ...] = (
        "claim_id", "sentence", "seed_value", "seed_unit", "comparison", "value", "ci_low", "ci_high",
        "n", "detectable", "verdict", "server", "missing")):
    """The evaluation as a pandas Styler: one colour per verdict, numbers to 3 significant digits."""
    df = evaluated[[c for c in columns if c in evaluated.columns]].copy()

    def fmt(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "—"
        if float(x).is_integer() or abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}"

    def colour(row):
        c = _COLOURS.get(row.get("verdict"), "#ffffff")
        return [f"background-color: {c}"] * len(row)

    return (df.style.apply(colour, axis=1)
            .format({k: fmt for k in ("seed_value", "value", "ci_low", "ci_high", "detectable")
                     if k in df.columns})
            .hide(axis="index")
            .set_properties(subset=[c for c in ("sentence",) if c in df.columns],
                            **{"text-align": "left", "min-width": "28em"})
            .set_properties(**{"vertical-align": "top", "font-size": "0.85em"}))
