"""The claims ledger as data: the file, its columns, the expression language of its `a` and `b`
columns, and `load()`, which reads and checks it. Pure: no run, no analysis (the departures
analysis reads the seeds' ratios from here; `claims` judges a run against it).

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
    a, b        expressions over metrics (`{experiment.variant.metric}`, as each experiment declares
                them in its `metrics`) and parameters (`{param:experiment.name}`), evaluated per
                repeat, so that a and b are paired by repeat; b empty = 1
    direction   `>` (the seed says a / b exceeds reference) or `<`
    reference   where the seed's side and the opposite side meet: 1 for "a above b", or a threshold
                the seed states itself, in numbers or words (its 10 ms stall check, "more than one
                core" = 100% of a core, "a small multiple"); empty = 1. A threshold the ledger
                would invent in place of the seed's own number is not used: such a row has
                reference 1 and is held to the seed's number by the band (001-pool-02/03/08/09).
                A threshold stays where reference 1 cannot be crossed on the seed's side (a ratio
                that is >= 1 by construction claimed to stay small: 001-pool-05, 001-pool-12; a
                share <= 1 claimed to stay large: 001-pool-06).
    margin      for equivalence: a / b within [reference / (1 + margin), reference * (1 + margin)]
    bound       a figure that cannot pass this value (a share or fraction capped at 1): the row is
                judged on the count of repeats on each side of the reference (exact sign test),
                never on a t-interval that the cap squeezes to zero width
    premise     the bottleneck under which the seed's sentence holds, when it holds only under one:
                `LABEL` or `not LABEL` (labels separated by `|`, compared without case, `_` = space,
                as the analysis modules name them in contract C1's `bottleneck`), optionally
                followed by `of {metric}, {metric}` naming the figures whose bottleneck counts
                (default: every figure the row reads). A repeat counts when every such figure that
                has a bottleneck in it matches (a repeat with no bottleneck recorded does not count:
                the premise is not known to hold); the row is judged on those repeats only, and is
                `premise not met` when they are no more than half of the repeats. The seed 002 slow
                regime's rows read `not client CPU|machine CPU` (the seed's "none of them was the
                bottleneck"), never `pool`: that label follows from the 90%-of-bound rule those
                rows test, so it would be circular. After a `;`, a premise may also ask for figures:
                `at least X of {metric}, {metric}` (every one >= X in the repeat) or `at least X of
                one of {metric}, ...` (the largest >= X); never a figure the row reads itself. The
                pool's sameness rows read the pool bound so (each model's rows: every other model
                at 0.9 of its bound, the seed's own rule for a pool limit; the slowest-over-fastest
                rows: one model there, since every model there would imply the sameness they test).
    machine_dependent  `yes` when the figure scales with the machine's speed (a fixed-ms threshold,
                a maximum that grows as throughput falls): the report shows the run's ceiling beside it
    role        the server role that produced the figures (mongodb, postgres)
    note        why this comparison

Bands are not typed per row: `band(seed, reference, direction)` computes every one by one rule,
written before the next reference run and not tuned to any run:

    THE BAND RULE (bands that check size). A ratio row with a seed number is held to the
    seed's size, on a log scale, on both sides:
    - an effect row (reference 1: a ratio of two figures, 1 = no difference) to [seed / f, seed x f]
      with f = min(2, sqrt(seed)) for seed > 1 (min(2, sqrt(1 / seed)) below 1): the seed's number
      within a factor of 2 either way, and never nearer the null than halfway to it, so an effect
      in the seed's direction but of a much smaller size is `size not reproduced`, not
      `reproduced`. A seed number within the equivalence margin of 1 (1 / 1.15 .. 1.15) cannot be
      told from no difference by this rule: such a row is written as an equivalence row
      (`load` refuses it as a ratio row);
    - a threshold row (any other reference: a limit the seed states, "below 10 ms", "more than one
      core") to the seed's side of the threshold, [max(seed / 2, reference), seed x 2] for `>` and
      [seed / 2, min(seed x 2, reference)] for `<`: the limit is the claim.
    A row with no seed number has no band: `direction, no seed figure` at best.

Expressions are a small, safe language (parsed with `ast`, never `eval`): numbers, `+ - * /`,
comparisons, `and`, `or`, `not`, and the functions `abs`, `min`, `max`.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import HarnessError

LEDGER_PATH = Path(__file__).with_name("claims_ledger.csv")
COLUMNS = ("claim_id", "document", "kind", "section", "sentence", "seed_value", "seed_unit",
           "comparison", "a", "b", "direction", "reference", "margin", "bound", "premise",
           "machine_dependent", "role", "note", "primary")
BAND_FACTOR = 2.0   # the band rule: the seed's number within this factor either way (log scale)
NEAR_NULL_MARGIN = 0.15   # an effect row's seed within this of 1 is an equivalence claim (the band rule)
DOCUMENTS = {"000": "Async PyMongo in FastAPI (sync vs async under Locust)",
             "001": "Using MongoDB with PyMongo's Async API (three traps)",
             "002": "asyncio vs Threads for Database-Heavy Services (PostgreSQL)"}
KINDS = ("measurement", "setup", "context")
COMPARISONS = ("absolute", "ratio", "equivalence")
DIRECTIONS = (">", "<")
ROLES = ("mongodb", "postgres")

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


def single_ref(text: Any) -> str | None:
    """The reference name when the expression is exactly one figure (`{a.b.c}`), else None."""
    names = refs(str(text or ""))
    return names[0] if len(names) == 1 and _REF.fullmatch(str(text).strip()) else None


def experiment_of(name: str) -> str:
    """The experiment a reference reads: `pg_models` of `pg_models.bound.pool20.rps` and of
    `param:pg_models.clients`."""
    return name.removeprefix("param:").split(".", 1)[0]


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
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # parse() allows no other call
        return _FUNCS[node.func.id](*[_eval(a, expr, lookup, variables) for a in node.args])
    raise ExpressionError(f"{expr.text!r}: cannot evaluate {type(node).__name__}")


# -- the band rule and premises -------------------------------------------------------------------

def band(seed: float | None, reference: float, direction: str) -> tuple[float, float]:
    """The band of a ratio row (the one rule of the module docstring): an effect row's (reference
    1) the seed's number within min(2, sqrt(seed)) either way; a threshold row's the seed's number
    within a factor of 2, cut at the threshold on the seed's side. (NaN, NaN) without a seed
    number. Raises ExpressionError when the seed's own number lies on the wrong side of its
    reference (the band would be empty)."""
    nan = float("nan")
    if seed is None or (isinstance(seed, float) and math.isnan(seed)):
        return nan, nan
    if direction not in DIRECTIONS:
        raise ExpressionError(f"a band needs a direction in {DIRECTIONS}, got {direction!r}")
    seed, reference = float(seed), float(reference)
    if not seed > 0:
        raise ExpressionError(f"a seed ratio must be > 0 to have a band, got {seed!r}")
    if reference == 1.0:
        factor = min(BAND_FACTOR, math.sqrt(max(seed, 1.0 / seed)))
        low, high = seed / factor, seed * factor
        if (seed > 1.0) != (direction == ">"):
            raise ExpressionError(f"the seed's {seed:g} lies on the wrong side of its reference 1 "
                                  f"({direction}): no band")
        return low, high
    low, high = seed / BAND_FACTOR, seed * BAND_FACTOR
    if direction == ">":
        low = max(low, reference)
    else:
        high = min(high, reference)
    if not low < high:
        raise ExpressionError(f"the seed's {seed:g} lies on the wrong side of its reference {reference:g} "
                              f"({direction}): no band")
    return low, high


def beyond_band(interval: tuple[float, float], low: float, high: float) -> str | None:
    """Where an interval (ratio scale) lies against a band [low, high]: "below" or "above" when
    wholly outside it (the direction may hold, the size is not the seed's), None when it overlaps
    the band. The one band rule of a run's verdict (harness.judging.claims), a pooled verdict
    (harness.core.pooling) and the band word a run reads (harness.core.power)."""
    lo, hi = interval
    return "below" if hi < low else "above" if lo > high else None


@dataclass(frozen=True)
class Threshold:
    """`at least X of [one of] {metric}, ...`: every figure (or, with `one of`, the largest) at
    least `at_least` in the repeat."""

    at_least: float
    figures: tuple[str, ...]
    any_of: bool

    def meets(self, values: Mapping[str, float]) -> bool:
        """Whether the repeat's `values` (figure -> value) meet it; a figure missing is not met."""
        got = [values.get(f, math.nan) for f in self.figures]
        if self.any_of:
            return any(v >= self.at_least for v in got)
        return all(v >= self.at_least for v in got)


@dataclass(frozen=True)
class Premise:
    """A parsed `premise`: the bottleneck labels (normalised; empty when it asks for figures only),
    whether they must match (`negate` False) or must not (`negate` True), the figures whose
    bottleneck counts (empty: all the row reads), and the figures' thresholds."""

    text: str
    labels: tuple[str, ...]
    negate: bool
    scope: tuple[str, ...]
    thresholds: tuple[Threshold, ...] = ()

    def holds(self, bottleneck: str) -> bool:
        if not self.labels:
            return True
        hit = normalise_bottleneck(bottleneck) in self.labels
        return not hit if self.negate else hit

    def figures(self) -> tuple[str, ...]:
        """Every figure its thresholds read."""
        return tuple(f for t in self.thresholds for f in t.figures)


def normalise_bottleneck(label: str) -> str:
    """A bottleneck label as premises compare it: lower case, `_` as a space ("client_cpu" = "client CPU")."""
    return " ".join(str(label).replace("_", " ").lower().split())


_PREMISE = re.compile(r"^\s*(not\s+)?([^{}]+?)(?:\s+of\s+(.+))?\s*$", re.IGNORECASE | re.DOTALL)
_THRESHOLD = re.compile(r"^\s*at\s+least\s+([0-9]*\.?[0-9]+)\s+of\s+(one\s+of\s+)?(.+?)\s*$",
                        re.IGNORECASE | re.DOTALL)


def _metrics(text: str, where: str, premise: str) -> tuple[str, ...]:
    names = refs(where)
    rest = _REF.sub("", where).replace(",", "").strip()
    if not names or rest:
        raise ExpressionError(f"premise {premise!r}: `of` takes metrics in braces, separated by commas")
    for name in names:
        if name.startswith("param:") or not _REF_NAME.match(name):
            raise ExpressionError(f"premise {premise!r}: {{{name}}} is not a metric name")
    return names


@lru_cache(maxsize=256)
def parse_premise(text: str) -> Premise | None:
    """`[not] LABEL[|LABEL...] [of {metric}, ...]`, then any `; at least X of [one of] {metric}, ...`
    (or the thresholds alone), or None for an empty premise."""
    if not isinstance(text, str) or not text.strip():
        return None
    clauses = [c.strip() for c in text.split(";")]
    thresholds = []
    for clause in [c for c in clauses if _THRESHOLD.match(c)]:
        m = _THRESHOLD.match(clause)
        assert m is not None
        thresholds.append(Threshold(float(m.group(1)), _metrics(clause, m.group(3), text), bool(m.group(2))))
    labelled = [c for c in clauses if not _THRESHOLD.match(c)]
    if len(labelled) > 1 or (labelled and not labelled[0]) or not (labelled or thresholds):
        raise ExpressionError(f"premise {text!r}: write `[not] LABEL[|LABEL] [of {{metric}}, ...]`, then any "
                              "`; at least X of [one of] {metric}, ...`")
    if not labelled:
        return Premise(text.strip(), (), False, (), tuple(thresholds))
    m = _PREMISE.match(labelled[0])
    if not m:
        raise ExpressionError(f"premise {text!r}: write `[not] LABEL[|LABEL] [of {{metric}}, ...]`")
    labels = tuple(normalise_bottleneck(x) for x in m.group(2).split("|"))
    if not all(labels):
        raise ExpressionError(f"premise {text!r}: an empty bottleneck label")
    scope = _metrics(labelled[0], m.group(3), text) if m.group(3) else ()
    return Premise(text.strip(), labels, bool(m.group(1)), scope, tuple(thresholds))


# -- the ledger ----------------------------------------------------------------------------------

_NUMERIC = ("seed_value", "reference", "margin", "bound")
_FLAGS = ("", "yes")


def is_primary(rows: pd.DataFrame) -> pd.Series:
    """Which rows are their lesson's primary row (`primary` names the lesson); every row of a frame
    without that column (an older ledger without it: Holm over all rows, as in summary version 2)."""
    if "primary" not in rows:
        return pd.Series(True, rows.index)
    return rows["primary"].fillna("").astype(str) != ""


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
    named = df["primary"][df["primary"] != ""]
    if named.duplicated().any():
        raise ExpressionError(f"{path}: lessons with two primary rows {sorted(set(named[named.duplicated()]))}")
    if (df.loc[named.index, "kind"] != "measurement").any():
        raise ExpressionError(f"{path}: a primary row (`primary`: its lesson) must be a measurement row")
    problems = []
    for row in df.itertuples(index=False):
        problems += [f"{row.claim_id}: {p}" for p in _row_problems(row)]
    if problems:
        raise ExpressionError(f"{path}:\n  " + "\n  ".join(problems))
    for c in _NUMERIC:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    df["reference"] = df["reference"].fillna(1.0)
    df["machine_dependent"] = df["machine_dependent"] == "yes"
    near = [r.claim_id for r in df.itertuples(index=False)
            if r.kind == "measurement" and r.comparison == "ratio" and r.reference == 1.0
            and math.isfinite(r.seed_value) and r.seed_value > 0
            and abs(math.log(r.seed_value)) < math.log(1.0 + NEAR_NULL_MARGIN)]
    if near:
        raise ExpressionError(f"{path}: {', '.join(near)}: a seed number within {NEAR_NULL_MARGIN:.0%} of no "
                              f"difference is an equivalence claim: write the row as one (the band rule)")
    bands = [band(r.seed_value, r.reference, r.direction) if r.kind == "measurement" and r.comparison == "ratio"
             else (math.nan, math.nan) for r in df.itertuples(index=False)]
    df["band_low"] = [b[0] for b in bands]
    df["band_high"] = [b[1] for b in bands]
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
        elif row.seed_value and not out:
            try:
                band(float(row.seed_value), float(row.reference or 1.0), row.direction)
            except ExpressionError as e:
                out.append(str(e))
        if row.margin:
            out.append("a margin belongs to an equivalence row")
    elif row.comparison == "equivalence":
        if not row.margin or not float(row.margin) > 0:
            out.append("an equivalence row needs a margin > 0")
        if row.direction:
            out.append("an equivalence row has a margin, not a direction")
        if row.bound:
            out.append("a bound belongs to a ratio row (judged by the count of repeats past its reference)")
    if row.reference and not float(row.reference) > 0:
        out.append("reference must be > 0 (ratios are compared on the log)")
    if row.machine_dependent not in _FLAGS:
        out.append(f"machine_dependent must be empty or 'yes', got {row.machine_dependent!r}")
    if row.premise:
        if row.comparison == "absolute":
            out.append("an absolute row is never judged: it has no premise")
        try:
            premise = parse_premise(row.premise)
        except ExpressionError as e:
            out.append(str(e))
        else:
            read = set(refs(f"{row.a} {row.b}"))
            if premise is not None and read & set(premise.figures()):
                out.append(f"the premise's thresholds read {sorted(read & set(premise.figures()))}, which the "
                           "row tests: it would keep the repeats by the value it then judges")
    return out
