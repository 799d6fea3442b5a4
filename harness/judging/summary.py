"""`<run>/summary.json` (version 4, `store.SUMMARY_VERSION`): the figures a reader can cite, with
their intervals, and every claim's verdict.

Keys (contract C3):
- `metrics`: one row per experiment, variant and metric: `experiment, variant, metric, unit,
  estimate, ci_low, ci_high, ci_level, median, cv, n_repeats, unstable, stability, normalised,
  normalised_by, interpreter, bottleneck`. `estimate` is the geometric mean over repeats (the
  arithmetic mean when a value is <= 0; `method` says which), the centre of its interval `ci_low,
  ci_high`: the 95% t-interval on the log (harness.core.stats.summarise). `median` is the median over
  repeats, shown beside it: it is not the centre of that interval and may lie outside it.
  `unstable` = CV >= 10% with n >= 5; `normalised` = median throughput / the in-run ceiling its
  experiment declares (`Experiment.ceiling`, valued by harness.core.calibration.ceiling_for), null for
  anything but a throughput.
- `claims`: one row per ledger row (and interpreter): `claim_id, seed, kind, comparison, section,
  sentence, verdict` (after Holm's adjustment), `verdict_raw` (before it), `seed_value, seed_unit,
  a_median, b_median, estimate` (the ratio a / b's geometric mean, or the median for a row judged on
  the count of repeats), `ci_low, ci_high, ci_level` (the interval the verdict used: 0.90 for every
  judged row, 0.95 for a row shown and not judged), `n_used, n_ran, reason, p_value` (one-sided, of
  the verdict's side), `p_adjusted` (Holm), `detectable, band_low, band_high, margin, reference,
  direction, premise, bottleneck_measured, machine_dependent` (with `ceiling`, the run's matching
  in-run ceiling, beside a machine-dependent row), `server, interpreter, missing` (harness.judging.claims).
- `multiple_comparisons`: `method` ("holm"), `alpha`, `tested` (judged rows with a test),
  `hypotheses` (their one-sided tests), `undone` (claim ids whose decisive verdict Holm's
  adjustment undid) and `guarantee`, one sentence saying what the correction guarantees.
- `timing`: manifest["timing"] (per experiment `wall_s`, `measured_s`), plus the whole run's ratio.
- `calibration`: manifest["calibration"] (`before`, `after`).

Against version 1: metrics publish `estimate` beside `median`; claims carry the raw and the
adjusted verdict, the interval the decision used, the repeats used of those run, the premise and
the machine-dependence; `chance_wrong` is gone (it was not sound: see `multiple_comparisons`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import calibration, stats, store
from ..core.store import Run, write_json_atomic
from ..experiments.analysis import metric_name
from . import claims

SUMMARY_VERSION = store.SUMMARY_VERSION   # one number, the store's (it upgrades every older one)
THROUGHPUT_UNITS = ("req/s", "queries/s", "transactions/s")


def _clean(x: Any) -> Any:
    """JSON-safe: NaN and inf become null; numpy scalars become Python numbers."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def headline_metrics() -> set[tuple[str, str]]:
    """(experiment, metric) of every figure an experiment declares as a headline (Experiment.headline)."""
    from ..experiments import registry

    try:
        exps = registry.all_experiments()
    except Exception:  # an experiment module that does not import: no headline flags, the rest stands
        return set()
    return {(name, m.name) for name, e in exps.items() for m in getattr(e, "headline", ())}


def metric_rows(facts: claims.Measured) -> list[dict[str, Any]]:
    """summary.json's `metrics` rows from a run's per-repeat figures (its C1 frame)."""
    frame, interpreter = facts.frame, facts.interpreter
    headlines = headline_metrics()
    rows = []
    if frame.empty:
        return rows
    for (exp, variant, metric), g in frame.groupby(["experiment", "variant", "metric"], sort=True):
        s = stats.summarise(g["value"].to_numpy())
        unit = str(g["unit"].iloc[0])
        normalised, by = None, None
        if unit in THROUGHPUT_UNITS and g["better"].iloc[0] == "higher":
            if exp in facts.ceilings:   # the ceiling it declares, measured in this run
                ceiling, which = facts.ceilings[exp]
                normalised, by = s["median"] / ceiling, which
        bottlenecks = sorted({b for b in g["bottleneck"] if isinstance(b, str) and b})
        rows.append({"experiment": exp, "variant": variant, "metric": metric, "unit": unit,
                     "estimate": s["estimate"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                     "ci_level": stats.CONFIDENCE, "method": s["method"], "median": s["median"],
                     "cv": s["cv"], "n_repeats": s["n"], "unstable": s["unstable"],
                     "stability": s["stability"], "normalised": normalised, "normalised_by": by,
                     "interpreter": interpreter, "better": g["better"].iloc[0],
                     "headline": (exp, metric) in headlines,
                     "bottleneck": " / ".join(bottlenecks) or None})
    return rows


CLAIM_KEYS = ("claim_id", "document", "kind", "comparison", "section", "sentence", "verdict", "verdict_raw",
              "seed_value", "seed_unit", "a", "b", "a_median", "b_median", "estimate", "ci_low", "ci_high",
              "ci_level", "method", "n_used", "n_ran", "reason", "p_value", "p_adjusted", "detectable",
              "band_low", "band_high", "margin", "bound", "reference", "direction", "premise",
              "bottleneck_measured", "machine_dependent", "ceiling", "server", "interpreter", "missing",
              "primary", "error_family")


def claim_rows(evaluated: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's `claims` rows from `claims.evaluate` (the keys of the module docstring; `seed`
    is the ledger's `document`)."""
    out = []
    for r in evaluated[list(CLAIM_KEYS)].to_dict("records"):
        r["seed"] = r.pop("document")
        r["machine_dependent"] = bool(r["machine_dependent"])
        out.append(r)
    return out


def timing(experiments: Mapping[str, Any]) -> dict[str, Any]:
    """The run's time: each experiment's wall and measured seconds (the manifest's `timing`), summed."""
    t = dict(experiments)
    wall = sum(float(v.get("wall_s") or 0) for v in t.values() if isinstance(v, dict))
    measured = sum(float(v.get("measured_s") or 0) for v in t.values() if isinstance(v, dict))
    return {"experiments": t, "wall_s": wall, "measured_s": measured,
            "measured_fraction": measured / wall if wall else None}


def methods(multiple_comparisons: dict[str, Any]) -> dict[str, str]:
    """What each figure and verdict of the summary was computed by, from the constants that computed
    them and, for the error control, the text `claims.adjust` wrote for the families it adjusted."""
    judged = f"{claims.JUDGED_LEVEL:.0%}"
    return {
        "single figure": f"estimate = geometric mean over repeats, the centre of its {stats.CONFIDENCE:.0%} Student "
                         "t-interval on the log (scipy.stats); the median beside it; CV = std (ddof=1) / mean",
        "comparison": f"paired by repeat: one-sided t-tests at {stats.ALPHA:.0%} on each side on the log of "
                      f"per-repeat ratios (the {judged} t-interval); a bounded share, or a ratio with a zero, on "
                      "the count of repeats past the reference (exact sign test)",
        "equivalence": f"TOST on the log ratio at {stats.ALPHA:.0%} ({judged} interval inside the margin)",
        "multiple comparisons": str(multiple_comparisons.get("guarantee") or "none applied"),
        "stability": f"unstable when CV >= {stats.UNSTABLE_CV:.0%} with n >= {stats.MIN_REPEATS_FOR_STABILITY}; "
                     f"too few repeats to judge below {stats.MIN_REPEATS_FOR_STABILITY}",
    }


def build(run: Run) -> dict[str, Any]:
    """summary.json of `run`: read once (`claims.measured`), then judged (`from_facts`)."""
    facts = claims.measured(run)
    return from_facts(facts)


def from_facts(facts: claims.Measured) -> dict[str, Any]:
    """summary.json from what was read of a run: its figures, its claims judged, its time."""
    evaluated = claims.judge_measured(facts)
    out = _clean({
        "summary_version": SUMMARY_VERSION,
        "run_id": facts.run_id,
        "metrics": [],   # filled last, keeping its place: its statistics are the one way down (core.stats)
        "claims": claim_rows(evaluated),
        "multiple_comparisons": evaluated.attrs.get("multiple_comparisons", {}),
        "verdict_counts": claims.summary(evaluated).reset_index().to_dict("records"),
        "timing": timing(facts.timing),
        "calibration": dict(facts.calibration),
        "ceilings": calibration.CEILING_WHY,
        "methods": methods(evaluated.attrs.get("multiple_comparisons", {})),
        "analysis_errors": dict(facts.errors),
    })
    out["metrics"] = _clean(metric_rows(facts))
    return out


def write(run_path: Path) -> dict[str, Any]:
    """Compute and write `<run_path>/summary.json`; returns what it wrote."""
    run = Run(Path(run_path))
    out = build(run)
    write_json_atomic(run.path / "summary.json", out)
    return out


def load(run: Run) -> dict[str, Any]:
    """summary.json of a run through `store.load_summary` (upgraded to the current version), computed
    now if the run has none (runs made before it existed)."""
    if store.summary_path(run).exists():
        return store.load_summary(run)
    return build(run)


def stability_line(run: Run) -> str | None:
    """One line for the end of a run: how many figures are unstable and where to read them (None
    when none is); the figures themselves are `stability_warnings`, as `harness show` prints them."""
    n = len(stability_warnings(run))
    if not n:
        return None
    return (f"WARNING {n} figure{'s' if n != 1 else ''} unstable (CV >= {stats.UNSTABLE_CV:.0%} over "
            f"{stats.MIN_REPEATS_FOR_STABILITY} or more repeats): `harness show {run.id}` lists them")


def stability_warnings(run: Run) -> list[str]:
    """One line per figure whose CV over repeats is >= 10% with n >= 5 (pyperf's rule), from the
    run's summary.json (none if the run has none)."""
    if not store.summary_path(run).exists():
        return []
    rows = store.load_summary(run).get("metrics", [])
    return [f"WARNING unstable: {metric_name(r['experiment'], r['variant'], r['metric'])} = {r['median']:.4g} "
            f"{r['unit']}, CV {100 * r['cv']:.1f}% over {r['n_repeats']} repeats"
            for r in rows if r.get("unstable")]
