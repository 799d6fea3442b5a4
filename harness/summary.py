"""`<run>/summary.json`: the figures a reader can cite, with their intervals, and every claim's verdict.

Keys (issue 10, "Interface the checks read"; contract C3):
- `metrics`: one row per experiment, variant and metric: `experiment, variant, metric, unit, median,
  ci_low, ci_high, cv, n_repeats, unstable, stability, normalised, normalised_by, interpreter,
  bottleneck`. The interval is the 95% t-interval of the geometric mean on the log over repeats
  (harness.stats.summarise); `unstable` = CV >= 10% with n >= 5; `normalised` = median throughput /
  the matching in-run ceiling (harness.calibration.ceiling_for), null for anything but a throughput.
- `claims`: one row per ledger row (and interpreter) with `claim_id, seed, kind, comparison,
  verdict`, the figures it used (a and b medians, the ratio with its interval, n, the smallest
  detectable ratio), and `chance_wrong` beside the rows: how many verdicts chance alone would flip.
- `timing`: manifest["timing"] (per experiment `wall_s`, `measured_s`), plus the whole run's ratio.
- `calibration`: manifest["calibration"] (`before`, `after`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from . import calibration, claims, stats
from .analysis import metric_name
from .errors import HarnessError
from .store import Run, write_json_atomic

SUMMARY_VERSION = 1
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
    from . import registry

    try:
        exps = registry.all_experiments()
    except Exception:  # an experiment module that does not import: no headline flags, the rest stands
        return set()
    return {(name, m.name) for name, e in exps.items() for m in getattr(e, "headline", ())}


def metric_rows(run: Run, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's `metrics` rows from a C1 frame of per-repeat figures."""
    interpreter = claims._interpreter(run)
    headlines = headline_metrics()
    cal = run.manifest.get("calibration")
    rows = []
    if frame.empty:
        return rows
    for (exp, variant, metric), g in frame.groupby(["experiment", "variant", "metric"], sort=True):
        s = stats.summarise(g["value"].to_numpy())
        unit = str(g["unit"].iloc[0])
        normalised, by = None, None
        if unit in THROUGHPUT_UNITS and g["better"].iloc[0] == "higher":
            ceiling, which = calibration.ceiling_for(exp, cal)
            if ceiling:
                normalised, by = s["median"] / ceiling, which
        bottlenecks = sorted({b for b in g["bottleneck"] if isinstance(b, str) and b})
        rows.append({"experiment": exp, "variant": variant, "metric": metric, "unit": unit,
                     "median": s["median"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                     "cv": s["cv"], "n_repeats": s["n"], "unstable": s["unstable"],
                     "stability": s["stability"], "normalised": normalised, "normalised_by": by,
                     "interpreter": interpreter, "better": g["better"].iloc[0],
                     "headline": (exp, metric) in headlines,
                     "bottleneck": " / ".join(bottlenecks) or None})
    return rows


def claim_rows(evaluated: pd.DataFrame) -> list[dict[str, Any]]:
    keep = ["claim_id", "document", "kind", "comparison", "verdict", "seed_value", "seed_unit", "a", "b",
            "a_median", "b_median", "direction", "reference", "band_low", "band_high", "margin", "n",
            "value", "ci_low", "ci_high", "p_value", "detectable", "server", "interpreter", "missing"]
    out = []
    for r in evaluated[keep].to_dict("records"):
        r["seed"] = r.pop("document")
        out.append(r)
    return out


def timing(run: Run) -> dict[str, Any]:
    t = dict(run.manifest.get("timing") or {})
    wall = sum(float(v.get("wall_s") or 0) for v in t.values() if isinstance(v, dict))
    measured = sum(float(v.get("measured_s") or 0) for v in t.values() if isinstance(v, dict))
    return {"experiments": t, "wall_s": wall, "measured_s": measured,
            "measured_fraction": measured / wall if wall else None}


def build(run: Run) -> dict[str, Any]:
    frame, errors = claims.collect_frame(run)
    evaluated = claims.evaluate(run, frame=frame)
    return _clean({
        "summary_version": SUMMARY_VERSION,
        "run_id": run.id,
        "metrics": metric_rows(run, frame),
        "claims": claim_rows(evaluated),
        "chance_wrong": claims.chance_wrong(evaluated),
        "verdict_counts": claims.summary(evaluated).reset_index().to_dict("records"),
        "timing": timing(run),
        "calibration": run.manifest.get("calibration") or {},
        "ceilings": calibration.CEILING_WHY,
        "methods": {"single figure": "geometric mean over repeats, 95% Student t-interval on the log "
                                     "(scipy.stats); CV = std (ddof=1) / mean",
                    "comparison": "paired by repeat: 95% t-interval on the log of per-repeat ratios",
                    "equivalence": "TOST on the log ratio at 5% (90% interval inside the margin)",
                    "stability": "unstable when CV >= 10% with n >= 5; too few repeats to judge below 5"},
        "analysis_errors": errors,
    })


def write(run_path: Path) -> dict[str, Any]:
    """Compute and write `<run_path>/summary.json`; returns what it wrote."""
    run = Run(Path(run_path))
    out = build(run)
    write_json_atomic(run.path / "summary.json", out)
    return out


def load(run: Run) -> dict[str, Any]:
    """summary.json of a run, computed now if the run has none (runs made before it existed)."""
    f = run.path / "summary.json"
    if f.exists():
        return json.loads(f.read_text())
    return build(run)


# -- harness compare -------------------------------------------------------------------------------

def headline(summary: dict[str, Any]) -> pd.DataFrame:
    """The figures experiments declare as headlines (throughputs also normalised); every
    throughput when the summary predates the headline flag."""
    m = pd.DataFrame(summary.get("metrics", []))
    if m.empty:
        return m
    if "headline" in m.columns and m["headline"].fillna(False).astype(bool).any():
        return m[m["headline"].fillna(False).astype(bool)]
    return m[m["unit"].isin(THROUGHPUT_UNITS)]


def _fig(median, lo, hi, digits=4) -> str:
    if median is None or (isinstance(median, float) and math.isnan(median)):
        return "—"
    def known(v) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    if not (known(lo) and known(hi)):
        return f"{median:.{digits}g} (no interval)"
    return f"{median:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


# The compare functions take two runs' summaries (`load(run)`), so `compare_text` reads each run's
# summary once: for a run without summary.json, `load` computes it from the raw data.


def compare(sa: dict[str, Any], sb: dict[str, Any]) -> pd.DataFrame:
    """Headline figures of two runs side by side: absolute (median [95% interval]) and normalised,
    with each side's CV and n, and the ratio B / A of both."""
    ha, hb = headline(sa), headline(sb)
    if ha.empty and hb.empty:
        raise HarnessError(f"neither {sa.get('run_id')} nor {sb.get('run_id')} has a throughput figure "
                           "to compare")
    key = ["experiment", "variant", "metric"]
    both = ha.merge(hb, on=key, how="outer", suffixes=("_a", "_b"))
    rows = []
    for r in both.to_dict("records"):
        def g(k, side, r=r):
            v = r.get(f"{k}_{side}")
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else v
        ratio = (g("median", "b") / g("median", "a")) if g("median", "a") and g("median", "b") else None
        nratio = ((g("normalised", "b") / g("normalised", "a")) if g("normalised", "a") and g("normalised", "b")
                  else None)
        rows.append({"figure": metric_name(r["experiment"], r["variant"], r["metric"]),
                     "unit": g("unit", "a") or g("unit", "b"),
                     "A": _fig(g("median", "a"), g("ci_low", "a"), g("ci_high", "a")),
                     "A cv/n": _cvn(g("cv", "a"), g("n_repeats", "a"), g("unstable", "a")),
                     "B": _fig(g("median", "b"), g("ci_low", "b"), g("ci_high", "b")),
                     "B cv/n": _cvn(g("cv", "b"), g("n_repeats", "b"), g("unstable", "b")),
                     "B/A": f"{ratio:.3f}" if ratio else "—",
                     "A norm": f"{g('normalised', 'a'):.4g}" if g("normalised", "a") else "—",
                     "B norm": f"{g('normalised', 'b'):.4g}" if g("normalised", "b") else "—",
                     "B/A norm": f"{nratio:.3f}" if nratio else "—",
                     "by": g("normalised_by", "a") or g("normalised_by", "b") or ""})
    return pd.DataFrame(rows)


def compare_agreement(sa: dict[str, Any], sb: dict[str, Any]) -> dict[str, float]:
    """How closely two runs' headline throughputs agree, absolute and normalised by each run's own
    ceiling, over the figures that have a normalised value in both runs: `n`, and the median
    |B/A - 1| of each (`absolute`, `normalised`). Which of the two agrees better is the evidence for
    the README's advice on comparing runs across machines."""
    key = ["experiment", "variant", "metric"]
    ha, hb = headline(sa), headline(sb)
    if ha.empty or hb.empty or "normalised" not in ha.columns or "normalised" not in hb.columns:
        return {"n": 0, "absolute": math.nan, "normalised": math.nan}
    both = ha.merge(hb, on=key, suffixes=("_a", "_b")).dropna(subset=["normalised_a", "normalised_b"])
    both = both[(both["median_a"] > 0) & (both["normalised_a"] > 0)]
    return {"n": len(both),
            "absolute": stats.median_relative_change(both["median_b"] / both["median_a"]),
            "normalised": stats.median_relative_change(both["normalised_b"] / both["normalised_a"])}


# The two verdicts that contradict each other: a claim moving between them across runs means the
# verdict depends on the run (issue 10's test of two machines); moves into or out of
# `inconclusive` (or to and from `direction only`) are expected with few repeats.
OPPOSED = {"reproduced", "not reproduced"}


def compare_verdicts(sa: dict[str, Any], sb: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every measurement claim judged in either run: its verdict in A and B, and whether it moved
    (`same`, `moved`, or `OPPOSED` for reproduced <-> not reproduced); with the counts of each."""
    def verdicts(s: dict[str, Any]) -> dict[tuple[str, str], str]:
        return {(c["claim_id"], c.get("interpreter") or ""): c["verdict"] for c in s.get("claims", [])
                if c.get("kind") == "measurement" and c.get("verdict")
                and not str(c["verdict"]).startswith("not measured")}
    va, vb = verdicts(sa), verdicts(sb)
    rows = []
    for key in sorted(set(va) | set(vb)):
        a, b = va.get(key, "—"), vb.get(key, "—")
        change = "same" if a == b else ("OPPOSED" if {a, b} == OPPOSED else
                                        "only in one run" if "—" in (a, b) else "moved")
        rows.append({"claim": key[0], "interpreter": key[1], "A": a, "B": b, "change": change})
    df = pd.DataFrame(rows, columns=["claim", "interpreter", "A", "B", "change"])
    counts = {k: int((df["change"] == k).sum()) for k in ("same", "moved", "OPPOSED", "only in one run")}
    return df, counts


def _cvn(cv, n, unstable) -> str:
    if n is None:
        return "—"
    text = f"{100 * cv:.1f}%/{int(n)}" if cv is not None else f"—/{int(n)}"
    return text + (" UNSTABLE" if unstable else "")


def compare_text(run_a: Run, run_b: Run) -> str:
    sa, sb = load(run_a), load(run_b)
    df = compare(sa, sb)
    lines = [f"A = {run_a.id}", f"B = {run_b.id}"]
    for label, s in (("A", sa), ("B", sb)):
        cal = s.get("calibration") or {}
        parts = []
        for which in ("pgbench", "python_cpu"):
            before = (cal.get("before") or {}).get(which) or {}
            if before.get("median"):
                cv = before.get("cv")
                spread = f"cv {100 * cv:.1f}%, n={before.get('n')}" if cv is not None else f"n={before.get('n')}"
                parts.append(f"{which} {before['median']:.4g} {before.get('unit', '')} ({spread})")
        lines.append(f"{label} ceilings (before): " + ("; ".join(parts) or "none recorded"))
    ids = [((r.manifest.get("environment") or {}).get("machine") or {}).get("machine_id") for r in (run_a, run_b)]
    lines.append("machines: " + ("not recorded for both runs (runs before machine_id was kept): they may "
                                 "be one machine" if None in ids else
                                 "the same machine" if ids[0] == ids[1] else "two different machines")
                 + f" (machine_id A {ids[0] or '—'}, B {ids[1] or '—'})")
    lines.append("figures: median [95% interval]; norm = median / the run's matching ceiling "
                 "(pgbench tps for PostgreSQL, Mloops/s of pure Python for MongoDB and FastAPI)")
    lines.append(df.to_string(index=False))
    agree = compare_agreement(sa, sb)
    if agree["n"]:
        lines.append(f"agreement over {agree['n']} headline throughputs with a ceiling in both runs: "
                     f"median |B/A - 1| {100 * agree['absolute']:.1f}% absolute, "
                     f"{100 * agree['normalised']:.1f}% normalised")
    verdicts, counts = compare_verdicts(sa, sb)
    if len(verdicts):
        lines.append("")
        lines.append(f"verdicts of {len(verdicts)} measurement claims: {counts['same']} the same, "
                     f"{counts['moved']} moved (into or out of inconclusive, direction only, ...), "
                     f"{counts['OPPOSED']} between reproduced and not reproduced, "
                     f"{counts['only in one run']} judged in one run only")
        changed = verdicts[verdicts["change"] != "same"]
        if len(changed):
            lines.append(changed.to_string(index=False))
    return "\n".join(lines)


def stability_warnings(run: Run) -> list[str]:
    """One line per figure whose CV over repeats is >= 10% with n >= 5 (pyperf's rule), from the
    run's summary.json (none if the run has none)."""
    f = run.path / "summary.json"
    if not f.exists():
        return []
    rows = json.loads(f.read_text()).get("metrics", [])
    return [f"WARNING unstable: {metric_name(r['experiment'], r['variant'], r['metric'])} = {r['median']:.4g} "
            f"{r['unit']}, CV {100 * r['cv']:.1f}% over {r['n_repeats']} repeats"
            for r in rows if r.get("unstable")]
