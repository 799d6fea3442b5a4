"""The claims ledger: every numeric claim of the three seed documents, evaluated against a run.

The ledger (`claims_ledger.csv`, next to this module) is data, one row per claim, and holds no
measured value: only the seeds' own numbers, as reference values. Columns:

    claim_id    stable id, `<document>-<family>-<n>`, e.g. `001-pool-03`
    document    the seed: 000 (FastAPI + PyMongo under Locust), 001 (AsyncMongoClient traps),
                002 (threads vs asyncio on PostgreSQL)
    kind        measurement  a number the seed measured; evaluated and counted
                setup        a size or setting of the seed's test; shown beside this run's own
                context      a number that is not a measurement (a version, a date); listed only
    section     where in the seed
    sentence    the sentence, verbatim or nearly
    seed_value  the seed's number (for ranges, the bound the sentence leads with; the range is in
                the sentence), and seed_unit its unit
    quantity    how to compute the same quantity from a run: an expression over metrics
    criterion   what counts as reproducing the claim: a boolean expression
    role        the server role that produced the quantity (mongodb, postgres)
    note        why this criterion

Expressions are a small, safe language (parsed with `ast`, never `eval`):
- `{experiment.variant.metric}` is a metric, as returned by the analysis modules' `metrics(run)`;
  `{param:experiment.name}` is a parameter the run used (from its manifest);
- in a criterion, `value` is the quantity, `seed` the seed's value, `ratio` = value / seed;
- numbers, `+ - * /`, comparisons (chained: `0.5 <= ratio <= 2`), `and`, `or`, `not`, and the
  functions `abs`, `min`, `max`.

A claim whose metric is missing from the run (experiment not run, failed, or metric not provided
yet) evaluates to None, "not measured in this run", never to False.
"""

from __future__ import annotations

import ast
import importlib
import math
import operator
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from .store import Run

LEDGER_PATH = Path(__file__).with_name("claims_ledger.csv")
COLUMNS = ("claim_id", "document", "kind", "section", "sentence", "seed_value", "seed_unit",
           "quantity", "criterion", "role", "note")
DOCUMENTS = {"000": "Async PyMongo in FastAPI (sync vs async under Locust)",
             "001": "Using MongoDB with PyMongo's Async API (three traps)",
             "002": "asyncio vs Threads for Database-Heavy Services (PostgreSQL)"}
KINDS = ("measurement", "setup", "context")
ROLES = ("mongodb", "postgres")

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURED = "not measured in this run"
SETUP_SAME = "setup: same as the seed"
SETUP_DIFFERS = "setup: differs from the seed"
CONTEXT = "not a measurement"
STATUSES = (REPRODUCED, NOT_REPRODUCED, NOT_MEASURED, SETUP_SAME, SETUP_DIFFERS, CONTEXT)

_REF = re.compile(r"\{([^{}]+)\}")
_REF_NAME = re.compile(r"^(param:)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_.\-]*)+$")


class ExpressionError(ValueError):
    """An expression of the ledger that does not parse or uses something the language lacks."""


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
        variables = dict(variables or {})
        return _eval(self.tree.body, self, lookup, variables)


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

def load(path: Path = LEDGER_PATH) -> pd.DataFrame:
    """The ledger as a DataFrame (strings, seed_value as float), checked: ids unique, kinds known,
    every expression parses."""
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
        if row.document not in DOCUMENTS:
            problems.append(f"{row.claim_id}: unknown document {row.document!r}")
        if row.kind not in KINDS:
            problems.append(f"{row.claim_id}: unknown kind {row.kind!r}")
        if row.kind != "context":
            try:
                parse(row.quantity, allow_variables=())
                parse(row.criterion)
            except ExpressionError as e:
                problems.append(f"{row.claim_id}: {e}")
            if row.role not in ROLES:
                problems.append(f"{row.claim_id}: role must be one of {ROLES}, got {row.role!r}")
        try:
            if row.seed_value:  # empty for a claim the seed states without a number
                float(row.seed_value)
        except ValueError:
            problems.append(f"{row.claim_id}: seed_value {row.seed_value!r} is not a number")
    if problems:
        raise ExpressionError(f"{path}:\n  " + "\n  ".join(problems))
    df["seed_value"] = pd.to_numeric(df["seed_value"], errors="coerce")
    return df


def analysis_modules() -> dict[str, Any]:
    """Every module of `harness.analysis` that exposes `metrics(run)`."""
    from . import analysis

    out = {}
    for mod in pkgutil.iter_modules(analysis.__path__):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{analysis.__name__}.{mod.name}")
        if callable(getattr(module, "metrics", None)):
            out[mod.name] = module
    return out


def collect_metrics(run: Run) -> tuple[dict[str, float], dict[str, str]]:
    """All named metrics of a run, from every analysis module, and the errors of modules that
    could not compute theirs (a module that fails leaves its claims unmeasured, not the report)."""
    metrics: dict[str, float] = {}
    errors: dict[str, str] = {}
    try:
        modules = analysis_modules()
    except Exception as e:  # an analysis module that does not import
        return metrics, {"harness.analysis": f"{type(e).__name__}: {e}"}
    for name, module in modules.items():
        try:
            got = module.metrics(run) or {}
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        for k, v in got.items():
            try:
                metrics[k] = float(v)
            except (TypeError, ValueError):
                continue
    return metrics, errors


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


def _lookup(run: Run, metrics: Mapping[str, float]) -> Callable[[str], float]:
    def lookup(name: str) -> float:
        if name.startswith("param:"):
            return _param(run, name[len("param:"):])
        v = metrics.get(name)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            raise Missing(name)
        return v
    return lookup


def _experiment_state(run: Run, names: tuple[str, ...]) -> str | None:
    """Why the experiments behind a claim give no number, if that is the reason."""
    for name in names:
        exp = name.split(":", 1)[-1].split(".", 1)[0]
        entry = run.experiments.get(exp)
        if entry is None:
            return f"experiment {exp} not in this run"
        if entry.get("status") == "failed":
            return f"experiment {exp} failed"
    return None


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def evaluate(run: Run, metrics: Mapping[str, float] | None = None,
             ledger: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every claim of the ledger against `run`: seed value, this run's value, ratio, reproduced
    (True / False / None = not measured), status, and the server that produced the value."""
    if metrics is None:
        metrics, errors = collect_metrics(run)
    else:
        errors = {}
    ledger = load() if ledger is None else ledger
    lookup = _lookup(run, metrics)
    rows = []
    for c in ledger.itertuples(index=False):
        seed = _num(c.seed_value)
        row = {"claim_id": c.claim_id, "document": c.document, "kind": c.kind, "section": c.section,
               "sentence": c.sentence, "seed_value": seed, "seed_unit": c.seed_unit,
               "value": None, "ratio": None, "criterion": c.criterion, "reproduced": None,
               "status": CONTEXT, "server": "", "missing": "", "quantity": c.quantity,
               "note": c.note}
        if c.kind != "context":
            present = c.role in run.manifest.get("servers", {})
            row["server"] = run.server_label(c.role) if present else f"no {c.role} server in this run"
            names = refs(c.quantity) + refs(c.criterion)
            try:
                value = _num(parse(c.quantity, allow_variables=()).evaluate(lookup))
                if value is None:
                    raise Missing(c.quantity)
                row["value"] = value
                row["ratio"] = value / seed if seed else None
                ok = parse(c.criterion).evaluate(lookup, {"value": value, "seed": seed,
                                                          "ratio": row["ratio"]})
                ok = bool(ok)
                if c.kind == "measurement":
                    row["reproduced"] = ok
                    row["status"] = REPRODUCED if ok else NOT_REPRODUCED
                else:
                    row["status"] = SETUP_SAME if ok else SETUP_DIFFERS
            except Missing as m:
                row["missing"] = m.name
                why = _experiment_state(run, names)
                row["status"] = NOT_MEASURED
                row["missing"] = why or f"no {m.name}"
            except ZeroDivisionError:
                row["status"] = NOT_MEASURED
                row["missing"] = "division by zero (a metric was 0)"
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["metric_errors"] = errors
    out.attrs["run_id"] = run.id
    return out


def summary(evaluated: pd.DataFrame) -> pd.DataFrame:
    """Counts of each status per seed document (measurement claims only, plus setup rows)."""
    t = pd.crosstab(evaluated["document"], evaluated["status"])
    t = t.reindex(columns=[s for s in STATUSES if s in t.columns], fill_value=0)
    t["claims"] = t.sum(axis=1)
    return t


_COLOURS = {REPRODUCED: "#d7f0dd", NOT_REPRODUCED: "#f8d7da", NOT_MEASURED: "#eeeeee",
            SETUP_SAME: "#e3ecfa", SETUP_DIFFERS: "#fdf1d6", CONTEXT: "#ffffff"}


def style(evaluated: pd.DataFrame, columns: tuple[str, ...] = (
        "claim_id", "sentence", "seed_value", "seed_unit", "value", "ratio", "status", "server",
        "criterion", "missing")):
    """The evaluation as a pandas Styler: one colour per status, numbers to 3 significant digits."""
    df = evaluated[list(columns)].copy()

    def fmt(x):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "—"
        if float(x).is_integer() or abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}"

    def colour(row):
        c = _COLOURS.get(row["status"], "#ffffff")
        return [f"background-color: {c}"] * len(row)

    return (df.style.apply(colour, axis=1)
            .format({k: fmt for k in ("seed_value", "value", "ratio") if k in df.columns})
            .hide(axis="index")
            .set_properties(subset=[c for c in ("sentence",) if c in df.columns],
                            **{"text-align": "left", "min-width": "28em"})
            .set_properties(**{"vertical-align": "top", "font-size": "0.85em"}))
