"""A lesson across boots, drawn: a forest plot.

One panel per lesson (`draw`): each pooled run's estimate with its interval over repeats (one line
per run, oldest at the top; the runs of one boot count once in the pool), the pooled estimate as a
diamond with its interval, the 90% prediction interval for a new run beneath it (from 3 boots), the
seed's band shaded and the null (or the seed's threshold) dotted. The numbers are
`harness.core.pooling.pooled_lessons`'s; nothing is computed here but positions.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..core import num
from ..core.pooling import over, short_id, unpooled

RUN_COLOUR, POOLED_COLOUR, BAND_COLOUR = "0.25", "tab:blue", "tab:green"


def band_of(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """The range a summary's claims row calls reproduced: its band, or for an equivalence row its
    margin around the reference. None for a row with neither (a direction with no seed figure)."""
    lo, hi = num.finite(row.get("band_low")), num.finite(row.get("band_high"))
    if lo is not None and hi is not None and 0 < lo < hi:
        return lo, hi
    margin, ref = num.finite(row.get("margin")), num.finite(row.get("reference")) or 1.0
    if row.get("comparison") == "equivalence" and margin is not None and margin > 0:
        return ref / (1 + margin), ref * (1 + margin)
    return None


def draw(ax: Any, pooled: Mapping[str, Any] | None, row: Mapping[str, Any] | None, title: str) -> None:
    """One lesson's forest plot on `ax` (log x axis). `pooled`: a row of `pooled_lessons`' frame;
    `row`: the lesson's claims row of the run the report is about (for the band and the reference).
    A lesson no run gives an interval for gets a line saying so instead of a plot."""
    ax.set_title(textwrap.fill(title, 52), fontsize=7, loc="left")
    runs = list((pooled or {}).get("per_run") or [])
    if not runs:
        ax.text(0.5, 0.5, "no run gives an interval", ha="center", va="center", fontsize=8, color="0.4",
                transform=ax.transAxes)
        why = str((pooled or {}).get("pi_reason") or "")
        if why:     # e.g. a premise no run met: the reader sees why the plot is empty
            ax.text(0.5, 0.3, textwrap.fill(why, 60), ha="center", va="center", fontsize=6, color="0.4",
                    transform=ax.transAxes)
        ax.set_axis_off()
        return
    labels = []
    for y, r in enumerate(runs):
        est = r["estimate"]
        ax.errorbar([est], [y], xerr=[[est - r["ci_low"]], [r["ci_high"] - est]], fmt="s", ms=3.5, capsize=2,
                    color=RUN_COLOUR, lw=1)
        labels.append(f"{short_id(r['run_id'])} ({r['ci_level']:.0%}, n={r['n']})")
    y = len(runs)
    if pooled and pooled.get("pooled"):
        est, lo, hi = pooled["estimate"], pooled["ci_low"], pooled["ci_high"]
        ax.fill([lo, est, hi, est], [y, y - 0.3, y, y + 0.3], color=POOLED_COLOUR)
        labels.append(f"pooled, {over(pooled['k'], pooled.get('n_runs'))}")
        y += 1
        if pooled.get("pi_low") is not None:
            ax.hlines(y, pooled["pi_low"], pooled["pi_high"], color=POOLED_COLOUR, lw=4, alpha=0.35)
            labels.append("a new run (90%)")
            y += 1
    band = band_of(row or {})
    if band is not None:
        ax.axvspan(*band, color=BAND_COLOUR, alpha=0.15, lw=0)
    ref = num.finite((row or {}).get("reference"))
    if ref is not None and ref > 0:
        ax.axvline(ref, color="0.4", ls=":", lw=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_ylim(len(labels) - 0.5, -0.5)    # oldest run at the top, the pooled rows at the bottom
    ax.tick_params(axis="x", labelsize=6)
    verdict = (pooled or {}).get("verdict") or ""
    note = (f"{verdict}; {pooled['agree_text']}" if pooled and pooled.get("pooled")
            else "one run: its own interval")
    note += "".join(f"; {run}: {why}" for run, why in unpooled(pooled))   # named, never dropped silently
    ax.set_xlabel(textwrap.fill(note, 70), fontsize=6)    # "k of K runs agree (...)" names every other run
