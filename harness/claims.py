"""The claims ledger: one row per numeric figure or sentence of the three seed documents, each with
its comparison stated before any run, evaluated on a run's repeats.

The ledger (`claims_ledger.csv`, next to this module) is data and holds no measured value: only the
seeds' own numbers. Columns:

    claim_id    stable id, `<document>-<family>-<n>`, e.g. `001-pool-03`
    document    the seed: 000 (FastAPI + PyMongo under Locust), 001 (AsyncMongoClient traps),
                002 (threads vs asyncio on PostgreSQL)
    kind        measurement  a figure the seed measured: judged (or shown, when not comparable)
                setup        a size or setting of the seed's test; shown beside this run's own
                context      a number that is not a measurement (a version, a date); listed only
    section     where in the seed
    sentence    the sentence(s), verbatim or nearly; one row may quote several that state the
                same figure
    seed_value, seed_unit   the seed's number; for a comparison, the seed's own ratio a / b (its
                unit says which figures, e.g. "x (per request / shared; 2.44 / 0.20)")
    comparison  absolute     a figure from another server and machine: shown side by side with
                             this run's, never judged (`not comparable`)
                ratio        a / b per repeat (b empty: a alone), compared with `reference` in the
                             seed's `direction`, and with the band where the seed gives an effect size
                equivalence  a / b per repeat is the same as `reference` within `margin`
    a, b        expressions over metrics (`{experiment.variant.metric}`, as the analysis modules'
                `metrics(run)` name them) and parameters (`{param:experiment.name}`), evaluated per
                repeat, so that a and b are paired by repeat; b empty = 1
    direction   `>` (the seed says a / b exceeds reference) or `<`
    reference   where the seed's side and the opposite side meet: 1 for "a above b", a threshold
                the seed states otherwise (e.g. 10 ms); empty = 1
    band_low, band_high   for effect sizes: the seed's ratio within a factor of 2 either way
                (servers and machines differ), cut at the reference
    margin      for equivalence: a / b within [reference / (1 + margin), reference * (1 + margin)]
    role        the server role that produced the figures (mongodb, postgres)
    note        why this comparison

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

Expressions are a small, safe language (parsed with `ast`, never `eval`): numbers, `+ - * /`,
comparisons, `and`, `or`, `not`, and the functions `abs`, `min`, `max`.
"""

from __future__ import annotations

import ast
import importlib
import math
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from . import stats
from .errors import HarnessError
from .store import Run

LEDGER_PATH = Path(__file__).with_name("claims_ledger.csv")
COLUMNS = ("claim_id", "document", "kind", "section", "sentence", "seed_value", "seed_unit",
           "comparison", "a", "b", "direction", "reference", "band_low", "band_high", "margin",
           "role", "note")
DOCUMENTS = {"000": "Async PyMongo in FastAPI (sync vs async under Locust)",
             "001": "Using MongoDB with PyMongo's Async API (three traps)",
             "002": "asyncio vs Threads for Database-Heavy Services (PostgreSQL)"}
KINDS = ("measurement", "setup", "context")
COMPARISONS = ("absolute", "ratio", "equivalence")
DIRECTIONS = (">", "<")
ROLES = ("mongodb", "postgres")
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

_REF = re.compile(r"\{([^{}]+)\}")
_REF_NAME = re.compile(r"^(param:)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_.\-]*)+$")


class ExpressionError(HarnessError, ValueError):
    """An expression or row of the ledger that does not parse or uses something the language lacks."""


class Missing(Exception):
    """A metric or parameter the run does not have."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


# -- the expression language -------------------------------------------------------------------

_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_CMPOPS: dict[type, Callable[[float, float], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS: dict[str, Callable[..., float]] = {"abs": abs, "min": min, "max": max}
_VARIABLES = ("value", "seed", "ratio")


@dataclass(frozen=True)
class Expression:
    """A parsed ledger expression; `refs` are the metric / parameter names it reads."""

    text: str
    tree: ast.Expression
    refs: tuple[str, ...]
    placeholders: dict[str, str]       # python identifier -> reference name

    def evaluate(self, lookup: Callable[[str], float], variables: Mapping[str, Any] | None = None):
        return _eval(self.tree.body, self, lookup, dict(variables or {}))


def refs(text: str) -> tuple[str, ...]:
    """The `{...}` references of an expression, in order of first appearance."""
    return tuple(dict.fromkeys(m.strip() for m in _REF.findall(text or "")))


@lru_cache(maxsize=4096)
def parse(text: str, allow_variables: tuple[str, ...] = _VARIABLES) -> Expression:
    """Parse and check an expression; raises ExpressionError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("empty expression")
    placeholders: dict[str, str] = {}
    names = refs(text)
    for i, name in enumerate(names):
        if not _REF_NAME.match(name):
            raise ExpressionError(f"{text!r}: {{{name}}} is not a metric name "
                                  "(experiment.variant.metric) nor param:experiment.name")
        placeholders[f"__ref{i}"] = name
    by_name = {v: k for k, v in placeholders.items()}
    python = _REF.sub(lambda m: by_name[m.group(1).strip()], text)
    try:
        tree = ast.parse(python.strip(), mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"{text!r}: does not parse ({e.msg})") from None
    expr = Expression(text, tree, names, placeholders)
    for node in ast.walk(tree.body):
        _check(node, expr, allow_variables)
    return expr


def _check(node: ast.AST, expr: Expression, allow: tuple[str, ...]) -> None:
    ok = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Call, ast.Name, ast.Constant,
          ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, *_BINOPS, *_CMPOPS)
    if not isinstance(node, ok):
        raise ExpressionError(f"{expr.text!r}: {type(node).__name__} is not allowed in a ledger expression")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
        raise ExpressionError(f"{expr.text!r}: only numbers are allowed as constants")
    if isinstance(node, ast.Name) and node.id not in expr.placeholders and node.id not in allow \
            and node.id not in _FUNCS:
        raise ExpressionError(f"{expr.text!r}: unknown name {node.id!r} (metrics go in braces: "
                              f"{{experiment.variant.metric}}; variables: {', '.join(allow) or 'none'})")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise ExpressionError(f"{expr.text!r}: only {', '.join(_FUNCS)} may be called")


def _eval(node: ast.AST, expr: Expression, lookup, variables):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in expr.placeholders:
            return lookup(expr.placeholders[node.id])
        if node.id in variables:
            v = variables[node.id]
            if v is None:
                raise Missing(node.id)
            return v
        raise ExpressionError(f"{expr.text!r}: {node.id} has no value here")
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, expr, lookup, variables)
        return -v if isinstance(node.op, ast.USub) else (+v if isinstance(node.op, ast.UAdd) else not v)
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, expr, lookup, variables),
                                      _eval(node.right, expr, lookup, variables))
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, expr, lookup, variables) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, expr, lookup, variables)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, expr, lookup, variables)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        return _FUNCS[node.func.id](*[_eval(a, expr, lookup, variables) for a in node.args])
    raise ExpressionError(f"{expr.text!r}: cannot evaluate {type(node).__name__}")


# -- the ledger ----------------------------------------------------------------------------------

_NUMERIC = ("seed_value", "reference", "band_low", "band_high", "margin")


def load(path: Path = LEDGER_PATH) -> pd.DataFrame:
    """The ledger as a DataFrame (numbers as floats, NaN where empty), checked row by row."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ExpressionError(f"{path}: missing columns {missing}")
    df = df[list(COLUMNS)].copy()
    dup = df["claim_id"][df["claim_id"].duplicated()].tolist()
    if dup:
        raise ExpressionError(f"{path}: duplicate claim ids {dup}")
    problems = []
    for row in df.itertuples(index=False):
        problems += [f"{row.claim_id}: {p}" for p in _row_problems(row)]
    if problems:
        raise ExpressionError(f"{path}:\n  " + "\n  ".join(problems))
    for c in _NUMERIC:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["reference"] = df["reference"].fillna(1.0)
    return df


def _row_problems(row) -> list[str]:
    out = []
    if row.document not in DOCUMENTS:
        out.append(f"unknown document {row.document!r}")
    if row.kind not in KINDS:
        out.append(f"unknown kind {row.kind!r}")
    for c in _NUMERIC:
        v = getattr(row, c)
        try:
            if v:
                float(v)
        except ValueError:
            out.append(f"{c} {v!r} is not a number")
    if row.kind == "context":
        return out
    if row.role not in ROLES:
        out.append(f"role must be one of {ROLES}, got {row.role!r}")
    for col in ("a", "b"):
        text = getattr(row, col)
        if text:
            try:
                parse(text, allow_variables=())
            except ExpressionError as e:
                out.append(str(e))
    if not row.a:
        out.append("a is empty")
    if row.kind == "setup":
        return out
    if row.comparison not in COMPARISONS:
        out.append(f"comparison must be one of {COMPARISONS}, got {row.comparison!r}")
    elif row.comparison == "ratio":
        if row.direction not in DIRECTIONS:
            out.append(f"a ratio needs a direction in {DIRECTIONS}, got {row.direction!r}")
        if bool(row.band_low) != bool(row.band_high):
            out.append("a band needs both band_low and band_high")
        elif row.band_low and not float(row.band_low) < float(row.band_high):
            out.append("band_low must be below band_high")
        if row.margin:
            out.append("a margin belongs to an equivalence row")
    elif row.comparison == "equivalence":
        if not row.margin or not float(row.margin) > 0:
            out.append("an equivalence row needs a margin > 0")
        if row.direction or row.band_low or row.band_high:
            out.append("an equivalence row has a margin, not a direction or band")
    if row.reference and not float(row.reference) > 0:
        out.append("reference must be > 0 (ratios are compared on the log)")
    return out


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
        if has_band and (hi < float(band[0]) or lo > float(band[1])):
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
