"""Every statistic in the study is computed here, one way.

Within one measured window (per-operation samples):
- Percentiles: numpy's ``method="linear"`` (Hyndman & Fan type 7, the default of numpy, pandas and
  R), on the raw per-operation samples. Latencies are stored in seconds and reported in
  milliseconds. ``censored_latency_summary`` counts failed operations beside the percentiles and,
  where a failure is a time-out, enters it at the time-out (censored, not dropped), so that a
  percentile that reaches into the failures is a lower bound and is flagged as such.
- Closed-loop windows (``window_latency_summary``): a window of T seconds keeps as latency samples
  only the requests that started and ended inside it, and a request of latency L does so with
  probability (T - L) / T (it falls at a uniform phase), so long requests drop out more and the plain
  mean and percentiles are biased low. Each kept sample is weighted by T / (T - L) (``edge_weights``,
  Horvitz-Thompson), giving the weighted (Hajek) mean with its linearised standard error and the
  weighted percentiles (``weighted_percentiles``: numpy's ``method="inverted_cdf"``, the one method
  numpy offers with weights: the smallest sample whose cumulative weight reaches q; with equal weights
  it differs from ``linear`` by less than one gap between neighbouring samples).
- The HDR histogram (``hdr_histogram``) is used where samples are recorded into a histogram at
  source (the open-loop load generator); its percentiles are HdrHistogram's own, at 3 significant
  digits.

Across repeats (the unit of evidence: per-request samples of one window are never treated as
independent repeats), with ``scipy.stats``:
- ``summarise(values)``: the geometric mean (`estimate`, the centre of its interval) with a Student
  t-interval computed on the log of the values (95%), the median beside it, the coefficient of
  variation with its n, and pyperf's stability rule (CV >= 10% is a warning, judged only with n >= 5).
- ``paired_logs(a, b)``: log(a_k / b_k) paired by repeat, with the pairs that have no log (a zero,
  a negative, a division by zero) counted, never dropped silently.
- ``log_ratio_summary(logs)`` / ``paired_ratio(a, b)``: the t-interval on the log of the per-repeat
  ratios, its two one-sided p-values against a reference ratio (`p_greater`: H0 ratio <= reference;
  `p_less`: H0 ratio >= reference), and the smallest ratio the run could have detected (power 80%).
  A zero-width interval (every repeat equal) is flagged (`zero_width`) and carries no p-value: three
  equal values are not certainty.
- ``tost(...)``: two one-sided t-tests on the log ratio for claims of sameness, inside a stated
  margin (equivalent when the 90% interval lies inside it), and the one-sided p-value that the
  ratio lies outside the margin (`p_outside`).
- ``sign_test(values, reference)``: the count of repeats on each side of a reference with exact
  one-sided binomial p-values (``scipy.stats.binomtest``, p = 1/2 under H0) and a Clopper-Pearson
  interval for the proportion: for bounded shares (a busy fraction capped at 1) and for figures
  with a zero, which have no log.
- ``holm(p_values)``: Holm's step-down adjustment, which controls the family-wise error rate (the
  chance of even one false rejection) under any dependence between the tests.
A bootstrap over 3 repeats collapses to their range, hence t-intervals on the log.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import pandas as pd


def _sps() -> Any:
    """scipy.stats, imported on first use: it takes a second or more to import, and the workers
    and the CLI's quick answers (errors, `--help`) import this module without needing it."""
    from scipy import stats

    return stats


PERCENTILE_METHOD: Final = "linear"
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}
# pyperf's rule of thumb: a spread this large between repeats means the figure is not stable.
UNSTABLE_CV = 0.10
# Below this many repeats a CV says little about stability (pyperf warns from its own n).
MIN_REPEATS_FOR_STABILITY = 5
ALPHA = 0.05
CONFIDENCE = 1.0 - ALPHA
POWER = 0.80
TOO_FEW = "too few repeats to judge stability"


def percentiles(values: Sequence[float] | np.ndarray, qs: Iterable[float] = PERCENTILES.values()) -> np.ndarray:
    """Percentiles (0-100) of `values` by the study's one method. NaN for an empty sample."""
    arr = np.asarray(values, dtype=float)
    qs = list(qs)
    if arr.size == 0:
        return np.full(len(qs), np.nan)
    return np.asarray(np.percentile(arr, np.asarray(qs, dtype=float), method=PERCENTILE_METHOD))


def latency_summary(latency_s: Sequence[float] | np.ndarray) -> dict[str, float]:
    """count, mean, min, p50, p90, p99, p99.9 and max, latencies in milliseconds."""
    arr = np.asarray(latency_s, dtype=float) * 1000.0
    out: dict[str, float] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({k: np.nan for k in ["mean_ms", "min_ms", *[f"{p}_ms" for p in PERCENTILES], "max_ms"]})
        return out
    out["mean_ms"] = float(arr.mean())
    out["min_ms"] = float(arr.min())
    for name, value in zip(PERCENTILES, percentiles(arr)):
        out[f"{name}_ms"] = float(value)
    out["max_ms"] = float(arr.max())
    return out


def edge_weights(latency_s: Sequence[float] | np.ndarray, window_s: float) -> np.ndarray:
    """Horvitz-Thompson weights T / (T - L) for requests kept because they started and ended inside a
    window of T = `window_s` seconds: a request of latency L at a uniform random phase lies wholly
    inside with probability (T - L) / T. A latency of T or more cannot lie inside: ValueError."""
    lat = np.asarray(latency_s, dtype=float)
    window = float(window_s)
    if not window > 0:
        raise ValueError(f"measured window must be positive, got {window_s!r} s")
    if lat.size and (np.nanmin(lat) < 0 or np.nanmax(lat) >= window):
        raise ValueError(f"latencies inside a {window:g} s window lie in [0, {window:g}) s, got "
                         f"{np.nanmin(lat):g}..{np.nanmax(lat):g} s")
    return window / (window - lat)


def weighted_percentiles(values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray,
                         qs: Iterable[float] = PERCENTILES.values()) -> np.ndarray:
    """Percentiles (0-100) of `values` with each value counted `weights` times: the smallest value
    whose cumulative weight reaches q% of the total (numpy's ``method="inverted_cdf"``, the one
    method numpy computes with weights). NaN for an empty sample."""
    arr, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    qs = list(qs)
    if arr.shape != w.shape:
        raise ValueError(f"one weight per value: {arr.size} values, {w.size} weights")
    if arr.size == 0:
        return np.full(len(qs), np.nan)
    return np.asarray(np.percentile(arr, np.asarray(qs, dtype=float), weights=w, method="inverted_cdf"))


def weighted_mean(values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(mean, standard error) of `values` weighted by `weights`: sum(w x) / sum(w) (Hajek's ratio
    estimator) and its linearised standard error, sqrt(sum(w^2 (x - mean)^2)) / sum(w), which is the
    usual s / sqrt(n) (with ddof 0) when the weights are equal. NaNs for an empty sample."""
    x, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    total = float(w.sum())
    mean = float((w * x).sum() / total)
    return mean, float(np.sqrt((w ** 2 * (x - mean) ** 2).sum()) / total)


def window_latency_summary(latency_s: Sequence[float] | np.ndarray, window_s: float) -> dict[str, float]:
    """latency_summary()'s keys for the requests of a closed-loop window of `window_s` seconds that
    started and ended inside it, without that selection: mean and percentiles weighted by
    edge_weights(); min, max and count are the samples'. Adds `mean_se_ms`, the weighted mean's
    standard error (ms), and `weight_max`, the largest weight (how far the correction reached)."""
    lat = np.asarray(latency_s, dtype=float)
    out = latency_summary(lat)
    if lat.size == 0:
        out.update(mean_se_ms=math.nan, weight_max=math.nan)
        return out
    w = edge_weights(lat, window_s)
    mean, se = weighted_mean(lat, w)
    out["mean_ms"], out["mean_se_ms"], out["weight_max"] = 1000.0 * mean, 1000.0 * se, float(w.max())
    for name, value in zip(PERCENTILES, weighted_percentiles(lat, w)):
        out[f"{name}_ms"] = 1000.0 * float(value)
    return out


def throughput(ops: int, wall_s: float) -> float:
    """Operations per second over a measured window."""
    if wall_s <= 0:
        raise ValueError(f"measured window must be positive, got {wall_s!r} s")
    return ops / wall_s


def cpu_per_op_us(cpu_s: float, ops: int) -> float:
    """Client CPU time per operation, in microseconds (NaN when nothing completed)."""
    return cpu_s / ops * 1e6 if ops else float("nan")


def switches_per_op(switches: Any, ops: int) -> float:
    """Context switches per operation: NaN when nothing completed or the count was not read (a
    missing value, or the -1 a window stores when it could not read one)."""
    try:
        n = float(switches)
    except (TypeError, ValueError):
        return float("nan")
    return n / ops if ops and n >= 0 else float("nan")


def completion_counts(task_ids: Sequence[int] | np.ndarray, n_tasks: int) -> np.ndarray:
    """Operations completed by each of tasks 0..n_tasks-1, including tasks that completed none."""
    ids = np.asarray(task_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n_tasks):
        raise ValueError(f"task ids must lie in 0..{n_tasks - 1}")
    return np.bincount(ids, minlength=n_tasks)


def jain_index(counts: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index, (sum x)^2 / (n * sum x^2): 1.0 when all equal, 1/n when one task got all."""
    x = np.asarray(counts, dtype=float)
    if x.size == 0 or not np.any(x):
        return float("nan")
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))


def fairness_summary(task_ids: Sequence[int] | np.ndarray, n_tasks: int) -> dict[str, float]:
    counts = completion_counts(task_ids, n_tasks)
    return {
        "tasks": n_tasks,
        "ops_per_task_min": int(counts.min()),
        "ops_per_task_max": int(counts.max()),
        "ops_per_task_median": float(np.median(counts)),
        "jain_index": jain_index(counts),
    }


def gil_wait_summary(late_s: Sequence[float] | np.ndarray, wait_s: Sequence[float] | np.ndarray,
                     held_above_s: float = math.nan) -> dict[str, float]:
    """A GIL probe's wake-ups (harness.core.probe.GilProbe) as figures: each wake-up's lateness net
    of its run-queue wait is its wait for the GIL plus the timer's latency; `gil_wait_ms` their
    mean, `gil_wait_p90_ms` and `gil_wait_p99_ms` percentiles, `gil_samples` how many. A wake-up
    without a run-queue reading (no schedstat) counts its whole lateness.

    `gil_found_held`: the share of wake-ups that waited longer than `held_above_s` (the probe's floor's
    99th percentile: longer than the timer alone makes it wait), NaN without it. The wake-ups are
    exponential, so (Poisson arrivals see time averages) that share estimates the share of the time
    another thread held the lock, less the holds too short to outlast the threshold."""
    late, wait = np.asarray(late_s, dtype=float), np.asarray(wait_s, dtype=float)
    net = late - np.where(np.isnan(wait), 0.0, wait)
    net = net[np.isfinite(net)]
    if not net.size:
        return {"gil_wait_ms": math.nan, "gil_wait_p90_ms": math.nan, "gil_wait_p99_ms": math.nan,
                "gil_found_held": math.nan, "gil_samples": 0}
    p90, p99 = percentiles(net, [90.0, 99.0])
    held = float(np.mean(net > held_above_s)) if math.isfinite(held_above_s) else math.nan
    return {"gil_wait_ms": float(net.mean()) * 1e3, "gil_wait_p90_ms": float(p90) * 1e3,
            "gil_wait_p99_ms": float(p99) * 1e3, "gil_found_held": held, "gil_samples": int(net.size)}


def median_relative_change(ratios: Sequence[float] | np.ndarray) -> float:
    """How far apart two runs' figures are, as one number: the median of |B/A - 1| over the figures'
    ratios B/A (NaN if none). Used by `harness compare` for absolute and normalised figures alike."""
    arr = np.asarray(ratios, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    return float(np.median(np.abs(arr - 1.0))) if arr.size else math.nan


def spread(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Run-to-run variation of one figure across repeats: mean, std (ddof=1), cv, min, max, n."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n == 0:
        return {"n": 0, "mean": np.nan, "std": np.nan, "cv": np.nan, "min": np.nan, "max": np.nan,
                "unstable": False}
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if n > 1 else 0.0
    cv = std / mean if mean else np.nan
    return {"n": n, "mean": mean, "std": std, "cv": cv, "min": float(arr.min()), "max": float(arr.max()),
            "unstable": bool(n >= MIN_REPEATS_FOR_STABILITY and cv >= UNSTABLE_CV)}


def summarize_samples(samples: pd.DataFrame, by: Sequence[str] = ("variant",),
                      latency_col: str = "latency_s") -> pd.DataFrame:
    """One row of latency_summary() per group of raw samples (e.g. per variant and repeat)."""
    rows = []
    for key, group in samples.groupby(list(by), sort=False, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), **latency_summary(group[latency_col].to_numpy())})
    return pd.DataFrame(rows)


def hdr_histogram(latency_us: Iterable[int], highest_us: int = 3_600_000_000, digits: int = 3):
    """An HdrHistogram of integer microsecond latencies (1 us .. 1 h, 3 significant digits)."""
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, highest_us, digits)
    for v in latency_us:
        h.record_value(max(1, min(int(v), highest_us)))
    return h


def hdr_summary(h) -> dict[str, float]:
    """latency_summary()'s keys from an HdrHistogram in microseconds."""
    out: dict[str, float] = {"count": int(h.get_total_count())}
    out["mean_ms"] = h.get_mean_value() / 1000.0
    out["min_ms"] = h.get_min_value() / 1000.0
    for name, q in PERCENTILES.items():
        out[f"{name}_ms"] = h.get_value_at_percentile(q) / 1000.0
    out["max_ms"] = h.get_max_value() / 1000.0
    return out


# -- failures beside latencies -------------------------------------------------------------------

def censored_latency_summary(ok_latency_s: Sequence[float] | np.ndarray, failed: int = 0,
                             timeout_s: float | None = None) -> dict[str, float]:
    """latency_summary() with the failures counted beside it.

    With `timeout_s`, each failure is a time-out: it enters the sample at the time-out (censored:
    its true latency is at least that), so the percentiles never improve by dropping the slowest
    requests. `censored_from_pct` is the percentile above which figures are lower bounds."""
    ok = np.asarray(ok_latency_s, dtype=float)
    failed = int(failed)
    if failed < 0:
        raise ValueError(f"failed must be >= 0, got {failed}")
    if timeout_s is not None and failed:
        sample = np.concatenate([ok, np.full(failed, float(timeout_s))])
    else:
        sample = ok
    out = latency_summary(sample)
    total = int(ok.size) + failed
    out["ok"] = int(ok.size)
    out["failed"] = failed
    out["failed_pct"] = 100.0 * failed / total if total else float("nan")
    out["censored"] = bool(timeout_s is not None and failed)
    out["censored_from_pct"] = (100.0 * ok.size / total) if out["censored"] else float("nan")
    return out


# -- across repeats ------------------------------------------------------------------------------

def _clean(values) -> np.ndarray:
    arr = np.asarray(list(values.values()) if isinstance(values, Mapping) else values, dtype=float)
    return arr[np.isfinite(arr)]


def _t_interval(x: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """(mean, low, high, standard error) of a Student t-interval on x; NaN bounds for n < 2."""
    n = x.size
    mean = float(x.mean()) if n else float("nan")
    if n < 2:
        return mean, float("nan"), float("nan"), float("nan")
    se = float(x.std(ddof=1) / math.sqrt(n))
    if se == 0.0:
        return mean, mean, mean, 0.0
    low, high = _sps().t.interval(confidence, n - 1, loc=mean, scale=se)
    return mean, float(low), float(high), se


def stability_text(cv: float, n: int) -> str:
    if n < MIN_REPEATS_FOR_STABILITY:
        return f"{TOO_FEW} (n={n})"
    if not math.isfinite(cv):
        return f"CV undefined (n={n})"
    verdict = "UNSTABLE" if cv >= UNSTABLE_CV else "stable"
    return f"{verdict}: CV {100 * cv:.1f}% over n={n}"


def summarise(values: Sequence[float] | Mapping[int, float] | np.ndarray,
              confidence: float = CONFIDENCE) -> dict[str, Any]:
    """One figure over repeats: n, median, geometric mean (`mean`, and `estimate`: the same number,
    the centre of the interval) with a t-interval on the log (`ci_low`, `ci_high`), CV (std ddof=1 /
    mean), `unstable` (CV >= 10% with n >= 5) and `stability`, a text. The median is not the centre
    of that interval and may lie outside it.

    Values <= 0 have no log: then the estimate is the arithmetic mean and the interval the
    arithmetic t-interval (`method` says which). Each value must be one repeat's figure, never one
    request's."""
    x = _clean(values)
    n = int(x.size)
    out: dict[str, object] = {"n": n, "median": float(np.median(x)) if n else float("nan")}
    if n == 0:
        out.update(mean=float("nan"), estimate=float("nan"), ci_low=float("nan"), ci_high=float("nan"),
                   cv=float("nan"), unstable=False, stability=f"{TOO_FEW} (n=0)", method="none")
        return out
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / abs(mean)) if n > 1 and mean else float("nan")
    if np.all(x > 0):
        m, lo, hi, _ = _t_interval(np.log(x), confidence)
        out.update(mean=math.exp(m), ci_low=math.exp(lo) if math.isfinite(lo) else float("nan"),
                   ci_high=math.exp(hi) if math.isfinite(hi) else float("nan"),
                   method="geometric mean, t-interval on log")
    else:
        m, lo, hi, _ = _t_interval(x, confidence)
        out.update(mean=m, ci_low=lo, ci_high=hi, method="arithmetic mean, t-interval")
    out["estimate"] = out["mean"]
    out["cv"] = cv
    out["unstable"] = bool(n >= MIN_REPEATS_FOR_STABILITY and math.isfinite(cv) and cv >= UNSTABLE_CV)
    out["stability"] = stability_text(cv, n)
    return out


def paired_logs(a, b) -> dict[str, Any]:
    """log(a_k / b_k) over the repeats both sides have (Mappings keyed by repeat, or aligned
    sequences), with what had no log counted, not dropped silently: `logs`, `n_pairs` (repeats with
    both figures finite), `n_nonpositive` (a pair with a_k <= 0 or b_k <= 0: a zero ratio, a negative
    or a division by zero) and `n_undefined` (a pair with a non-finite figure)."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            raise ValueError("pair by repeat: give both sides as {repeat: value} or both as sequences")
        keys = [k for k in a if k in b]
        av = np.array([a[k] for k in keys], dtype=float)
        bv = np.array([b[k] for k in keys], dtype=float)
    else:
        av, bv = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if av.shape != bv.shape:
            raise ValueError(f"paired figures need as many repeats on each side, got {av.size} and {bv.size}")
    finite = np.isfinite(av) & np.isfinite(bv)
    keep = finite & (av > 0) & (bv > 0)
    return {"logs": np.log(av[keep] / bv[keep]), "n_pairs": int(finite.sum()),
            "n_nonpositive": int((finite & ~keep).sum()), "n_undefined": int((~finite).sum())}


def detectable_log_effect(sd_log: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest |log ratio| a paired t-test on n repeats detects with this power (two-sided alpha)."""
    if n < 2 or not math.isfinite(sd_log):
        return float("nan")
    df = n - 1
    return float((_sps().t.ppf(1 - alpha / 2, df) + _sps().t.ppf(power, df)) * sd_log / math.sqrt(n))


def _one_sided(m: float, se: float, n: int, ref: float) -> tuple[float, float]:
    """(p_greater, p_less): one-sided t-test p-values of H0 mean <= ref and H0 mean >= ref.
    NaN for fewer than 2 values or a zero standard error (no test)."""
    if n < 2 or not se > 0:
        return float("nan"), float("nan")
    t = (m - ref) / se
    return float(_sps().t.sf(t, n - 1)), float(_sps().t.cdf(t, n - 1))


def log_ratio_summary(logs: Sequence[float] | np.ndarray, reference: float = 1.0,
                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """A ratio from per-repeat log ratios: geometric-mean ratio (`ratio`, the centre of the
    interval), the t-interval at `confidence`, the one-sided p-values against `reference`
    (`p_greater`: H0 ratio <= reference; `p_less`: H0 ratio >= reference; `p_value`: two-sided),
    `zero_width` when every repeat gave the same ratio (then no p-value: no test), and the smallest
    detectable ratio (as a factor >= 1: e.g. 1.08 = 8%) at the interval's level, power 80%."""
    x = np.asarray(logs, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    ref = math.log(reference)
    m, lo, hi, se = _t_interval(x, confidence)
    sd = float(x.std(ddof=1)) if n > 1 else float("nan")
    p_greater, p_less = _one_sided(m, se, n, ref)
    p = min(1.0, 2 * min(p_greater, p_less)) if math.isfinite(p_greater) else float("nan")
    mde = detectable_log_effect(sd, n, 1 - confidence)
    ex = lambda v: math.exp(v) if math.isfinite(v) else float("nan")  # noqa: E731
    return {"n": n, "ratio": ex(m), "ci_low": ex(lo), "ci_high": ex(hi), "confidence": confidence,
            "p_value": p, "p_greater": p_greater, "p_less": p_less, "zero_width": bool(n >= 2 and se == 0.0),
            "sd_log": sd, "detectable_ratio": ex(mde), "reference": reference}


def paired_ratio(a_by_repeat, b_by_repeat, reference: float = 1.0,
                 confidence: float = CONFIDENCE) -> dict[str, Any]:
    """a / b over repeats, paired by repeat: t-interval on the log of the per-repeat ratios, with the
    pairs that had no log counted (`n_pairs`, `n_nonpositive`, `n_undefined`)."""
    pairs = paired_logs(a_by_repeat, b_by_repeat)
    out = log_ratio_summary(pairs["logs"], reference, confidence)
    out.update(n_pairs=pairs["n_pairs"], n_nonpositive=pairs["n_nonpositive"], n_undefined=pairs["n_undefined"])
    return out


def tost(logs: Sequence[float] | np.ndarray, margin: float, reference: float = 1.0,
         alpha: float = ALPHA) -> dict[str, Any]:
    """Two one-sided t-tests that a ratio lies within [reference / (1 + margin), reference *
    (1 + margin)] (symmetric on the log). `equivalent` when both p-values are below alpha, which is
    the (1 - 2 alpha) interval (`ci90_low`, `ci90_high` at the default alpha) lying inside the margin.
    `p_outside` is the one-sided p-value of the opposite claim, that the ratio lies outside the
    margin (below it or above it, whichever the estimate is nearer): it is below alpha when that
    interval lies wholly outside. A zero-width interval (every repeat equal) gives no test."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0, got {margin!r}")
    x = np.asarray(logs, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    ref, d = math.log(reference), math.log1p(margin)
    nan = float("nan")
    if n < 2:
        return {"n": n, "p_value": nan, "p_outside": nan, "equivalent": False, "ci90_low": nan,
                "ci90_high": nan, "confidence": 1 - 2 * alpha, "margin": margin, "zero_width": False}
    m, lo, hi, se = _t_interval(x, 1 - 2 * alpha)
    p_above_low, p_below_low = _one_sided(m, se, n, ref - d)     # H0: ratio <= lower bound / >= it
    p_above_high, p_below_high = _one_sided(m, se, n, ref + d)   # H0: ratio <= upper bound / >= it
    p = max(p_above_low, p_below_high) if se > 0 else nan
    p_outside = min(p_below_low, p_above_high) if se > 0 else nan
    return {"n": n, "p_value": p, "p_outside": p_outside, "equivalent": bool(p < alpha),
            "ci90_low": math.exp(lo), "ci90_high": math.exp(hi), "confidence": 1 - 2 * alpha,
            "margin": margin, "zero_width": bool(se == 0.0)}


def sign_test(values: Sequence[float] | np.ndarray, reference: float,
              confidence: float = 1 - 2 * ALPHA) -> dict[str, Any]:
    """How many repeats lie above and below `reference`, with exact one-sided binomial p-values
    (the sign test; under H0 a repeat is on a given side with probability at most 1/2):
    `p_greater` (H0: the figure's median <= reference), `p_less` (H0: median >= reference), and the
    Clopper-Pearson intervals at `confidence` for the share of repeats above (`share_low`,
    `share_high`) and below (`below_share_low`, `below_share_high`). A value equal to the
    reference counts on neither side; a NaN (a figure undefined in that repeat: 0 / 0) counts in n
    on neither side, so it weighs against both claims. Three repeats all above give p = 0.125."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    above = int(np.sum(x > reference))
    below = int(np.sum(x < reference))
    if n == 0:
        nan = float("nan")
        return {"n": 0, "above": 0, "below": 0, "p_greater": nan, "p_less": nan, "share_low": nan,
                "share_high": nan, "below_share_low": nan, "below_share_high": nan, "confidence": confidence}
    up = _sps().binomtest(above, n, 0.5).proportion_ci(confidence_level=confidence, method="exact")
    down = _sps().binomtest(below, n, 0.5).proportion_ci(confidence_level=confidence, method="exact")
    return {"n": n, "above": above, "below": below,
            "p_greater": float(_sps().binomtest(above, n, 0.5, alternative="greater").pvalue),
            "p_less": float(_sps().binomtest(below, n, 0.5, alternative="greater").pvalue),
            "share_low": float(up.low), "share_high": float(up.high),
            "below_share_low": float(down.low), "below_share_high": float(down.high), "confidence": confidence}


def share_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson interval at `confidence` for a share of `k` in `n` samples (scipy's binomtest);
    (NaN, NaN) without samples."""
    if n <= 0:
        return float("nan"), float("nan")
    ci = _sps().binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def benjamini_hochberg(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values (NaN stays NaN and is not counted in the family), by statsmodels.

    Rejecting where q < alpha keeps the expected share of false rejections among the rejections at
    alpha, for independent tests or tests of positive dependence (PRDS)."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if idx.size:
        out[idx] = multipletests(p[idx], method="fdr_bh")[1]
    return out


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family).

    Rejecting where the adjusted p < alpha keeps the family-wise error rate (the chance of at least
    one false rejection) at alpha under any dependence between the tests; the adjusted p-values are
    monotone in the raw ones and never below them."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * float(p[j])))
        out[j] = running
    return out
