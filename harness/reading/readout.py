"""What `harness compare`, `show` and `history` share: a stored run's summary and headline figures,
the facts its manifest records (machine, ceilings, interpreter, packages, placement, commit), and
how a figure is printed beside its interval and spread.

Everything here works from a run's manifest.json and summary.json alone (a run under data/history
keeps nothing else); summaries are read only through `store.load_summary` (every older format
upgraded to the current one by `store.upgrade_summary`). A run that has raw data but no summary
(runs made before summaries existed) has one computed, and upgraded the same way.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..core import calibration, num, stats, store
from ..core.checked import commit, interpreter, packages, placement  # noqa: F401 -- shared with compare
from ..core.store import Manifest, Run
from ..experiments import registry
from ..judging.summary import THROUGHPUT_UNITS


def summary_of(run: Run) -> dict[str, Any]:
    """The run's summary in the current format: its summary.json through `store.load_summary`; for a
    run with raw data and no summary.json, computed now. A one-line HarnessError otherwise."""
    if store.summary_path(run).exists() or not run.has_raw_data():
        return store.load_summary(run)
    from ..judging import summary

    return store.upgrade_summary(summary.build(run), f"{run.path} (computed from its raw data)")


def headline(summary: dict[str, Any]) -> pd.DataFrame:
    """The figures experiments declare as headlines (throughputs also normalised); every
    throughput when the summary predates the headline flag. `estimate` is the figure's point estimate
    (the one its interval belongs to; the median for a version-1 summary)."""
    m = pd.DataFrame(summary.get("metrics", []))
    if m.empty:
        return m
    if "estimate" not in m.columns:
        m["estimate"] = m["median"] if "median" in m.columns else math.nan
    m["estimate"] = m["estimate"].where(m["estimate"].notna(), m.get("median"))
    if "headline" in m.columns and m["headline"].fillna(False).astype(bool).any():
        return m[m["headline"].fillna(False).astype(bool)]
    return m[m["unit"].isin(THROUGHPUT_UNITS)]


def fig(median, lo, hi, digits=4) -> str:
    """`estimate [low, high]` to `digits` significant figures; `(no interval)` without both ends."""
    if not num.known(median):
        return "—"
    if not (num.known(lo) and num.known(hi)):
        return f"{median:.{digits}g} (no interval)"
    return f"{median:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def cvn(cv, n, unstable) -> str:
    """`CV%/n` over the repeats, marked UNSTABLE when the summary says so."""
    if not num.known(n):
        return "—"
    text = f"{100 * cv:.1f}%/{int(n)}" if num.known(cv) else f"—/{int(n)}"
    return text + (" UNSTABLE" if unstable is True else "")


CEILING_UNITS = {"pgbench": "tps", "python_cpu": "M loops/s"}


def machine_of(manifest: Manifest) -> dict[str, Any]:
    return dict(store.machine_record(manifest))


def ceilings(summary: dict[str, Any] | None, manifest: Manifest) -> dict[str, dict[str, Any]]:
    """The run's in-run ceilings (calibration before and after): which -> {value, cv, n}, value as
    `calibration.ceiling_for` gives it (pgbench in tps, python_cpu in millions of loops/s)."""
    cal = (summary or {}).get("calibration") or manifest.get("calibration") or {}
    out: dict[str, dict[str, Any]] = {}
    for which in calibration.CEILINGS:
        value, _ = calibration.ceiling_for(which, cal)
        if value:
            values = [v for when in ("before", "after") for v in
                      (((cal.get(when) or {}).get(which) or {}).get("values") or []) if v and v > 0]
            s = stats.summarise(values)
            out[which] = {"value": value, "cv": s["cv"] if num.known(s["cv"]) else None, "n": len(values)}
    return out


def ceiling_text(c: dict[str, dict[str, Any]]) -> str:
    parts = []
    for which, v in c.items():
        spread = f", cv {100 * v['cv']:.1f}% over {v['n']}" if v.get("cv") is not None else f", n={v['n']}"
        parts.append(f"{which} {num.sig3(v['value'])} {CEILING_UNITS.get(which, '')}{spread}")
    return "; ".join(parts) or "none recorded"


def short(v: Any, n: int = 8) -> str:
    return str(v)[:n] if v else "—"


def clip(text: Any, n: int = 70) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= n else t[:n - 1] + "…"


def drivers() -> dict[str, tuple[str, ...]]:
    """The packages whose versions are the drivers and frameworks under test -> the experiments
    whose figures they shape, as each experiment declares them (`Experiment.drivers`)."""
    return registry.drivers()


def claims_json(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measurement claim of a summary as `--json` gives it: id, interpreter, verdict and its
    estimate with the interval it was judged on."""
    keys = ("estimate", "ci_low", "ci_high", "ci_level")
    return [{"claim_id": c.get("claim_id"), "interpreter": c.get("interpreter") or "", "verdict": c.get("verdict"),
             **{k: num.finite(c.get(k)) for k in keys}}
            for c in summary.get("claims", []) if c.get("kind") == "measurement"]


def headline_json(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline figures as `--json` gives them."""
    keys = ("experiment", "variant", "metric", "unit", "estimate", "ci_low", "ci_high", "ci_level", "cv",
            "n_repeats", "unstable", "normalised")
    h = headline(summary)
    return [{k: (num.finite(r.get(k)) if isinstance(r.get(k), float) else r.get(k)) for k in keys}
            for r in (h.to_dict("records") if len(h) else [])]
