"""Claims: every row of the seeds' ledger (`harness.core.ledger`, `claims_ledger.csv`) judged against a
run's repeats.

Margins, premises and the band rule (`ledger.band`: the seed's number within a factor of 2 either
way on a log scale, never nearer the null than halfway for an effect row, cut at the threshold for a
threshold row; a row with no seed number is `direction, no seed figure` at best)
were written into the ledger before the reference run, and are not moved after it.

Which repeats count. `n_ran` is the number of repeats in which any figure a row reads was measured;
`n_used` the number its verdict rests on; `reason` says why they differ, and why a row is
inconclusive when that is not the interval's doing:
- a repeat that lacks one of the row's figures is left out, and counted;
- a zero, a negative or a division by zero is evidence, never dropped: it has no log, so a ratio
  row with one is judged on the count of repeats on each side of the reference (the exact sign
  test, `stats.sign_test`), in which it counts (a zero lies below any reference); an equivalence
  row with one is `inconclusive`;
- a row with a premise (`premise`: the bottleneck under which the seed's sentence holds) is judged
  only on the repeats whose measured bottleneck (contract C1's `bottleneck`) matches; when those are
  no more than half of the repeats, its verdict is `premise not met`, naming the bottleneck measured.

The test of each judged row, at ALPHA = 5% one-sided on each side (the 90% two-sided interval,
`ci_level` 0.90 for every judged row):
- ratio rows: the t-interval on the log of the per-repeat values of a / b (harness.core.stats); the
  one-sided p-value of the seed's direction (`>`: H0 a / b <= reference) and of the opposite one;
- bounded rows (`bound`: a share capped at 1) and ratio rows with a zero: the exact sign test on
  the count of repeats past the reference (3 of 3 repeats gives p = 0.125: never decisive); their
  estimate is the median, with no interval on the figure (the reason gives the count and the
  Clopper-Pearson interval of the share of repeats on the seed's side, which never has zero width);
- equivalence rows: TOST inside the margin (the 90% interval their decision used is the one shown)
  and the one-sided p-value that the ratio lies outside the margin.
Verdicts, decided in this order:
    not comparable     comparison `absolute` (shown with its 95% interval, never judged)
    premise not met    the premise held in no more than half of the repeats
    equivalent         TOST inside the margin (equivalence rows)
    not reproduced     the opposite side is significant (the interval lies wholly on the side
                       opposite to the seed's; for equivalence rows: wholly outside the margin)
    reproduced         the seed's side is significant and, with a seed number, the interval
                       overlaps the band (count-judged rows: the median lies in the band)
    size not reproduced  the seed's side is significant, but the interval lies wholly outside the
                       band: the direction holds, the size departs from the seed's
    direction, no seed figure  the seed's side is significant and the row has no seed number
    inconclusive       neither side significant (the smallest effect the run could have detected is
                       shown); fewer than 2 repeats; an interval of zero width (every repeat equal:
                       no verdict rests on it); an equivalence row with a zero
plus `not measured in this run` when a figure is missing.

Multiple comparisons, by lesson. Each judged row runs two one-sided tests (its seed's
side and the opposite one). `verdict_raw` is each row's own verdict; `verdict` applies the
adjustment of the row's family (`adjust`, `error_family`): the ledger names one primary row per
lesson (`primary`, the README's twelve, written before any run), and Holm's step-down adjustment
runs over the primary rows' tests only, keeping the chance of even one false decisive lesson
verdict at 5% under any dependence between them; every other judged row is supporting, judged with
Benjamini-Hochberg's q over the supporting rows' tests (the expected share of false decisive
verdicts among them at 5%, under positive dependence: plausible, since they share windows and
repeats, but not known). A decisive verdict whose adjusted p or q is >= 5% becomes `inconclusive`.
Holm over all ~84 tests (version 2) spent the power of every lesson on the supporting rows: at
n = 3 its critical t was 29.

Removed from the earlier ledger, because they could not fail: Little's-law rows (in a closed loop,
clients / throughput is the mean latency by construction) and the per-connection and pool-bound
figures of seed 002 (set by the 10 ms pg_sleep parameter). The pool-bound claim is judged instead
by each model's throughput against the pool bound measured from calibration requests.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core import calibration, num, stats
from ..core.errors import HarnessError
from ..core.ledger import (  # noqa: F401 -- re-exported: the ledger's names are part of this module's API
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
    Premise,
    band,
    beyond_band,
    is_primary,
    load,
    normalise_bottleneck,
    parse,
    parse_premise,
    refs,
)
from ..core.store import Run
from ..core.verdicts import COLOURS as VERDICT_COLOURS  # noqa: F401 -- for the notebooks' badges and bars
from ..core.verdicts import (  # noqa: F401 -- re-exported: the verdict words are part of this module's API
    CONTEXT,
    DECISIVE,
    DIRECTION_NO_FIGURE,
    DIRECTION_ONLY,
    EQUIVALENT,
    INCONCLUSIVE,
    JUDGED,
    NOT_COMPARABLE,
    NOT_MEASURED,
    NOT_REPRODUCED,
    PREMISE_NOT_MET,
    REPRODUCED,
    SETUP_DIFFERS,
    SETUP_SAME,
    SIZE_NOT_REPRODUCED,
    STATUSES,
    VERDICTS,
)
from ..core.verdicts import colour as verdict_colour

ALPHA = stats.ALPHA
JUDGED_LEVEL = 1 - 2 * ALPHA     # every judged row: one-sided ALPHA on each side, the 90% interval
SHOWN_LEVEL = stats.CONFIDENCE   # absolute rows, shown and not judged: the 95% interval of any figure


# -- per-repeat figures of a run --------------------------------------------------------------------

def experiment_metrics(run: Run, name: str) -> pd.DataFrame:
    """Experiment `name`'s per-repeat figures of `run` (contract C1), as it declares and computes
    them (`Experiment.metrics`, `compute_metrics`); empty when the run holds no repeat of it."""
    from ..experiments import registry
    from ..experiments.analysis import MetricRows

    exp = registry.get(name)
    rows = MetricRows(name, exp.metrics)
    if name in run.experiments and run.repeat_dirs(name):
        exp.compute_metrics(run, rows)
    return rows.frame()


def run_metrics(run: Run) -> pd.DataFrame:
    """Every experiment's per-repeat figures of `run` in one frame (contract C1); an experiment
    that cannot compute its figures raises (collect_frame is the forgiving one, for the summary)."""
    frame, errors = collect_frame(run)
    if errors:
        name, error = next(iter(errors.items()))
        raise HarnessError(f"{name} could not compute its figures: {error}")
    return frame


def named(run: Run) -> dict[str, float]:
    """{dotted name: median over repeats} of run_metrics(run): for notebooks that print figures."""
    from ..experiments.analysis import named_medians

    return named_medians(run_metrics(run))


def collect_frame(run: Run) -> tuple[pd.DataFrame, dict[str, str]]:
    """Every registered experiment's per-repeat figures (contract C1) in one frame, and the errors of
    experiments that could not compute theirs (their claims stay unmeasured; the rest go on)."""
    from ..experiments import registry
    from ..experiments.analysis import METRIC_COLUMNS

    frames, errors = [], {}
    try:
        names = list(registry.all_experiments())
    except Exception as e:  # an experiment module that does not import
        return pd.DataFrame(columns=list(METRIC_COLUMNS)), {"harness.experiments.registry": f"{type(e).__name__}: {e}"}
    for name in names:
        try:  # one experiment at a time: one that fails leaves only its own claims unmeasured
            frames.append(experiment_metrics(run, name))
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
    frames = [f for f in frames if not f.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(METRIC_COLUMNS))
    return frame, errors


def by_repeat(frame: pd.DataFrame) -> dict[str, dict[int, float]]:
    """{dotted name: {repeat: value}} from a C1 frame."""
    from ..experiments.analysis import metric_name

    out: dict[str, dict[int, float]] = {}
    for row in frame.itertuples(index=False):
        out.setdefault(metric_name(row.experiment, row.variant, row.metric), {})[int(row.repeat)] = float(row.value)
    return out


def bottlenecks_by_repeat(frame: pd.DataFrame) -> dict[str, dict[int, str]]:
    """{dotted name: {repeat: bottleneck}} from a C1 frame, for the figures that name one."""
    from ..experiments.analysis import metric_name

    out: dict[str, dict[int, str]] = {}
    if "bottleneck" not in frame.columns:
        return out
    for row in frame.itertuples(index=False):
        if isinstance(row.bottleneck, str) and row.bottleneck:
            out.setdefault(metric_name(row.experiment, row.variant, row.metric), {})[int(row.repeat)] = row.bottleneck
    return out


@dataclass(frozen=True)
class Measured:
    """What judging reads of a run, read from it once (`measured`): its per-repeat figures (C1) and
    the errors of experiments that could not compute theirs, and from its manifest the interpreter,
    each experiment's entry (params, status), each server's label, the in-run calibration and the
    ceilings it gives each experiment, and each experiment's time. Judging works on this alone, so a
    run is read in one place (`measured`) and judged in another (`judge_measured`)."""
    run_id: str
    frame: pd.DataFrame
    errors: Mapping[str, str]
    interpreter: str
    experiments: Mapping[str, Mapping[str, Any]]
    servers: Mapping[str, str]
    calibration: Mapping[str, Any]
    ceilings: Mapping[str, tuple[float, str]]   # experiment: (value, which), `experiment_ceilings`
    timing: Mapping[str, Any]


def measured(run: Run, frame: pd.DataFrame | None = None) -> Measured:
    """Everything judging reads of `run` (its figures computed now unless `frame` is given)."""
    manifest = run.manifest
    interpreter = interpreter_label(manifest)
    frame, errors = collect_frame(run) if frame is None else (frame, {})
    servers = {role: run.server_label(role) for role in manifest.get("servers", {})}
    cal = dict(manifest.get("calibration") or {})
    return Measured(run_id=run.id, frame=frame, errors=errors, interpreter=interpreter,
                    experiments=dict(run.experiments), servers=servers, calibration=cal,
                    ceilings=experiment_ceilings(cal), timing=dict(manifest.get("timing") or {}))


def _param(experiments: Mapping[str, Mapping[str, Any]], name: str) -> float:
    """`experiment.field`, or `experiment.field.min` / `.max` for a grid (a list parameter);
    a grid without suffix reads as its largest value."""
    exp, _, field = name.partition(".")
    field, _, agg = field.partition(".")
    params = experiments.get(exp, {}).get("params", {})
    if field not in params or agg not in ("", "min", "max"):
        raise Missing(f"param:{name}")
    v = params[field]
    if isinstance(v, (list, tuple)):
        v = (min(v) if agg == "min" else max(v)) if v else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Missing(f"param:{name}")
    return float(v)


def per_repeat(experiments: Mapping[str, Mapping[str, Any]], series: Mapping[str, Mapping[int, float]],
               text: str) -> dict[int, float]:
    """An expression evaluated in each repeat that has any metric it reads: {repeat: value}. A repeat
    that lacks one of them, or in which the expression divides by zero or is not finite, gives NaN:
    it is kept (and counted by `evaluate`), never dropped silently. Raises Missing when a metric is
    not in the run at all, or no repeat has all of them."""
    if not text:
        return {}
    expr = parse(text, allow_variables=())
    metric_refs = [r for r in expr.refs if not r.startswith("param:")]
    for r in metric_refs:
        if r not in series:
            raise Missing(r)
    if metric_refs:
        have = [set(series[r]) for r in metric_refs]
        if not set.intersection(*have):
            raise Missing(f"no repeat has all of {', '.join(metric_refs)}")
        repeats = sorted(set.union(*have))
    else:
        repeats = [0]
    out = {}
    for k in repeats:
        if any(k not in series[r] for r in metric_refs):
            out[k] = math.nan
            continue

        def lookup(name: str, k=k) -> float:
            return _param(experiments, name[len("param:"):]) if name.startswith("param:") else series[name][k]
        try:
            v = float(expr.evaluate(lookup))
        except ZeroDivisionError:
            v = math.nan
        out[k] = v if math.isfinite(v) else math.nan
    return out


def _ratio(a: float, b: float) -> float:
    """a / b of one repeat: 0 when a is 0, +-inf when b is 0 and a is not, NaN for 0 / 0 or a
    missing figure. A zero and a division by zero are evidence (a zero lies below any reference)."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b


# -- verdicts ------------------------------------------------------------------------------------

def judge(row: Mapping[str, Any], values: np.ndarray) -> dict[str, Any]:
    """The verdict of one measurement row from the per-repeat values of a / b it uses (zeros,
    +-inf and NaN included: see the module docstring), before any multiple-comparison adjustment.

    `row` needs comparison, direction, reference, band_low, band_high, margin, bound (floats or NaN)
    and seed_value. Returns estimate, ci_low, ci_high, ci_level, method, p_value (the one-sided
    p-value of the verdict's side; for an inconclusive row, of the seed's side), `p_seed` and
    `p_opposite` (both one-sided tests, for the adjustment), detectable, verdict and reason."""
    comparison = row["comparison"]
    ref = num.finite(row.get("reference"))
    ref = 1.0 if ref is None else ref
    v = np.asarray(values, dtype=float)
    n = int(v.size)
    positive = v[np.isfinite(v) & (v > 0)]
    no_log = n - positive.size
    nan = math.nan
    out: dict[str, Any] = {"estimate": nan, "ci_low": nan, "ci_high": nan, "ci_level": JUDGED_LEVEL,
                           "method": "", "p_value": nan, "p_seed": nan, "p_opposite": nan, "detectable": nan,
                           "verdict": INCONCLUSIVE, "reason": ""}
    if comparison == "absolute":
        # a shown figure may be 0 (a share of no wait): summarise falls back to the arithmetic mean
        s = stats.summarise(v[np.isfinite(v)], confidence=SHOWN_LEVEL)
        out.update(estimate=s["estimate"], ci_low=s["ci_low"], ci_high=s["ci_high"], ci_level=SHOWN_LEVEL,
                   method=s["method"], verdict=NOT_COMPARABLE)
        return out
    if n == 0:
        out["verdict"] = NOT_MEASURED
        return out
    bounded = num.finite(row.get("bound")) is not None
    if comparison == "equivalence":
        return _judge_equivalence(row, v, positive, ref, out)
    if bounded or no_log:
        return _judge_count(row, v, ref, out, bounded)
    s = stats.log_ratio_summary(np.log(positive), reference=ref, confidence=JUDGED_LEVEL)
    out.update(estimate=s["ratio"], ci_low=s["ci_low"], ci_high=s["ci_high"], detectable=s["detectable_ratio"],
               method="geometric mean, t-interval on log")
    if n < 2:
        out["reason"] = "fewer than 2 repeats: no interval"
        return out
    if s["zero_width"]:
        out["reason"] = f"all {n} repeats gave the same value: a zero-width interval decides nothing"
        return out
    up = row["direction"] == ">"
    p_seed, p_opp = (s["p_greater"], s["p_less"]) if up else (s["p_less"], s["p_greater"])
    return _decide(row, out, p_seed, p_opp, (s["ci_low"], s["ci_high"]))


def _decide(row: Mapping[str, Any], out: dict[str, Any], p_seed: float, p_opp: float,
            where: tuple[float, float]) -> dict[str, Any]:
    """Ratio rows: the verdict from the two one-sided p-values, and the band held against `where`
    (the interval, or the median twice for a count-judged row)."""
    out.update(p_seed=p_seed, p_opposite=p_opp, p_value=p_seed)
    if p_opp < ALPHA:
        out.update(verdict=NOT_REPRODUCED, p_value=p_opp)
    elif p_seed < ALPHA:
        lo_b, hi_b = num.finite(row.get("band_low")), num.finite(row.get("band_high"))
        if lo_b is None or hi_b is None:
            out.update(verdict=DIRECTION_NO_FIGURE,
                       reason=_join(out["reason"], "no seed number: the direction is all there is to judge"))
        elif side := beyond_band(where, lo_b, hi_b):
            out.update(verdict=SIZE_NOT_REPRODUCED,
                       reason=_join(out["reason"], f"the direction holds; the size lies {side} the seed's band "
                                                   f"[{num.sig3(lo_b)}, {num.sig3(hi_b)}]"))
        else:
            out["verdict"] = REPRODUCED
    return out


def _judge_count(row: Mapping[str, Any], v: np.ndarray, ref: float, out: dict[str, Any],
                 bounded: bool) -> dict[str, Any]:
    n = int(v.size)
    t = stats.sign_test(v, ref)
    defined = v[~np.isnan(v)]
    med = float(np.median(defined)) if defined.size else math.nan
    up = row["direction"] == ">"
    seed_side = t["above"] if up else t["below"]
    share = (t["share_low"], t["share_high"]) if up else (t["below_share_low"], t["below_share_high"])
    why = (f"a share capped at {float(row['bound']):g}" if bounded else
           f"{int(np.sum(v == 0))} zero(s), {int(np.sum(v < 0))} negative, {int(np.sum(np.isinf(v)))} division(s) "
           f"by zero, {int(np.sum(np.isnan(v)))} undefined (0 / 0) among the repeats: no log")
    # no interval on the figure: the verdict rests on the count, whose own interval (the share of
    # repeats on the seed's side, Clopper-Pearson) never has zero width
    out.update(estimate=med, method="median; exact sign test on the count past the reference",
               reason=f"{why}: judged on the count, {seed_side} of {n} repeats on the seed's side of {ref:g} "
                      f"(exact sign test; that share's 90% interval [{share[0]:.2f}, {share[1]:.2f}])")
    if n < 2:
        out["reason"] = _join(out["reason"], "fewer than 2 repeats")
        return out
    p_seed, p_opp = (t["p_greater"], t["p_less"]) if up else (t["p_less"], t["p_greater"])
    return _decide(row, out, p_seed, p_opp, (med, med))


def _judge_equivalence(row: Mapping[str, Any], v: np.ndarray, positive: np.ndarray, ref: float,
                       out: dict[str, Any]) -> dict[str, Any]:
    n = int(v.size)
    logs = np.log(positive)
    s = stats.log_ratio_summary(logs, reference=ref, confidence=JUDGED_LEVEL)
    out.update(estimate=s["ratio"], ci_low=s["ci_low"], ci_high=s["ci_high"], detectable=s["detectable_ratio"],
               method="geometric mean; TOST, 90% t-interval on log")
    if positive.size < n:
        out["reason"] = (f"{n - positive.size} of {n} repeats gave a zero, a negative or a division by zero: "
                         "an equivalence row with one is inconclusive")
        return out
    if n < 2:
        out["reason"] = "fewer than 2 repeats: no interval"
        return out
    t = stats.tost(logs, float(row["margin"]), reference=ref)
    out.update(ci_low=t["ci90_low"], ci_high=t["ci90_high"], p_seed=t["p_value"], p_opposite=t["p_outside"],
               p_value=t["p_value"])
    if t["zero_width"]:
        out["reason"] = f"all {n} repeats gave the same value: a zero-width interval decides nothing"
        return out
    if t["equivalent"]:
        out["verdict"] = EQUIVALENT
    elif t["p_outside"] < ALPHA:
        out.update(verdict=NOT_REPRODUCED, p_value=t["p_outside"])
    return out


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _figure_label(name: str) -> str:
    """`asyncio_psycopg's pool_bound_frac` for `pg_models.slow.pool20.asyncio_psycopg.pool_bound_frac`."""
    parts = name.split(".")
    return f"{parts[-2]}'s {parts[-1]}" if len(parts) > 2 else name


def _premise_repeats(premise: Premise, names: tuple[str, ...], repeats: list[int],
                     labels: Mapping[str, Mapping[int, str]],
                     series: Mapping[str, Mapping[int, float]]) -> tuple[list[int], Counter]:
    """The repeats in which the premise holds: its label for every figure of `names` that has a
    bottleneck (a repeat with none recorded does not count), and each of its thresholds on the
    figures it names; and, counted, what the other repeats measured instead (their figures'
    labels joined by ` + `, or the figure below its threshold)."""
    met, missed = [], Counter()
    for k in repeats:
        got = [labels[m][k] for m in names if k in labels.get(m, {})]
        label = " + ".join(sorted(set(got))) or "none recorded"
        if premise.labels and not (got and all(premise.holds(g) for g in got)):
            missed[label] += 1
            continue
        values = {f: float(series[f][k]) if f in series and k in series[f] else math.nan for f in premise.figures()}
        below = next((t for t in premise.thresholds if not t.meets(values)), None)
        if below is not None:
            if below.any_of:
                missed[f"none of {len(below.figures)} figures at {below.at_least:g}"] += 1
            else:
                low = min(below.figures, key=lambda f: values[f] if not math.isnan(values[f]) else -math.inf)
                missed[f"{_figure_label(low)} below {below.at_least:g}"] += 1
            continue
        met.append(k)
    return met, missed


def _measured(names: tuple[str, ...], repeats: list[int], labels: Mapping[str, Mapping[int, str]]) -> str:
    """The bottleneck measured over `repeats` for the figures `names`, e.g. `client CPU 8/10, pool 2/10`."""
    seen: Counter = Counter()
    for k in repeats:
        got = sorted({labels[m][k] for m in names if k in labels.get(m, {})})
        if got:
            seen[" + ".join(got)] += 1
    return ", ".join(f"{label} {c}/{len(repeats)}" for label, c in seen.most_common())


def interpreter_label(manifest: Mapping[str, Any]) -> str:
    """`CPython 3.11.2`, `(free-threaded)` added where the GIL is off: the run's interpreter."""
    env = manifest.get("environment", {})
    py = env.get("python") or {}
    if isinstance(py, Mapping):
        impl = py.get("implementation", "")
        ver = py.get("version", "")
        label = f"{impl} {ver}".strip()
        if py.get("gil_enabled") is False:
            label += " (free-threaded)"
        return label or "unknown"
    return str(py) or "unknown"


def _experiment_state(experiments: Mapping[str, Mapping[str, Any]], names: tuple[str, ...]) -> str | None:
    """Why the experiments behind a claim give no number, if that is the reason."""
    for name in names:
        exp = name.split(":", 1)[-1].split(".", 1)[0]
        entry = experiments.get(exp)
        if entry is None:
            return f"experiment {exp} not in this run"
        if entry.get("status") in ("failed", "skipped"):
            return f"experiment {exp} {entry.get('status')}"
    return None


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else None


def experiment_ceilings(cal: Mapping[str, Any]) -> dict[str, tuple[float, str]]:
    """{experiment: (value, which)}: the run's in-run ceiling that matches the one each experiment
    declares, for the experiments whose ceiling the run measured (`cal` is the manifest's)."""
    from ..experiments import registry  # the experiments' declared ceilings

    try:   # a registry that fails to import leaves the rows without ceilings, as collect_frame its figures
        declared = {name: e.ceiling for name, e in registry.all_experiments().items()}
    except Exception:
        return {}
    out = {}
    for exp, ceiling in declared.items():
        value, which = calibration.ceiling_for(ceiling, cal)
        if value:
            out[exp] = (value, which)
    return out


def _ceiling(ceilings: Mapping[str, tuple[float, str]], names: tuple[str, ...]) -> str:
    """The in-run ceiling of the first experiment a row reads that has one, as a text (for
    machine-dependent rows)."""
    for exp in (n.split(":", 1)[-1].split(".", 1)[0] for n in names):
        if exp in ceilings:
            value, which = ceilings[exp]
            return f"{which} {value:.4g} {'M loops/s' if which == 'python_cpu' else 'tps'}"
    return ""


def evaluate(run: Run, frame: pd.DataFrame | None = None, ledger: pd.DataFrame | None = None) -> pd.DataFrame:
    """`judge_measured` on `run` as it is read now (`measured`; its figures computed unless `frame` is given)."""
    return judge_measured(measured(run, frame), ledger)


def judge_measured(facts: Measured, ledger: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every ledger row against a run's `facts`: the figures it used (medians of a and b over the
    repeats it used, the ratio a / b's estimate with its interval at `ci_level`, n_used of n_ran
    repeats, the smallest detectable ratio), its raw verdict and its verdict after its family's
    adjustment (`adjust`). `attrs["multiple_comparisons"]` says what the adjustment did."""
    series = by_repeat(facts.frame)
    labels = bottlenecks_by_repeat(facts.frame)
    ledger = load() if ledger is None else ledger
    experiments = facts.experiments
    rows = []
    for c in ledger.to_dict("records"):
        seed = num.finite(c["seed_value"])
        names = tuple(r for r in refs(c["a"]) + refs(c["b"]) if not r.startswith("param:"))
        premise = parse_premise(c.get("premise") or "")
        machine_dependent = bool(c.get("machine_dependent"))
        row = {"claim_id": c["claim_id"], "document": c["document"], "kind": c["kind"],
               "section": c["section"], "sentence": c["sentence"], "seed_value": seed,
               "seed_unit": c["seed_unit"], "comparison": c["comparison"], "direction": c["direction"],
               "reference": c["reference"], "band_low": c["band_low"], "band_high": c["band_high"],
               "margin": c["margin"], "bound": c.get("bound"), "premise": premise.text if premise else "",
               "machine_dependent": machine_dependent, "a": c["a"], "b": c["b"], "a_median": None,
               "b_median": None, "n": 0, "n_used": 0, "n_ran": 0, "estimate": None, "ci_low": None,
               "ci_high": None, "ci_level": None, "method": "", "p_value": None, "p_seed": None,
               "p_opposite": None, "p_adjusted": None, "detectable": None, "verdict_raw": CONTEXT,
               "verdict": CONTEXT, "reason": "", "bottleneck_measured": "", "server": "", "missing": "",
               "ceiling": _ceiling(facts.ceilings, names) if machine_dependent else "",
               "interpreter": facts.interpreter,
               "note": c["note"], "primary": c.get("primary", "")}
        if c["kind"] != "context":
            row["server"] = facts.servers.get(c["role"]) or f"no {c['role']} server in this run"
            try:
                a = per_repeat(experiments, series, c["a"])
                if c["kind"] == "setup":
                    row["a_median"] = _median(list(a.values()))
                    row["estimate"] = row["a_median"]
                    row["verdict"] = SETUP_SAME if seed is not None and row["estimate"] == seed else SETUP_DIFFERS
                else:
                    row.update(_measurement(c, a, per_repeat(experiments, series, c["b"]) if c["b"] else None,
                                            names, premise, labels, series))
            except Missing as m:
                row["verdict"] = NOT_MEASURED
                row["missing"] = _experiment_state(experiments, refs(c["a"]) + refs(c["b"])) or f"no {m.name}"
        if row["verdict_raw"] == CONTEXT:
            row["verdict_raw"] = row["verdict"]
        rows.append(row)
    out = adjust(pd.DataFrame(rows))
    out.attrs["metric_errors"] = dict(facts.errors)
    out.attrs["run_id"] = facts.run_id
    return out


def _measurement(c: Mapping[str, Any], a: dict[int, float], b: dict[int, float] | None, names: tuple[str, ...],
                 premise: Premise | None, labels: Mapping[str, Mapping[int, str]],
                 series: Mapping[str, Mapping[int, float]]) -> dict[str, Any]:
    """The fields of a measurement row: which repeats ran and were used, and its raw verdict."""
    b = b if b is not None else {k: 1.0 for k in a}
    ran = sorted(set(a) | set(b))
    reasons = []
    missing = [k for k in ran if math.isnan(a.get(k, math.nan)) or math.isnan(b.get(k, math.nan))]
    # a figure absent from a repeat (or an expression undefined in it) is left out, and counted;
    # a division a / b by zero is not: _ratio makes it a signed infinity (or NaN for 0 / 0)
    absent = [k for k in missing if k not in a or k not in b or math.isnan(a[k]) or math.isnan(b[k])]
    used = [k for k in ran if k not in absent]
    if absent:
        reasons.append(f"{len(absent)} of {len(ran)} repeats lack a figure or divide by zero inside a or b "
                       f"(repeat {', '.join(map(str, absent))}): left out")
    scope = (premise.scope or names) if premise else names
    out: dict[str, Any] = {"n_ran": len(ran), "bottleneck_measured": _measured(scope, ran, labels)}
    if premise is not None and c["comparison"] != "absolute":
        met, missed = _premise_repeats(premise, scope, used, labels, series)
        if len(met) * 2 <= len(ran):
            other = ", ".join(f"{why} in {n}" for why, n in missed.most_common())
            out.update(verdict=PREMISE_NOT_MET, verdict_raw=PREMISE_NOT_MET, n_used=0, n=0,
                       reason=_join(*reasons, f"premise '{premise.text}' held in {len(met)} of {len(ran)} repeats; "
                                              f"measured: {other or 'none'}"),
                       a_median=_median([a[k] for k in used if k in a]),
                       b_median=_median([b[k] for k in used if k in b]) if c["b"] else None)
            return out
        if len(met) < len(used):
            reasons.append(f"premise '{premise.text}' held in {len(met)} of {len(ran)} repeats: judged on those")
        used = met
    values = np.array([_ratio(a[k], b[k]) for k in used], dtype=float)
    out.update(n_used=len(used), n=len(used), a_median=_median([a[k] for k in used]),
               b_median=_median([b[k] for k in used]) if c["b"] else None)
    got = judge(c, values)
    got["reason"] = _join(*reasons, got["reason"])
    got["verdict_raw"] = got["verdict"]
    out.update(got)
    return out


def adjust(evaluated: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Error control by lesson, over every one-sided test of the judged rows (two per row: the
    seed's side, `p_seed`, and the opposite one, `p_opposite`), in two families:
    - the primary rows (the ledger's `primary`: one per lesson, named before any run): Holm's
      step-down adjustment, which keeps the chance of even one false decisive lesson verdict at
      alpha under any dependence;
    - every other judged row, supporting: Benjamini-Hochberg q-values, which keep the expected
      share of false decisive verdicts among the supporting rows' decisive ones at alpha (under
      positive dependence between their tests, which is plausible but not known here: they share
      windows and repeats).
    `p_adjusted` is the adjusted p-value (Holm) or q-value (BH) of the row's `p_value`;
    `error_family` says which; a decisive `verdict_raw` whose adjusted value is >= alpha becomes
    an `inconclusive` `verdict`. Without a `primary` column (an old ledger), every row is primary:
    Holm over all, as before. `attrs["multiple_comparisons"]`: method, alpha, tested (rows),
    hypotheses (one-sided tests), undone (claim ids whose decisive verdict was undone), families
    (the same per family) and guarantee."""
    out = evaluated.copy()
    primary = is_primary(out)
    out["error_family"] = np.where(primary, "primary", "supporting")
    out["p_adjusted"] = None
    undone: list[str] = []
    families: dict[str, dict[str, Any]] = {}
    for family, adjust_p, word in (("primary", stats.holm, "Holm's adjustment over the primary rows"),
                                   ("supporting", stats.benjamini_hochberg,
                                    "Benjamini-Hochberg's q over the supporting rows")):
        tests, where = [], []
        for i, r in out[out["error_family"] == family].iterrows():
            for side in ("p_seed", "p_opposite"):
                p = r.get(side)
                if num.finite(p) is not None:
                    tests.append(float(p))
                    where.append((i, side))
        by = {key: float(p) for key, p in zip(where, adjust_p(tests) if tests else [])}
        undone_here = []
        for i, r in out[out["error_family"] == family].iterrows():
            if num.finite(r.get("p_value")) is None:
                continue
            side = "p_opposite" if r["verdict_raw"] == NOT_REPRODUCED else "p_seed"
            p_adj = by.get((i, side))
            out.at[i, "p_adjusted"] = p_adj
            if r["verdict_raw"] in DECISIVE and p_adj is not None and not p_adj < alpha:
                out.at[i, "verdict"] = INCONCLUSIVE
                out.at[i, "reason"] = _join(r["reason"], f"{r['verdict_raw']} before {word}; adjusted p = "
                                                         f"{p_adj:.3g} >= {alpha:g} over {len(tests)} one-sided tests")
                undone_here.append(r["claim_id"])
        families[family] = {"tested": len({i for i, _ in where}), "hypotheses": len(tests), "undone": undone_here}
        undone += undone_here
    if not primary.all():
        method = "holm (primary rows) + bh (supporting rows)"
        guarantee = (f"Holm's step-down adjustment over the {families['primary']['hypotheses']} one-sided tests of "
                     f"the {families['primary']['tested']} primary rows (one per lesson) keeps the chance of even one "
                     f"false decisive lesson verdict at {alpha:.0%} or less, whatever the dependence between them; "
                     f"Benjamini-Hochberg's q over the {families['supporting']['hypotheses']} tests of the "
                     f"{families['supporting']['tested']} supporting rows keeps the expected share of false decisive "
                     f"verdicts among theirs at {alpha:.0%} under positive dependence.")
    else:
        method = "holm"
        guarantee = (f"Holm's step-down adjustment over the {families['primary']['hypotheses']} one-sided tests of the "
                     f"{families['primary']['tested']} judged rows keeps the chance of even one false decisive "
                     f"verdict at {alpha:.0%} or less, whatever the dependence between rows.")
    out.attrs["multiple_comparisons"] = {
        "method": method, "alpha": alpha, "tested": sum(int(f["tested"]) for f in families.values()),
        "hypotheses": sum(int(f["hypotheses"]) for f in families.values()), "undone": undone,
        "families": families, "guarantee": guarantee}
    return out


def summary(evaluated: pd.DataFrame) -> pd.DataFrame:
    """Verdict counts by kind, per seed (measurement rows only), with the rows judged per seed."""
    m = evaluated[evaluated["kind"] == "measurement"]
    t = pd.crosstab(m["document"], m["verdict"])
    t = t.reindex(columns=[v for v in VERDICTS if v in t.columns], fill_value=0)
    t["judged"] = t[[v for v in JUDGED if v in t.columns]].sum(axis=1)
    return t




def _pfmt(x) -> str:
    return f"{x:.2g}" if num.known(x) else "—"


def style(evaluated: pd.DataFrame, columns: tuple[str, ...] = (
        "claim_id", "sentence", "seed_value", "seed_unit", "comparison", "estimate", "ci_low", "ci_high",
        "ci_level", "n_used", "n_ran", "p_value", "p_adjusted", "detectable", "verdict_raw", "verdict", "reason",
        "bottleneck_measured", "server", "missing")):
    """The evaluation as a pandas Styler: one colour per verdict, numbers to 3 significant digits."""
    df = evaluated[[c for c in columns if c in evaluated.columns]].copy()

    def fmt(x):
        if not num.known(x):
            return "—"
        if float(x).is_integer() or abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}"

    def colour(row):
        c = verdict_colour(str(row.get("verdict")), background=True)
        return [f"background-color: {c}"] * len(row)

    return (df.style.apply(colour, axis=1)
            # one format call: a second one without `subset` resets the first one's columns
            .format({**{k: fmt for k in ("seed_value", "estimate", "ci_low", "ci_high", "detectable", "n_used",
                                         "n_ran") if k in df.columns},
                     **{k: _pfmt for k in ("p_value", "p_adjusted", "ci_level") if k in df.columns}})
            .hide(axis="index")
            .set_properties(subset=[c for c in ("sentence",) if c in df.columns],
                            **{"text-align": "left", "min-width": "28em"})
            .set_properties(**{"vertical-align": "top", "font-size": "0.85em"}))
