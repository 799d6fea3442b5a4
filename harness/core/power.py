"""Repeats set by power, before the run: how many repeats each lesson's primary
row needs, from the spread the committed runs already show.

A judged row's verdict rests on the 90% t-interval of the mean of its per-repeat log values
(harness.judging.claims): half-width h(n) = t_{n-1, 0.95} sd / sqrt(n), sd the standard deviation of the
per-repeat log values. Its verdict changes where the interval crosses an edge: the reference (the
null, or a stated threshold), a band edge (`ledger.band`), or an equivalence margin. So the row can
be decided when the interval is narrow beside the distance from the expected estimate to the
nearest such edge. THE RULE (written before the next reference run): a row's repeats are enough
when h(n) <= half that distance, d / 2; `repeats_for` gives the smallest such n.

At which level (`decision_level`). A lesson is decided when its primary row's null test (the
reference of a ratio row, the margin of an equivalence row) survives Holm's adjustment over the
primary family's one-sided tests (harness.judging.claims.adjust): whatever the other rows' p-values, a row
whose one-sided p is below alpha / m (m tests) survives it, and that is the two-sided interval at
1 - 2 alpha / m clearing the edge. The plan holds the null edge to that level (held to the
unadjusted 90%, a lesson planned "3 planned >= 3 needed" can still read `inconclusive` at Holm's
level). The band's edges only choose between two decisive words
(`reproduced` when the 90% interval overlaps the band, `size not reproduced` when it lies wholly
outside): they are shown (`band_edge`, `band_repeats`) and do not set `needed`.

Which word a run will read (`band_word`). Repeats narrow one run's interval, but the runs' estimates
also spread between runs (hours, boots). A run with n repeats reads `size not reproduced` when its
estimate lies beyond the band's nearest edge E by more than its half-width h(n), so with the runs'
estimates spread normally on the log scale around the expected estimate (sd: their spread between
runs) the share of runs that read the likelier word is Phi(|mu - (log E +- h(n))| / sd_between).
It is the chance that a new run's word agrees with the typical run's, written before the run; the
committed runs' own words against today's band (their intervals as stored) are counted beside it
(`band_seen`), so the forecast can be checked. A lesson whose share is far below 1 can read either
word in the next run whatever its repeats: its answer is the pooled row (harness.core.pooling).

Where the numbers come from (`row_spread`). Every committed run that judged the row on an interval
gives its log estimate, its standard error se and its n (`pooling.row_input`: the interval inverted
exactly); its per-repeat spread is sd = se sqrt(n). The expected estimate is the median of the runs'
log estimates, and sd the median of their sd: the typical run, not the luckiest. The spread between
runs (boots) is not in sd: a run's repeats share its machine's state (Kalibera and Jones, Rigorous
Benchmarking in Reasonable Time, ISMM 2013: repetitions at the level with the larger variance buy the
most precision), which is what pooling across boots (harness.core.pooling) answers; within one run,
more repeats narrow only the within-run part, and `plan` says how far the runs' estimates spread.

A row with no committed interval (not yet measured, judged on counts, a premise never met) has no
spread to plan from: `plan` says so instead of guessing. A row whose premise was not met in every
run since the last that gave an interval (`premise_misses`) keeps that spread, but the plan says
first to expect `premise not met`: the premise is a regime the machine did or did not reach, which
no number of repeats changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from . import ledger, num
from .pooling import NotPoolable, RowInput, RunRecord, interval_from, row_input
from .stats import ALPHA
from .verdicts import PREMISE_NOT_MET, REPRODUCED, SIZE_NOT_REPRODUCED

LEVEL = 0.90        # every judged row's two-sided level (harness.judging.claims.JUDGED_LEVEL)
N_MAX = 200         # the search for n stops here: beyond it, no budget of this study buys the row
STEADY_SHARE = 0.9  # below this predicted share of runs reading one band word, the note says runs may read either


def half_width(sd_log: float, n: int, level: float = LEVEL) -> float:
    """The half-width on the log scale of the t-interval of a mean of n values with spread sd_log."""
    if n < 2 or not math.isfinite(sd_log):
        return math.inf
    return float(sps.t.ppf((1 + level) / 2, n - 1)) * sd_log / math.sqrt(n)


def repeats_for(sd_log: float, distance_log: float, level: float = LEVEL, n_max: int = N_MAX) -> int | None:
    """The smallest n >= 2 with half_width(sd_log, n) <= distance_log / 2; None when no n up to
    n_max does (or the distance is not positive: the expected estimate sits on an edge)."""
    if not (math.isfinite(sd_log) and math.isfinite(distance_log)) or distance_log <= 0:
        return None
    if sd_log == 0:
        return 2
    for n in range(2, n_max + 1):
        if half_width(sd_log, n, level) <= distance_log / 2:
            return n
    return None


def decision_level(tests: int, alpha: float = ALPHA) -> float:
    """The two-sided level whose interval clears the null exactly when a one-sided p is below
    alpha / tests: Holm's first (strictest) step over `tests` one-sided tests, which decides a row
    whatever the others' p-values; LEVEL (no adjustment) for a single test."""
    return 1 - 2 * alpha / max(1, tests)


def null_edges(row: Mapping[str, Any]) -> list[float]:
    """Where the row stops being decided (ratio scale): the reference of a ratio row, the margin's
    edges of an equivalence row; [] for an absolute row."""
    comparison = row.get("comparison")
    if comparison == "ratio":
        return [num.finite(row.get("reference")) or 1.0]
    return edges(row) if comparison == "equivalence" else []


def _distance(log_estimate: float, to: Iterable[float]) -> float:
    logs = [math.log(e) for e in to if e > 0]
    return min(abs(log_estimate - e) for e in logs) if logs else math.nan


def edges(row: Mapping[str, Any]) -> list[float]:
    """The values at which the row's verdict changes (ratio scale): the reference and the band's
    edges for a ratio row, the margin's edges for an equivalence row; [] for an absolute row."""
    comparison = row.get("comparison")
    ref = num.finite(row.get("reference")) or 1.0
    if comparison == "equivalence":
        margin = num.finite(row.get("margin"))
        return [ref / (1 + margin), ref * (1 + margin)] if margin else []
    if comparison != "ratio":
        return []
    out = [ref]
    for key in ("band_low", "band_high"):
        v = num.finite(row.get(key))
        if v is not None and v > 0 and v != ref:
            out.append(v)
    return out


def distance_to_edge(row: Mapping[str, Any], log_estimate: float) -> float:
    """The log distance from an estimate to the nearest edge of the row (`edges`); NaN with none."""
    return _distance(log_estimate, edges(row))


def row_spread(runs: Iterable[RunRecord], claim_id: str) -> dict[str, Any]:
    """What the committed runs say of one row: the runs that judged it on an interval, their median
    log estimate and median per-repeat spread (sd = se sqrt(n)), the spread of their estimates
    between runs (the standard deviation of the log estimates, NaN below 2 runs), and
    `premise_misses`: the runs since the last interval (all, with none) whose premise was not met.
    `reason` when no run gives an interval (the row's edges come from today's ledger: `plan`)."""
    used, why, misses = [], [], []
    for run in sorted(runs, key=lambda r: r.run_id):   # run ids start with their UTC time: oldest first
        try:
            got = row_input(run.summary, claim_id)
        except NotPoolable as e:
            why.append(f"{run.run_id[-4:]}: {e}")
            if e.verdict == PREMISE_NOT_MET:
                misses.append(run.run_id)
            continue
        used.append((run.run_id, got))
        misses = []   # a run that met the premise ends the streak
    if not used:
        return {"runs": 0, "premise_misses": tuple(misses),
                "reason": "no committed run judged it on an interval" + (f" ({why[-1]})" if why else "")}
    logs = np.array([g.log_estimate for _, g in used])
    sds = np.array([g.std_error * math.sqrt(g.n) for _, g in used])
    between = float(np.std(logs, ddof=1)) if len(used) > 1 else math.nan
    return {"runs": len(used), "run_ids": tuple(r for r, _ in used), "inputs": tuple(g for _, g in used),
            "log_estimate": float(np.median(logs)), "sd_log": float(np.median(sds)), "between_sd_log": between,
            "premise_misses": tuple(misses), "reason": ""}


def _band_on_the_estimate_s_side(row: Mapping[str, Any], nulls: Sequence[float], log_estimate: float) -> list[float]:
    """The band's edges, when the expected estimate lies on the band's side of the null: the band's
    two words (`reproduced`, `size not reproduced`) need the seed's direction; an estimate on the
    other side reads `not reproduced`, whatever the band (001-models, 002-decide)."""
    band = [e for e in edges(row) if e not in nulls]   # empty but for a ratio row, whose one null is its reference
    if not band:
        return band
    side = log_estimate - math.log(nulls[0])
    return [e for e in band if (math.log(e) - math.log(nulls[0])) * side > 0]


def _outward(row: Mapping[str, Any], edge: float) -> int:
    """+1 when the band lies below `edge` (its upper edge: beyond it is above), -1 when above it."""
    return 1 if edge == num.finite(row.get("band_high")) else -1


def outside_share(log_estimate: float, between_sd_log: float, half: float, edge: float, outward: int) -> float:
    """The share of runs, their log estimates spread normally (sd between_sd_log) around
    log_estimate, whose interval of half-width `half` lies wholly beyond the edge; NaN without a
    spread between runs."""
    if not (math.isfinite(between_sd_log) and between_sd_log > 0 and math.isfinite(half)):
        return math.nan
    threshold = math.log(edge) + outward * half
    return float(sps.norm.cdf(outward * (log_estimate - threshold) / between_sd_log))


def word_read(row: Mapping[str, Any], measured: RowInput) -> str:
    """The band word one run's own interval (`measured`: its `row_input`) reads against the row's
    band as the ledger gives it today (`ledger.beyond_band`, the verdict's own rule): `size not
    reproduced` wholly outside it, `reproduced` otherwise."""
    interval = interval_from(measured.log_estimate, measured.std_error, measured.n, measured.level)
    outside = ledger.beyond_band(interval, float(row["band_low"]), float(row["band_high"]))
    return SIZE_NOT_REPRODUCED if outside else REPRODUCED


def _band_word(row: Mapping[str, Any], edge: float, spread: Mapping[str, Any], have: int | None) -> dict[str, Any]:
    """The word a run with `have` repeats is likelier to read against the band's nearest edge, the
    predicted share of runs that read it, and how many of the committed runs read it (their own
    intervals against today's band)."""
    outward = _outward(row, edge)
    share = outside_share(spread["log_estimate"], spread["between_sd_log"],
                          half_width(spread["sd_log"], have or 0), edge, outward)
    if not math.isfinite(share):
        return {}
    outside = share >= 0.5
    word = SIZE_NOT_REPRODUCED if outside else REPRODUCED
    seen = sum(word_read(row, g) == word for g in spread["inputs"])   # row_input keeps only runs with n >= 2
    return {"band_word": word, "band_share": share if outside else 1 - share, "band_seen": seen}


def plan(runs: Sequence[RunRecord], rows: Mapping[str, Mapping[str, Any]], planned: Mapping[str, int],
         level: float = LEVEL) -> pd.DataFrame:
    """One row per ledger row of `rows` (claim id -> the row as the ledger gives it today: its
    comparison, reference, band and margin, so edges follow today's rules whatever the runs were
    judged by): its expected estimate and spread from the committed runs (`row_spread`), the
    distance to the edge where it stops being decided (`null_edges`), the repeats the rule asks for
    at `level` (`needed`; `decision_level` for a family adjusted by Holm), the repeats the profile
    plans (`planned[claim_id]`), and `enough` (planned >= needed). Where the expected estimate lies
    on the band's side of the null, the band's nearest edge and the repeats that tell `reproduced`
    from `size not reproduced` at the 90% level are shown beside
    (`band_edge`, `band_repeats`), with the word a run is likelier to read, the predicted share of
    runs that read it and the committed runs that did (`band_word`, `band_share`, `band_seen`).
    `note` says, in words, what a reader should expect: decided, short by how many repeats, a band
    word that runs read only by chance (share below STEADY_SHARE), or no spread to plan from."""
    out = []
    for claim_id, row in rows.items():
        s = row_spread(runs, claim_id)
        have = planned.get(claim_id)
        rec: dict[str, Any] = {"claim_id": claim_id, "runs": s["runs"], "planned": have, "estimate": math.nan,
                               "sd_log": math.nan, "between_sd_log": math.nan, "distance_log": math.nan,
                               "nearest_edge": math.nan, "needed": None, "enough": False, "level": level,
                               "band_edge": math.nan, "band_repeats": None, "band_word": "",
                               "band_share": math.nan, "band_seen": None, "note": s["reason"]}
        if s["runs"]:
            est = s["log_estimate"]
            nulls = null_edges(row)
            d = _distance(est, nulls)
            needed = repeats_for(s["sd_log"], d, level)
            nearest = min(nulls, key=lambda e: abs(est - math.log(e))) if nulls else math.nan
            band = _band_on_the_estimate_s_side(row, nulls, est)
            rec.update(estimate=math.exp(est), sd_log=s["sd_log"], between_sd_log=s["between_sd_log"],
                       distance_log=d, nearest_edge=nearest, needed=needed,
                       enough=bool(needed is not None and have is not None and have >= needed))
            if band:
                rec["band_edge"] = min(band, key=lambda e: abs(est - math.log(e)))
                rec["band_repeats"] = repeats_for(s["sd_log"], _distance(est, band), LEVEL)
                rec.update(_band_word(row, rec["band_edge"], s, have))
            if needed is None:
                rec["note"] = (f"the expected estimate lies on or too near its edge ({nearest:.3g}) for any number of "
                               f"repeats up to {N_MAX} to decide it" if math.isfinite(d)
                               else "no edge to decide against (an absolute row)")
            elif have is None:
                rec["note"] = f"needs {needed} repeats; no profile count known"
            elif have >= needed:
                rec["note"] = f"{have} planned >= {needed} needed"
            else:
                rec["note"] = f"short: {have} planned, {needed} needed: expect `inconclusive`"
            if rec["band_word"] and rec["band_share"] < STEADY_SHARE:
                rec["note"] += (f"; the band's edge ({rec['band_edge']:.3g}) lies within the runs' spread: a run reads "
                                f"`{rec['band_word']}` in about {rec['band_share']:.0%} of runs "
                                f"({rec['band_seen']} of {rec['runs']} did), the pooled row decides the size")
            if math.isfinite(rec["between_sd_log"]) and rec["between_sd_log"] > rec["sd_log"]:
                rec["note"] += (f"; the estimates spread more from run to run (sd {rec['between_sd_log']:.3f}) "
                                f"than repeats within a run (sd {rec['sd_log']:.3f}): more repeats narrow one run's "
                                f"interval, not the spread between runs (hours, boots)")
        if s["premise_misses"]:
            # The spread above comes from runs that met the premise; the latest runs did not, and
            # repeats cannot meet it. Said first, as what to expect.
            ids = ", ".join(r[-4:] for r in s["premise_misses"])
            rec["enough"] = False
            rec["note"] = (f"the premise was not met in the {len(s['premise_misses'])} latest run(s) that measured it "
                           f"({ids}): expect `{PREMISE_NOT_MET}`, which more repeats do not change"
                           + (f"; were it met: {rec['note']}" if rec["note"] else ""))
        out.append(rec)
    return pd.DataFrame(out)
