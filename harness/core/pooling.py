"""Each lesson pooled across runs from different boots: a random-effects meta-analysis of
the committed runs' estimates, with the spread a new run on a machine of this kind should expect.

One run's interval describes that run (its repeats share the machine's state of that hour), not the
system. Each run that measured a ledger row contributes one estimate on the log scale and its
standard error (`lesson_inputs`); `pool` combines them; `pooled_lessons` chooses the runs and does
it for every lesson's row.

The estimator. `statsmodels.stats.meta_analysis.combine_effects` on the log estimates y_i with
variances se_i^2. The between-run variance tau^2 is estimated by Paule-Mandel (`method="pm"`, the
default; statsmodels' "iterated"), not DerSimonian-Laird (`"dl"`, offered): with a handful of runs
whose within-run standard errors are much smaller than the spread between boots, DL's one-step
moment estimator is biased low and lets the most precise run dominate the weights, while PM solves
the generalised Q-statistic equation sum (y_i - mu)^2 / (se_i^2 + tau^2) = k - 1 exactly; PM is the
estimator recommended over DL by Veroniki et al. (2016, Res. Synth. Methods 7:55) and Langan et al.
(2019, Res. Synth. Methods 10:83). statsmodels gives tau^2 and Cochran's Q; the rest follows from them
here, because two of its edge cases need care: its DL tau^2 is not truncated at 0 (a negative value is
set to 0 here: the fixed-effect model, which is what tau^2 = 0 means), and its PM iteration returns 0
when a rounding error makes its estimating equation negative (checked: when the generalised Q at its
tau^2 is not k - 1 although Cochran's Q exceeds k - 1, the same equation is solved by root finding,
and `notes` says so).
- pooled estimate mu = sum w_i y_i / sum w_i, w_i = 1 / (se_i^2 + tau^2); its standard error
  se(mu) = max(1 / sqrt(sum w_i), the Hartung-Knapp-Sidik-Jonkman standard error): the modified
  Knapp-Hartung rule (Roever, Knapp & Friede 2015), never narrower than the plain random-effects
  one (with PM and tau^2 > 0 the two are equal);
- its interval: mu -/+ t_{k-1, (1+level)/2} se(mu) (90% by default: the level of every judged row);
- heterogeneity: Cochran's Q (fixed-effect weights), I^2 = max(0, (Q - (k-1)) / Q), tau^2;
- prediction interval for one new run's own estimate (Higgins, Thompson & Spiegelhalter 2009, J. R.
  Stat. Soc. A 172:137, with the run's own levels added): mu -/+ t_{k-2, (1+level)/2}
  sqrt(tau^2 + sigma^2_run + se_new^2 + se(mu)^2): the spread between boots, between runs of a boot
  (below), the new run's own sampling variance (its repeats' noise: a typical run's, the median
  se_j^2 of the runs pooled, unless the caller knows the run's own) and the pooled estimate's
  uncertainty. It needs k >= 3 (k - 2 degrees of freedom): with k = 2 none is given and `pi_reason`
  says why; with k = 1 the run is returned as that run, not pooled (`pooled` False, no tau^2, I^2 or
  prediction interval). `leave_one_out` checks the range on the committed runs: each run against
  the range the others give, with its own se_new.
Everything is computed on the log scale and kept (`log_*`); the ratio scale (exp) is for display.

What a run contributes (`lesson_inputs`). A judged row's interval is the Student t-interval on the
log of the per-repeat values of a / b (harness.judging.claims, harness.core.stats.log_ratio_summary / tost):
    [log ci_low, log ci_high] = m -/+ t_{n-1, (1+L)/2} se,   m = log(estimate)
so the standard error of the run's log estimate is, exactly,
    se = (log ci_high - log ci_low) / (2 t_{n-1, (1+L)/2})
with n = `n_used` (the repeats the interval was computed on) and L = `ci_level`: 0.90 for every
judged row of a version-2 summary, 0.95 for its absolute rows (shown, never judged), and 0.95 for
every row of a version-1 summary (which stored `value` and `n` instead of `estimate` and `n_used`:
read as `harness.core.store.upgrade_summary` reads them). Absolute rows (a figure against a stated
number, e.g. the longest stall in ms against 10 ms, or a plain figure) pool the same way, on the log
of the figure, since the figure is positive (a geometric mean). Rows that give no such interval are
not poolable (`NotPoolable`, with the reason): a row judged on counts (the sign test: median, no
interval on the figure), an arithmetic-mean interval (a repeat gave zero, so the figure has no
geometric mean and its interval is not on the log scale), fewer than 2 repeats, a zero-width
interval (every repeat equal: it would get infinite weight), an equivalence row with a zero among
its repeats (its interval rests on fewer repeats than `n_used`), a row not measured, a premise not
met.

Which runs pool (`pooled_lessons`). For each ledger row: runs that measured it (a row `not measured
in this run` is not counted at all) with a boot id (a run without one cannot be told apart from
another on the same boot: left out, counted); among those whose row is poolable, only the runs
whose *key* equals that of the newest run that measured the row (also when that run's own row gives
no interval, e.g. `premise not met`: then nothing pools, rather than older runs of other code
standing in for it): the verdict rules (the summary's format version: 1 = 95% intervals
and no Holm adjustment; each later version its own rules), the row's own definition (its `a`,
`b` and `premise`: a row whose figures or premise were redefined measures something else), the profile,
and with `match="version"` (the default) the experiment versions (`manifest.json`'s
`experiments.<name>.version`: a hash of the experiment's code and parameters) of the experiments the
row reads; a run whose manifest records no versions keys as unknown and pools only with such runs.
`match="rules"` drops the experiment versions from the key; `match="profile"` drops the rules too
(for information only: it pools 95% and 90% rows, each at its own level, and verdicts judged by
different rules).

Runs of one boot (the manifest's `environment.machine.boot_id`) are not independent: they share the
machine of that boot, a few hours apart. So the runs pool in two levels, repeats within runs within
boots (Kalibera and Jones's levels): the runs of a boot make one estimate, the plain mean of their
log estimates (`boot_mean`), and the boots' estimates pool as above; a boot of m runs counts once, its
standard error sqrt(sum_j (sigma^2_run + se_j^2)) / m. sigma^2_run, how far runs of one boot spread
beyond their own repeats' noise, is estimated by moments from the boots with two runs or more
(`within_boot_variance`), and the prediction interval for one new run adds it to tau^2 (between
boots). Where every boot has one run, sigma^2_run is 0 with no degrees of freedom and the pooling is
the one-run-per-boot model exactly. (Were the newest run of a boot to stand for it, one run more on
a boot could replace its older runs wholesale and move a pooled verdict.) With one boot only, its newest run is
shown as that run.

A verdict across runs (`pooled_verdict`), from three runs (`MIN_FOR_VERDICT`, three boots) on: the
single run's band rule (harness.judging.claims) applied to the pooled 90% interval: the interval wholly on
the side opposite to the seed's -> not reproduced; wholly on the seed's side -> reproduced if it
overlaps the band, size not reproduced if it lies outside it, direction, no seed figure if the row
has no seed number; else inconclusive; equivalence rows: inside the margin -> equivalent, wholly
outside -> not reproduced; absolute rows: not comparable. No Holm adjustment is applied across
lessons. "k of K runs agree": the pooled runs whose own verdict says what the pooled verdict says
(the same word, or `direction only` from a summary of version 3 or earlier, which covered `size not
reproduced` and `direction, no seed figure`: `says_the_same`), not merely its class: `reproduced`
and `size not reproduced` agree on the direction and disagree on the size, which is what the band
judges. Every run whose word differs from the pooled verdict's is named with its word (`agreement`),
and runs that say different things are named in `disagreement`. Two runs are pooled (estimate,
interval, tau^2) but given no verdict (`TOO_FEW_BOOTS`, with each run's own verdict in
`agree_text`): with k = 2 the interval's critical value is t_1 = 6.31 at 90%, so the pooled interval
is wide enough to reach a band that each run's own interval missed: two runs that each read `size not
reproduced` can pool to `reproduced`. A verdict
across runs should say no more than its runs; with fewer than three, the literature on very few
studies advises against a random-effects verdict (Bender et al. 2018, Res. Synth. Methods 9:382),
and the runs are shown side by side instead.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.optimize import brentq
from statsmodels.stats.meta_analysis import combine_effects

from . import checked, ledger, num, store
from .errors import HarnessError
from .verdicts import (
    DIRECTION_NO_FIGURE,
    DIRECTION_ONLY,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPRODUCED,
    SIZE_NOT_REPRODUCED,
    TOO_FEW_BOOTS,
    verdict_class,
)

LEVEL = 0.90                 # every judged row's level (harness.judging.claims.JUDGED_LEVEL)
V1_LEVEL = 0.95              # the interval a version-1 summary stored (harness.core.store.upgrade_summary)
METHODS = {"pm": "Paule-Mandel", "dl": "DerSimonian-Laird"}
MATCHES = ("version", "rules", "profile")
MIN_FOR_PI = 3
MIN_FOR_VERDICT = 3          # runs (boots) a verdict across runs needs: the module docstring
ROOT = Path(__file__).resolve().parents[2]   # harness/core/pooling.py
T = TypeVar("T")   # a run as the caller holds it (a RunRecord, a history record)
_PROFILE = re.compile(r"^\d{8}T\d{6}Z-([A-Za-z0-9_]+)-[0-9a-f]+$")


class NotPoolable(ValueError):
    """A run's row that gives no log estimate with a standard error; the message says why, and
    `verdict` is the row's own verdict where the row was found ("" where it was not)."""

    def __init__(self, reason: str, verdict: str = ""):
        super().__init__(reason)
        self.verdict = verdict


# -- the estimator ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pooled:
    """`pool`'s result. Log scale (`log_*`) and ratio scale (the properties, exp of those) both kept.

    k = 1: `pooled` is False and the figures are that run's own (its interval: t with `dfs[0]`
    degrees of freedom when given, else normal); tau2, i2, q and the prediction interval are None.
    k = 2: pooled, but `log_pi` is None and `pi_reason` says why."""

    k: int
    labels: tuple[str, ...]
    log_estimates: tuple[float, ...]
    std_errors: tuple[float, ...]
    log_estimate: float
    log_se: float
    log_ci: tuple[float, float]
    level: float
    method: str
    pooled: bool
    tau2: float | None = None
    i2: float | None = None
    q: float | None = None
    weights: tuple[float, ...] = ()          # relative random-effects weights, summing to 1
    log_pi: tuple[float, float] | None = None
    pi_reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def estimate(self) -> float:
        return math.exp(self.log_estimate)

    @property
    def ci(self) -> tuple[float, float]:
        return math.exp(self.log_ci[0]), math.exp(self.log_ci[1])

    @property
    def pi(self) -> tuple[float, float] | None:
        return None if self.log_pi is None else (math.exp(self.log_pi[0]), math.exp(self.log_pi[1]))

    @property
    def tau(self) -> float | None:
        """The between-run standard deviation on the log scale (exp(tau) - 1 ~ the typical factor)."""
        return None if self.tau2 is None else math.sqrt(self.tau2)


def pool(estimates: Sequence[float], std_errors: Sequence[float], labels: Sequence[str] | None = None, *,
         method: str = "pm", level: float = LEVEL, dfs: Sequence[float] | None = None,
         new_run_var: float = 0.0) -> Pooled:
    """The random-effects pooled estimate of `estimates` (log scale, one per boot) with standard errors
    `std_errors` (the module docstring): estimate, interval at `level`, tau^2, I^2, Q and the
    prediction interval for one new run. `method`: "pm" (Paule-Mandel) or "dl" (DerSimonian-Laird).
    `dfs` (optional, one per run: n - 1) only serves k = 1, to give that run's own t-interval.
    `new_run_var`: what one new run adds to the spread of a new boot's estimate (the between-run
    variance within a boot, `within_boot_variance`, plus the run's own sampling variance): the
    prediction interval is for one run's own estimate, not for a boot's mean of several.
    ValueError for mismatched lengths, no run, a non-finite figure or a standard error <= 0."""
    y = np.asarray(estimates, dtype=float)
    se = np.asarray(std_errors, dtype=float)
    k = int(y.size)
    names = tuple(str(x) for x in labels) if labels is not None else tuple(f"run {i + 1}" for i in range(k))
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    if y.ndim != 1 or se.shape != y.shape or len(names) != k:
        raise ValueError(f"one estimate, standard error and label per run: got {y.size}, {se.size}, {len(names)}")
    if k == 0:
        raise ValueError("no run to pool")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(se)) and np.all(se > 0)):
        raise ValueError("estimates and standard errors must be finite, standard errors > 0")
    tail = (1 + level) / 2
    if k == 1:
        df = float(dfs[0]) if dfs is not None and dfs[0] is not None and dfs[0] >= 1 else None
        crit = float(sps.t.ppf(tail, df)) if df else float(sps.norm.ppf(tail))
        m, s = float(y[0]), float(se[0])
        return Pooled(k=1, labels=names, log_estimates=(m,), std_errors=(s,), log_estimate=m, log_se=s,
                      log_ci=(m - crit * s, m + crit * s), level=level, method="single run", pooled=False,
                      weights=(1.0,), pi_reason="one run: shown as that run, not pooled")
    v = se ** 2
    kwds = {"maxiter": 500} if method == "pm" else {}
    # statsmodels divides by Q (0 for identical runs) and takes roots with DL's untruncated tau^2 < 0: the
    # figures it gets so are not used; only its tau^2 and Q are, and the rest follows from them below
    with np.errstate(invalid="ignore", divide="ignore"):
        res = combine_effects(y, v, method_re=method, row_names=list(names), use_t=True, alpha=1 - level, **kwds)
    notes: list[str] = []
    q = float(res.q)
    tau2 = float(res.tau2)
    if method == "dl" and tau2 < 0:
        notes.append(f"DerSimonian-Laird tau^2 {tau2:.3g} < 0 truncated at 0")
        tau2 = 0.0
    if method == "pm" and q > k - 1 and not abs(_q_gen(y, v, tau2) - (k - 1)) <= 1e-4 * (k - 1):
        # statsmodels' iteration stops at tau^2 = 0 when a rounding error makes its estimating equation
        # negative, or stops short: solve the same equation (generalised Q = k - 1, decreasing in tau^2)
        tau2 = _solve_pm(y, v)
        notes.append("Paule-Mandel solved by root finding (statsmodels' iteration stopped short)")
    tau2 = max(tau2, 0.0)
    w_abs = 1 / (v + tau2)
    w = w_abs / w_abs.sum()
    mu = float(np.sum(w * y))
    se_re = 1 / math.sqrt(float(w_abs.sum()))
    se_hk = math.sqrt(float(np.sum(w * (y - mu) ** 2)) / (k - 1))    # Hartung-Knapp-Sidik-Jonkman (WLS scale)
    se_mu = max(se_re, se_hk)
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    crit = float(sps.t.ppf(tail, k - 1))
    ci = (mu - crit * se_mu, mu + crit * se_mu)
    pi: tuple[float, float] | None = None
    reason = ""
    if k >= MIN_FOR_PI:
        half = float(sps.t.ppf(tail, k - 2)) * math.sqrt(tau2 + max(new_run_var, 0.0) + se_mu ** 2)
        pi = (mu - half, mu + half)
    else:
        reason = (f"{k} boots: a prediction interval needs at least {MIN_FOR_PI} "
                  f"(Student t with k - 2 degrees of freedom)")
    return Pooled(k=k, labels=names, log_estimates=tuple(map(float, y)), std_errors=tuple(map(float, se)),
                  log_estimate=mu, log_se=se_mu, log_ci=ci, level=level, method=METHODS[method], pooled=True,
                  tau2=tau2, i2=i2, q=q, weights=tuple(map(float, w)), log_pi=pi, pi_reason=reason,
                  notes=tuple(notes))


def _q_gen(y: np.ndarray, v: np.ndarray, tau2: float) -> float:
    """The generalised Q-statistic at tau^2: sum w_i (y_i - mu)^2, w_i = 1 / (v_i + tau^2)."""
    w = 1 / (v + tau2)
    mu = float(np.sum(w * y) / np.sum(w))
    return float(np.sum(w * (y - mu) ** 2))


def _solve_pm(y: np.ndarray, v: np.ndarray) -> float:
    """Paule-Mandel's tau^2 by root finding: the generalised Q equals k - 1 (0 when even tau^2 = 0 gives
    less). The generalised Q decreases from its value at 0 towards 0 as tau^2 grows."""
    target = y.size - 1
    if _q_gen(y, v, 0.0) <= target:
        return 0.0
    high = max(float(np.var(y, ddof=1)), float(v.max()), 1e-12)
    while _q_gen(y, v, high) > target:
        high *= 2
    return float(brentq(lambda t: _q_gen(y, v, t) - target, 0.0, high, xtol=1e-14, rtol=1e-12))


# -- runs of one boot --------------------------------------------------------------------------------

def within_boot_variance(boots: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, int]:
    """sigma^2_run: how far runs of one boot (hours apart) spread beyond their own repeats' noise, on
    the log scale, with its degrees of freedom: (estimate, sum(m_b - 1)). `boots`: per boot, its runs'
    (log estimate, standard error).

    By moments over the boots with two runs or more, as Kalibera and Jones estimate each level's
    variance (the level's observed spread less what the level below contributes): a boot's m runs,
    each y_bj = its boot's value + e_bj (variance sigma^2) + its repeats' error (variance se_bj^2),
    have E[sum_j (y_bj - mean_b)^2] = (m - 1) sigma^2 + (1 - 1/m) sum_j se_bj^2. Summed over boots
    and solved for sigma^2; truncated at 0 (the runs agree within their own noise). (0.0, 0) when no
    boot has two runs: then nothing tells runs of a boot apart from boots, and the pooling is the
    one-run-per-boot model."""
    spread = own = 0.0
    df = 0
    for runs in boots:
        m = len(runs)
        if m < 2:
            continue
        y = np.array([r[0] for r in runs], dtype=float)
        se = np.array([r[1] for r in runs], dtype=float)
        spread += float(np.sum((y - y.mean()) ** 2))
        own += (1 - 1 / m) * float(np.sum(se ** 2))
        df += m - 1
    if df == 0:
        return 0.0, 0
    return max(0.0, (spread - own) / df), df


def boot_mean(runs: Sequence[tuple[float, float]], sigma2_run: float) -> tuple[float, float]:
    """A boot's estimate from its runs' (log estimate, standard error): their plain mean (runs of one
    boot are equals: weighting by their own precision would let the luckiest hour dominate), and its
    standard error sqrt(sum_j (sigma^2_run + se_j^2)) / m. One run: that run, with sigma^2_run added
    to its variance, so every boot's standard error holds the same two levels."""
    m = len(runs)
    if m == 0:
        raise ValueError("a boot with no run")
    y = float(np.mean([r[0] for r in runs]))
    var = sum(sigma2_run + r[1] ** 2 for r in runs) / m ** 2
    return y, math.sqrt(var)


# -- one run's contribution ------------------------------------------------------------------------

def rules_version(summary: Mapping[str, Any]) -> int:
    """The verdict rules a summary was judged by: its format version (1, 2 or 3), also when it was read
    through `harness.core.store.upgrade_summary` (which keeps the original as `upgraded_from`)."""
    return int(summary.get("upgraded_from") or summary.get("summary_version") or 1)


def claim_row(summary: Mapping[str, Any], claim_id: str) -> Mapping[str, Any]:
    """The summary's claims row `claim_id`. NotPoolable when it is absent or appears more than once
    (several interpreters: pool one interpreter's rows at a time)."""
    rows = [r for r in summary.get("claims", []) or [] if isinstance(r, Mapping) and r.get("claim_id") == claim_id]
    if not rows:
        raise NotPoolable(f"no row {claim_id} in this summary")
    if len(rows) > 1:
        raise NotPoolable(f"{len(rows)} rows {claim_id} (one per interpreter): pool one interpreter at a time")
    return rows[0]


@dataclass(frozen=True)
class RowInput:
    """What one run's row contributes, with what its interval came from."""

    log_estimate: float
    std_error: float
    n: int
    level: float
    verdict: str


def row_input(summary: Mapping[str, Any], claim_id: str) -> RowInput:
    """`lesson_inputs` with the repeats, level and verdict beside them."""
    row = claim_row(summary, claim_id)
    v1 = rules_version(summary) == 1
    verdict = str(row.get("verdict") or "")
    est = num.finite(row.get("estimate", row.get("value")))
    lo, hi = num.finite(row.get("ci_low")), num.finite(row.get("ci_high"))
    n_num = num.finite(row.get("n_used") if row.get("n_used") is not None else row.get("n"))
    n = int(n_num) if n_num is not None else 0
    level = num.finite(row.get("ci_level")) or (V1_LEVEL if v1 else None)
    method = str(row.get("method") or "")
    why = f"({verdict or 'no verdict'})"
    if est is None:
        raise NotPoolable(f"no estimate {why}", verdict)
    if method.startswith("median") or (num.finite(row.get("bound")) is not None and not v1):
        raise NotPoolable(f"judged on counts (sign test): a median with no interval on the figure {why}", verdict)
    if lo is None or hi is None:
        raise NotPoolable(f"no interval {why}" + (f": {n} repeat" if n < 2 else ""), verdict)
    if method.startswith("arithmetic"):     # a zero among the repeats: no geometric mean, no log interval
        raise NotPoolable(f"an arithmetic-mean interval, not one on the log scale {why}", verdict)
    if not (est > 0 and lo > 0 and hi > 0):
        raise NotPoolable(f"estimate or interval not positive: no log {why}", verdict)
    if n < 2:
        raise NotPoolable(f"fewer than 2 repeats {why}", verdict)
    if level is None or not 0 < level < 1:
        raise NotPoolable(f"no interval level recorded {why}", verdict)
    if "gave a zero" in str(row.get("reason") or "") and row.get("comparison") == "equivalence":
        raise NotPoolable(f"a zero among the repeats: the interval rests on fewer than n_used {why}", verdict)
    width = math.log(hi) - math.log(lo)
    if not width > 0:
        raise NotPoolable(f"zero-width interval (every repeat equal) {why}", verdict)
    se = width / (2 * float(sps.t.ppf((1 + level) / 2, n - 1)))
    return RowInput(log_estimate=math.log(est), std_error=se, n=n, level=level, verdict=verdict)


def lesson_inputs(summary: Mapping[str, Any], claim_id: str) -> tuple[float, float]:
    """(log estimate, its standard error) of ledger row `claim_id` in one run's summary.json (raw,
    version 1 or 2, or read through `harness.core.store.load_summary`): se = (log ci_high - log ci_low) /
    (2 t_{n-1, (1+L)/2}), n = n_used, L = ci_level (the module docstring). NotPoolable (a ValueError)
    with the reason when the row gives none."""
    got = row_input(summary, claim_id)
    return got.log_estimate, got.std_error


def interval_from(log_estimate: float, std_error: float, n: int, level: float) -> tuple[float, float]:
    """The ratio-scale t-interval `lesson_inputs` inverts: exp(m -/+ t_{n-1, (1+level)/2} se)."""
    half = float(sps.t.ppf((1 + level) / 2, n - 1)) * std_error
    return math.exp(log_estimate - half), math.exp(log_estimate + half)


def verdict_interval(summary: Mapping[str, Any], claim_id: str) -> tuple[float, float, float] | None:
    """The row's interval at the level its verdict was decided at, after the multiple-comparison
    adjustment: (low, high, level), or None when no adjustment widened it (no adjusted p, or a row
    that gives no t-interval: `row_input`'s reasons).

    A judged row's one-sided test at alpha = (1 - L) / 2 (L = its interval's level, 0.90) is decisive
    after the adjustment when p_adjusted < alpha, that is when p < alpha * p / p_adjusted: the
    adjustment tests this row at alpha' = alpha * p / p_adjusted (for Holm, alpha divided by the
    row's step-down multiplier). The interval at level 1 - 2 alpha' therefore excludes the null (or,
    for an equivalence row, lies inside the margin) exactly when the adjusted verdict is decisive:
    the interval a reader can hold the verdict against, where the 90% interval (which the band is
    held against) may lie wholly on one side of the null and still read `inconclusive`."""
    row = claim_row(summary, claim_id)
    p, p_adjusted = num.finite(row.get("p_value")), num.finite(row.get("p_adjusted"))
    if p is None or p_adjusted is None or not 0 < p < p_adjusted:
        return None
    try:
        got = row_input(summary, claim_id)
    except NotPoolable:
        return None
    level = 1 - (1 - got.level) * p / p_adjusted
    lo, hi = interval_from(got.log_estimate, got.std_error, got.n, level)
    return lo, hi, level


# -- a verdict across runs -------------------------------------------------------------------------

# `direction only`, in summaries of version 3 and earlier, covered both of these: a run that read it said what
# either says, and contradicts neither
_LEGACY_COVERS = {DIRECTION_ONLY: (SIZE_NOT_REPRODUCED, DIRECTION_NO_FIGURE)}


def says_the_same(a: str, b: str) -> bool:
    """Whether verdicts `a` and `b` say the same of the seed's sentence: the same word, or the word
    of summary versions 3 and earlier that covered the other (`direction only` with `size not reproduced` or with
    `direction, no seed figure`). Words of one class can say different things: `reproduced` and
    `size not reproduced` agree on the direction and disagree on the size."""
    return a == b or b in _LEGACY_COVERS.get(a, ()) or a in _LEGACY_COVERS.get(b, ())


def agreement(verdict: str, run_verdicts: Mapping[str, str]) -> tuple[int, str]:
    """(k, "k of K runs agree"): the runs (run id -> own verdict) whose own verdict says what the
    pooled verdict says (`says_the_same`). Every run whose word is not the pooled verdict's is named
    with its word, so neither a count nor a class hides what each run said: a pooled `reproduced`
    over runs that read `size not reproduced` (a wide pooled interval of few runs reaches the band
    that their own intervals missed) reads "1 of 3 runs agree (<run>, <run>: size not reproduced)"."""
    agreeing = [i for i, v in run_verdicts.items() if says_the_same(verdict, v)]
    text = f"{len(agreeing)} of {len(run_verdicts)} runs agree"
    others: dict[str, list[str]] = {}
    for i, v in run_verdicts.items():
        if v != verdict:
            others.setdefault(v, []).append(short_id(i))
    if others:
        text += " (" + "; ".join(f"{', '.join(ids)}: {v}" for v, ids in others.items()) + ")"
    return len(agreeing), text


def over(k: int, n_runs: int | None) -> str:
    """What a pooled figure rests on, as the reader's texts say it: "3 machines", or "7 runs on 3
    machines" where some machine (one boot) has more than one run (they count once: the module docstring)."""
    machines = f"{k} machine{'s' if k != 1 else ''}"
    return machines if not n_runs or n_runs == k else f"{n_runs} runs on {machines}"


def each_run(verdicts: Mapping[str, str]) -> str:
    """Each run's own verdict, where runs are too few for one across them: "each run: aaaa
    reproduced; bbbb size not reproduced", or "both runs: reproduced" when the two say the same."""
    words = set(verdicts.values())
    if len(verdicts) == 2 and len(words) == 1:
        return f"both runs: {words.pop()}"
    return "each run: " + "; ".join(f"{short_id(i)} {v}" for i, v in verdicts.items())


def pooled_verdict(row: Mapping[str, Any], log_ci: tuple[float, float]) -> str:
    """The single run's band rule (harness.judging.claims) applied to a pooled interval on the log scale
    (the module docstring). `row` needs comparison, direction, reference, band_low, band_high, margin."""
    comparison = row.get("comparison")
    if comparison == "absolute":
        return NOT_COMPARABLE
    lo, hi = math.exp(log_ci[0]), math.exp(log_ci[1])
    ref = num.finite(row.get("reference")) or 1.0
    if comparison == "equivalence":
        margin = num.finite(row.get("margin"))
        if margin is None or not margin > 0:
            return INCONCLUSIVE
        low_m, high_m = ref / (1 + margin), ref * (1 + margin)
        if low_m <= lo and hi <= high_m:
            return EQUIVALENT
        if hi < low_m or lo > high_m:
            return NOT_REPRODUCED
        return INCONCLUSIVE
    up = row.get("direction") == ">"
    seed_side = lo > ref if up else hi < ref
    opposite = hi < ref if up else lo > ref
    if opposite:
        return NOT_REPRODUCED
    if not seed_side:
        return INCONCLUSIVE
    band_lo, band_hi = num.finite(row.get("band_low")), num.finite(row.get("band_high"))
    if band_lo is None or band_hi is None:
        return DIRECTION_NO_FIGURE
    return SIZE_NOT_REPRODUCED if ledger.beyond_band((lo, hi), band_lo, band_hi) else REPRODUCED


# -- runs ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunRecord:
    """One committed run as `pooled_lessons` reads it. `versions`: experiment -> version from the
    manifest (None: not recorded); `profile`: the manifest's (None: taken from the run id);
    `cpu_model`: the manifest's machine's (None: not recorded), for pooling one kind of processor."""

    run_id: str
    boot_id: str | None
    summary: Mapping[str, Any]
    versions: Mapping[str, str | None] | None = None
    profile: str | None = None
    cpu_model: str | None = None
    # what keeps its figures apart from another run's (checked.apart: per experiment, the checked
    # metadata that does not pool); None: only `versions` is known (a record built by hand)
    apart: Mapping[str, tuple[Any, ...]] | None = None

    @property
    def run_profile(self) -> str | None:
        if self.profile:
            return self.profile
        m = _PROFILE.match(self.run_id)
        return m.group(1) if m else None


def read_run(directory: Path | str) -> RunRecord:
    """A run directory's manifest.json and summary.json as a RunRecord, both read through the
    store's upgrades (`store.load_manifest`, `store.load_summary`, which keeps the stored summary
    version as `upgraded_from`). A one-line HarnessError for a file that cannot be read."""
    d = Path(directory)
    return record(store.load_summary(d), store.load_manifest(d), d.name)


def record(summary: Mapping[str, Any], manifest: Mapping[str, Any], fallback_id: str = "") -> RunRecord:
    """A run already read (its upgraded summary and manifest) as a RunRecord: boot id from
    `environment.machine.boot_id`, versions from `experiments.<name>.version`."""
    versions = store.experiment_versions(manifest)
    recorded = versions if any(versions.values()) else None
    return RunRecord(run_id=str(summary.get("run_id") or manifest.get("run_id") or fallback_id),
                     boot_id=store.boot_id(manifest), summary=summary, versions=recorded,
                     profile=manifest.get("profile"), cpu_model=store.cpu_model(manifest),
                     apart=checked.apart(manifest) if recorded else None)


def processor_kind(cpu_model: str | None) -> str | None:
    """A processor model as a reader names its kind: "Intel(R) Xeon(R) Processor" -> "Intel Xeon",
    "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz" -> "Intel Xeon Gold 6248", "AMD EPYC" -> "AMD EPYC"
    (None when not recorded). Runs of one kind pool together when a lesson's size follows the
    processor (002-cpu, docs/RESULTS.md)."""
    if not cpu_model:
        return None
    name = re.sub(r"\((?:R|TM)\)", "", cpu_model.split("@", 1)[0], flags=re.IGNORECASE)
    words = [w for w in name.split() if w.lower() not in ("processor", "cpu")]
    return " ".join(words) or None


def by_processor_kind(runs: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """The runs grouped by their processor's kind (`processor_kind`), kinds in name order; runs that
    recorded no processor are in no group."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        kind = processor_kind(run.cpu_model)
        if kind:
            groups.setdefault(kind, []).append(run)
    return dict(sorted(groups.items()))


def of_processor(runs: Sequence[T], text: str, cpu_model_of: Callable[[T], str | None]) -> list[T]:
    """The runs whose CPU model, or its kind as the README's table names it (`processor_kind`:
    "Intel Xeon" for "Intel(R) Xeon(R) Processor"), contains `text` (case-insensitive), for a
    lesson whose size follows the processor (002-cpu: docs/RESULTS.md); `cpu_model_of` reads a
    run's model. A one-line HarnessError, naming the processors the runs were made on, when no run
    matches."""
    def matches(model: str) -> bool:
        return any(text.casefold() in name.casefold() for name in (model, processor_kind(model) or ""))

    kept = [run for run in runs if matches(cpu_model_of(run) or "")]
    if not kept:
        seen = sorted({cpu_model_of(run) or "not recorded" for run in runs})
        raise HarnessError(f"no committed run on a processor matching {text!r}; "
                           f"the runs' processors: {'; '.join(seen)}")
    return kept


def committed_runs(root: Path | str = ROOT, data_dir: Path | str | None = None) -> list[RunRecord]:
    """Every committed run with a summary: `data/reference/*` and `data/history/*` (under `data_dir`
    when given, else `root`/data), oldest first."""
    base = Path(data_dir) if data_dir is not None else Path(root) / "data"
    dirs = [p for sub in ("reference", "history") for p in sorted((base / sub).glob("*"))
            if store.run_file(p, "summary.json") is not None]
    return sorted((read_run(p) for p in dirs), key=lambda r: r.run_id)


def _as_record(x: RunRecord | Sequence[Any]) -> RunRecord:
    if isinstance(x, RunRecord):
        return x
    return RunRecord(*x)


def experiments_read(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The experiments whose figures a ledger row reads (its `a` and `b` expressions)."""
    names = ledger.refs(f"{row.get('a') or ''} {row.get('b') or ''}")
    return tuple(sorted({ledger.experiment_of(n) for n in names}))


def _key(run: RunRecord, row: Mapping[str, Any], match: str) -> tuple[Any, ...]:
    key: tuple[Any, ...] = (run.run_profile,)
    if match in ("version", "rules"):
        # the row's own definition too: a row whose figures were redefined measures something else
        key += (rules_version(run.summary), str(row.get("a") or ""), str(row.get("b") or ""),
                str(row.get("premise") or ""))
    if match == "version":
        # the checked metadata that does not pool (core.checked): each experiment's version and
        # parameters, the product of each server it needs
        if run.apart is not None:
            key += (tuple((e, run.apart.get(e)) for e in experiments_read(row)),)
        else:
            key += (None if run.versions is None else tuple((e, run.versions.get(e)) for e in experiments_read(row)),)
    return key


def short_id(run_id: str) -> str:
    return run_id.rsplit("-", 1)[-1]


def unpooled(row: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(short run id, reason) for each run of the row's key left out because its row gave no
    interval (`not_poolable`: a premise not met, say), oldest first: a reader shown the other runs'
    figure must be told which runs could not judge the lesson."""
    return [(short_id(run), why) for run, why in sorted(((row or {}).get("not_poolable") or {}).items())]


COLUMNS = ("claim_id", "comparison", "k", "n_runs", "runs", "estimate", "ci_low", "ci_high", "ci_level", "pi_low",
           "pi_high", "pi_reason", "new_run_se", "tau2", "i2", "q", "sigma2_run", "run_df", "log_estimate", "log_se",
           "log_ci_low", "log_ci_high", "log_pi_low", "log_pi_high", "method", "pooled", "verdict", "agree",
           "agree_text", "verdicts", "disagreement", "per_run", "key", "dropped_same_boot", "dropped_other_key",
           "dropped_no_boot", "not_poolable", "notes")


def pooled_lessons(summaries: Iterable[RunRecord | Sequence[Any]], claim_ids: Iterable[str], *,
                   method: str = "pm", match: str = "version", level: float = LEVEL,
                   new_run_se: float | None = None) -> pd.DataFrame:
    """One row per claim id (in the order given): the runs chosen (the module docstring), `pool`
    over them, the pooled verdict and how many runs agree. `summaries`: RunRecords (`read_run`,
    `committed_runs`) or (run_id, boot_id, summary[, versions[, profile]]) tuples.

    Columns (`COLUMNS`): claim_id, comparison, k (boots), n_runs, runs (run ids pooled, oldest first),
    estimate, ci_low, ci_high, ci_level (ratio scale; for k = 1 the run's own interval and level),
    pi_low, pi_high (None unless k >= 3: the range of one new run's own estimate), pi_reason, new_run_se
    (the new run's own standard error that range assumes: `new_run_se` if given, else the median of the
    pooled runs'), tau2 (between boots), i2, q (over the boots' estimates),
    sigma2_run and run_df (between runs of one boot: `within_boot_variance`; None for k = 1), the
    log-scale twins of the figures, method, pooled,
    verdict (k >= 3: `pooled_verdict`; k = 2: `TOO_FEW_BOOTS`; k = 1: the run's own), agree (runs whose
    verdict says what the pooled verdict says: `agreement`; None at k = 2), agree_text ("k of K runs
    agree", naming the runs of other words; at k = 2 each run's own verdict: `each_run`), verdicts
    (run id -> verdict), disagreement (a sentence naming the runs when they say different things,
    else ""), per_run (one dict per pooled run:
    run_id, boot_id, estimate, ci_low, ci_high, ci_level, log_estimate, std_error, n, verdict, weight:
    for a forest plot; a run's weight is its boot's, split evenly between the boot's runs), key (what
    the pooled runs share), dropped_same_boot (k = 1 only: the boot's older runs, the newest shown),
    dropped_other_key, dropped_no_boot (counts), not_poolable (run -> reason, for runs of the key whose
    row gives no interval), notes."""
    if match not in MATCHES:
        raise ValueError(f"match must be one of {', '.join(MATCHES)}, got {match!r}")
    runs = sorted((_as_record(x) for x in summaries), key=lambda r: r.run_id)
    out = []
    for claim_id in claim_ids:
        out.append(_one_lesson(runs, claim_id, method, match, level, new_run_se))
    return pd.DataFrame(out, columns=list(COLUMNS))


def leave_one_out(summaries: Iterable[RunRecord | Sequence[Any]], claim_id: str, *, method: str = "pm",
                  match: str = "version", level: float = LEVEL, own_noise: bool = True) -> dict[str, Any]:
    """The new-run range checked on the runs themselves: each run the lesson pools, left out in turn,
    against the prediction interval the others give with that run's own standard error as se_new
    (`own_noise` False: with none, a range that leaves a run's own noise out).
    {"claim_id", "runs" (pooled), "checked" (runs the others gave a range for: it needs 3 boots),
    "inside", "coverage" (inside / checked, None if none checked), "outside" (short ids),
    "median_width" (the ranges' median high / low, ratio scale)}."""
    runs = sorted((_as_record(x) for x in summaries), key=lambda r: r.run_id)
    full = _one_lesson(runs, claim_id, method, match, level)
    inside, outside, widths = 0, [], []
    for left in full["per_run"]:
        rest = [r for r in runs if r.run_id != left["run_id"]]
        rec = _one_lesson(rest, claim_id, method, match, level, left["std_error"] if own_noise else 0.0)
        if rec["log_pi_low"] is None or tuple(rec["key"] or ()) != tuple(full["key"] or ()):
            continue
        widths.append(math.exp(rec["log_pi_high"] - rec["log_pi_low"]))
        if rec["log_pi_low"] <= left["log_estimate"] <= rec["log_pi_high"]:
            inside += 1
        else:
            outside.append(short_id(left["run_id"]))
    checked = len(widths)
    return {"claim_id": claim_id, "runs": len(full["per_run"]), "checked": checked, "inside": inside,
            "coverage": inside / checked if checked else None, "outside": outside,
            "median_width": float(np.median(widths)) if widths else None}


def no_interval_reason(runs: Sequence[tuple[str | None, Any]]) -> str:
    """Why a lesson pools nothing: the newest run's key has runs (boot id, verdict), none of which
    gives an interval; their verdicts counted, so a reader sees e.g. a premise no run met."""
    if not runs:
        return "no run of the newest run's key gives an interval for this row"
    counts = Counter(str(verdict or "no verdict") for _boot, verdict in runs)
    said = ", ".join(f"{word} in {c}" for word, c in counts.most_common())
    boots = len({b for b, _v in runs})
    return (f"nothing to pool: {said} of the {len(runs)} runs of these experiment versions and rules "
            f"({boots} boot{'s' if boots != 1 else ''})")


def _one_lesson(runs: list[RunRecord], claim_id: str, method: str, match: str, level: float,
                new_run_se: float | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {c: None for c in COLUMNS}
    rec.update(claim_id=claim_id, k=0, n_runs=0, runs=(), pooled=False, verdicts={}, per_run=[],
               dropped_same_boot=0, dropped_other_key=0, dropped_no_boot=0, not_poolable={}, notes=(),
               disagreement="", pi_reason="")
    usable: list[tuple[RunRecord, Mapping[str, Any], RowInput]] = []
    failed: list[tuple[RunRecord, Mapping[str, Any], str]] = []
    newest: tuple[RunRecord, Mapping[str, Any]] | None = None
    for run in runs:
        try:
            row = claim_row(run.summary, claim_id)
        except NotPoolable:
            continue
        if row.get("verdict") == NOT_MEASURED:     # the run did not measure it: not counted at all
            continue
        if not run.boot_id:
            rec["dropped_no_boot"] += 1
            continue
        newest = (run, row)     # runs come oldest first
        try:
            usable.append((run, row, row_input(run.summary, claim_id)))
        except NotPoolable as e:
            failed.append((run, row, str(e)))
    if newest is None:
        rec["pi_reason"] = "no run gives an interval for this row"
        return rec
    # the newest run that measured the row sets the key, also when its own row gives no interval:
    # older runs of other versions never stand in for it
    newest_run, newest_row = newest
    key = _key(newest_run, newest_row, match)
    rec["key"] = key
    rec["comparison"] = newest_row.get("comparison")
    same = [u for u in usable if _key(u[0], u[1], match) == key]
    rec["dropped_other_key"] = len(usable) - len(same)
    failed_same = [(r, row, why) for r, row, why in failed if _key(r, row, match) == key]
    rec["not_poolable"] = {r.run_id: why for r, _row, why in failed_same}
    if not same:
        rec["pi_reason"] = no_interval_reason([(r.boot_id, row.get("verdict")) for r, row, _why in failed_same])
        return rec
    by_boot: dict[str, list[tuple[RunRecord, Mapping[str, Any], RowInput]]] = {}
    for u in same:              # oldest first, within each boot too
        by_boot.setdefault(str(u[0].boot_id), []).append(u)
    boots = sorted(by_boot.values(), key=lambda us: us[0][0].run_id)
    sigma2_run: float | None = None
    run_df = 0
    if len(boots) == 1:         # one boot: its newest run, as that run (pooling needs two boots)
        boots = [[boots[0][-1]]]
        rec["dropped_same_boot"] = len(same) - 1
        only = boots[0][0][2]
        result = pool([only.log_estimate], [only.std_error], [short_id(boots[0][0][0].run_id)], method=method,
                      level=level, dfs=[only.n - 1])
    else:
        pairs = [[(u[2].log_estimate, u[2].std_error) for u in b] for b in boots]
        sigma2_run, run_df = within_boot_variance(pairs)
        means = [boot_mean(runs_of_boot, sigma2_run) for runs_of_boot in pairs]
        if new_run_se is None:      # a typical run's own sampling noise
            new_run_se = math.sqrt(float(np.median([u[2].std_error ** 2 for u in same])))
        rec["new_run_se"] = new_run_se
        result = pool([m[0] for m in means], [m[1] for m in means],
                      ["+".join(short_id(u[0].run_id) for u in b) for b in boots], method=method, level=level,
                      new_run_var=sigma2_run + new_run_se ** 2)
    chosen = sorted((u for b in boots for u in b), key=lambda u: u[0].run_id)
    ids = [u[0].run_id for u in chosen]
    if not result.pooled:
        level_shown = chosen[0][2].level
        lo, hi = interval_from(result.log_estimate, result.log_se, chosen[0][2].n, level_shown)
        log_ci = (math.log(lo), math.log(hi))
        verdict = chosen[0][2].verdict
    else:
        level_shown, log_ci = result.level, result.log_ci
        verdict = pooled_verdict(newest_row, log_ci) if result.k >= MIN_FOR_VERDICT else TOO_FEW_BOOTS
    verdicts = {i: u[2].verdict for i, u in zip(ids, chosen)}
    if verdict == TOO_FEW_BOOTS:
        agree, agree_text = None, each_run(verdicts)
    else:
        agree, agree_text = agreement(verdict, verdicts)
    words = list(verdicts.values())
    if any(not says_the_same(a, b) for a in words for b in words):
        rec["disagreement"] = ("single-run verdicts disagree: "
                               + "; ".join(f"{short_id(i)} {v} ({verdict_class(v)})" for i, v in verdicts.items()))
    # a run's share of the pooled weight: its boot's, split evenly between the boot's runs (their plain mean)
    run_weight = {u[0].run_id: w / len(b) for b, w in zip(boots, result.weights) for u in b}
    per_run = []
    for i, (run, _row, ri) in zip(ids, chosen):
        lo_i, hi_i = interval_from(ri.log_estimate, ri.std_error, ri.n, ri.level)
        per_run.append({"run_id": i, "boot_id": run.boot_id, "estimate": math.exp(ri.log_estimate),
                        "ci_low": lo_i, "ci_high": hi_i, "ci_level": ri.level, "log_estimate": ri.log_estimate,
                        "std_error": ri.std_error, "n": ri.n, "verdict": ri.verdict, "weight": run_weight[i]})
    notes = tuple(result.notes)
    if sigma2_run is not None and run_df:
        sigma_run = math.sqrt(sigma2_run)
        notes += (f"runs of one boot spread by a factor of {math.exp(sigma_run):.3g} beyond their own repeats "
                  f"(sigma_run {sigma_run:.3g} on the log scale, from {run_df} degree{'s' if run_df != 1 else ''} "
                  "of freedom)",)
    rec.update(k=result.k, n_runs=len(ids), runs=tuple(ids), estimate=math.exp(result.log_estimate),
               ci_low=math.exp(log_ci[0]), ci_high=math.exp(log_ci[1]), ci_level=level_shown, tau2=result.tau2,
               i2=result.i2, q=result.q, sigma2_run=sigma2_run, run_df=run_df,
               log_estimate=result.log_estimate, log_se=result.log_se, log_ci_low=log_ci[0], log_ci_high=log_ci[1],
               method=result.method, pooled=result.pooled, verdict=verdict, agree=agree,
               agree_text=agree_text, verdicts=verdicts, per_run=per_run,
               pi_reason=result.pi_reason, notes=notes)
    if result.log_pi is not None:
        rec.update(log_pi_low=result.log_pi[0], log_pi_high=result.log_pi[1], pi_low=math.exp(result.log_pi[0]),
                   pi_high=math.exp(result.log_pi[1]))
    levels = {u[2].level for u in chosen}
    if len(levels) > 1:
        rec["notes"] = tuple(rec["notes"]) + (f"runs at different interval levels ({', '.join(map(str, levels))}): "
                                              "each run's standard error is inverted at its own level",)
    return rec


# -- what a run adds to the pool ----------------------------------------------------------------------

POOLED_ENOUGH = 2   # runs of one boot already committed beyond which another adds little (one boot counts once)


def what_it_adds(manifest: Mapping[str, Any], committed: Sequence[Mapping[str, Any]]) -> list[str]:
    """What keeping run `manifest` adds to the pool across boots, against the `committed` runs'
    manifests of its profile: a new boot (another machine), a new kind of processor, new experiment
    versions, or a second run of a boot that has one. Empty: it is only another run of a boot the
    pool already holds POOLED_ENOUGH times, which moves a lesson's pooled figure little (its runs
    count once between them)."""
    mine = [m for m in committed if m.get("profile") == manifest.get("profile")
            and m.get("run_id") != manifest.get("run_id")]
    adds = []
    boot = store.boot_id(manifest)
    same_boot = [m for m in mine if boot and store.boot_id(m) == boot]
    if boot and not same_boot:
        adds.append(f"a new machine (boot {boot[:8]})")
    kind = processor_kind(store.cpu_model(manifest))
    if kind and kind not in {processor_kind(store.cpu_model(m)) for m in mine}:
        adds.append(f"a new kind of processor ({kind})")
    seen: dict[str, set[str | None]] = {}
    for m in mine:
        for name, version in store.experiment_versions(m).items():
            seen.setdefault(name, set()).add(version)
    new = sorted(name for name, version in store.experiment_versions(manifest).items()
                 if version and version not in seen.get(name, set()))
    if new:
        adds.append("new experiment versions (" + ", ".join(new) + ")")
    if boot and 0 < len(same_boot) < POOLED_ENOUGH:
        adds.append(f"a second run of boot {boot[:8]}")
    return adds
