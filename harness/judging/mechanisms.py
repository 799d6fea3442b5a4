"""Why a lesson reads as it does: the mechanism behind two lessons' figures, from a run's summary.

- 001-models: the client CPU per query of the async client and of 32 threads (mongo_models'
  measured repeats), each split by the profiled pass's category shares (`experiments.profiled`), and
  the categories that make up the gap between them. The rule, written before the run: the named
  categories (every one but `other`) that widen the gap, largest first, until they hold half of it;
  if all of them together hold less than half, the gap is "not explained".
- Either reads a profile only where it is faithful (`unfaithful`): the profiler kept at least half
  of the model's throughput and sampled between half and twice its active time. The pass profiles
  each comparison more than one way (py-spy's native frames at 100 Hz, then at a low rate or Python
  frames only, then Linux perf); the first way, in that order, whose profiles are all faithful is the
  one read, and the line names it; when none is, the line says why, and the gap is "not explained"
  or the GIL "not judged". perf's profiles are of CPython 3.13 (`experiments.profiled`): their shares
  apportion the CPU measured on the study's interpreter, and the line says both.
- 002-cpu: the seed explains the threads' extra CPU by "a GIL handoff every time libpq returns, an
  OS context switch per wake-up, and 200 threads competing for one interpreter". Its two countable
  parts are read against pg_models' pool-bound regime and the profiled pass:
  - a context switch per wake-up holds when the threads' voluntary switches per request are at
    least 1 (their interval's lower end) and above uvloop + asyncpg's (the intervals apart);
  - the GIL holds as a cause when the interpreter lock's share of the threads' profile is at least
    `GIL_MATERIAL` (the lower end of its 95% binomial interval over the samples).

A py-spy profile's share counts a thread's active time, running or waiting for a core; perf's, its
CPU time (`core.profiles`): the µs by category are that share of the measured CPU per query, an
apportionment, not a second measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core import num, profiles, stats

GIL_MATERIAL = 0.10      # the lock's share of the threads' samples that makes it a cause
# A profile read by category must be of the client as measured: py-spy (native frames) pauses every
# thread at each sample, which can slow a many-threaded client severalfold and count its waiting
# threads as active. Faithful: the profiled window kept at least this share of the plain window's
# throughput, and its samples were at most this many times its active time at the sampling rate.
FAITHFUL_THROUGHPUT = 0.5
FAITHFUL_SAMPLING = 2.0
# ... and at least this many times: a profile read without pausing the process (Python frames only)
# can pass over a thread that is active, and then its shares are of only part of the active time
# (set before the first run that profiled Python frames only; every faithful profile before it: ≥ 0.86)
FAITHFUL_SAMPLING_MIN = 0.5
MODELS_SIDES = (("async client", "mongo_models", "async_bare", "async"),
                ("32 threads", "mongo_models", "threads32", "threads"))
CPU_SIDES = (("threads + psycopg", "threads_psycopg"), ("uvloop + asyncpg", "uvloop_asyncpg"))
# the profiled pass's parts for each comparison, in the order they are tried
MODELS_PARTS = ("mongo_models", "mongo_models_python", "mongo_models_perf")
GIL_PARTS = ("pg_bound", "pg_bound_low", "pg_bound_perf")
BOUND = "bound.pool20"


def metrics_by_key(summary: Mapping[str, Any]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """A summary's metric rows by (experiment, variant, metric)."""
    return {(str(m.get("experiment")), str(m.get("variant")), str(m.get("metric"))): m
            for m in summary.get("metrics", []) or [] if isinstance(m, Mapping)}


def _value(m: Mapping[str, Any] | None, key: str = "estimate") -> float:
    v = num.finite((m or {}).get(key))
    return math.nan if v is None else float(v)


def _shares(got: Mapping, variant: str) -> dict[str, float] | None:
    shares = {label: _value(got.get(("profiled", variant, f"share_{key}")), "median")
              for label, key in profiles.KEYS.items()}
    return None if any(math.isnan(s) for s in shares.values()) else shares


def unfaithful(got: Mapping, variant: str) -> str:
    """'' when `variant`'s profile is faithful (FAITHFUL_*), else why not, in words."""
    kept = _value(got.get(("profiled", variant, "profiled_over_plain")), "median")
    sampled = _value(got.get(("profiled", variant, "sampled_over_active")), "median")
    tool = "perf" if _value(got.get(("profiled", variant, "on_cpu")), "median") == 1 else "py-spy"
    if math.isnan(kept) or kept < FAITHFUL_THROUGHPUT:
        return f"{tool} kept {kept:.0%} of its throughput; at least {FAITHFUL_THROUGHPUT:.0%} is needed"
    if math.isnan(sampled) or sampled > FAITHFUL_SAMPLING:
        return (f"{tool} sampled {num.sig3(sampled)}× its active time, at most {num.sig3(FAITHFUL_SAMPLING)}× "
                "allowed: waiting threads were counted as running")
    if sampled < FAITHFUL_SAMPLING_MIN:
        return (f"{tool} sampled {num.sig3(sampled)}× its active time, at least {num.sig3(FAITHFUL_SAMPLING_MIN)}× "
                "needed: it passed over active threads")
    return ""


def python_of(got: Mapping, variant: str) -> str:
    """The interpreter of `variant`'s windows in the profiled pass ('3.13'), '' when unrecorded."""
    v = _value(got.get(("profiled", variant, "python")), "median")
    return "" if math.isnan(v) else f"{v:.2f}"


def sampling_label(got: Mapping, variant: str) -> str:
    """How the profiled pass sampled `variant`, from its figures: `native frames, 100 Hz`, `Python
    frames only, 100 Hz` or `perf, on-CPU, 100 Hz, CPython 3.13` (runs before the pass said so
    sampled native frames only)."""
    native = _value(got.get(("profiled", variant, "native_frames")), "median")
    rate = _value(got.get(("profiled", variant, "rate_hz")), "median")
    hz = "" if math.isnan(rate) else f", {rate:g} Hz"
    if _value(got.get(("profiled", variant, "on_cpu")), "median") == 1:
        python = python_of(got, variant)
        return f"perf, on-CPU{hz}" + (f", CPython {python}" if python else "")
    return ("Python frames only" if native == 0 else "native frames") + hz


def _measured(got: Mapping, variant: str) -> bool:
    return ("profiled", variant, "profiled_over_plain") in got


def _first_faithful(got: Mapping, parts: tuple[str, ...], models: tuple[str, ...]) -> tuple[str, list[str]]:
    """(part, why each part tried before it was not faithful) of the first part whose profiles of
    `models` are all faithful, else ("", why each part was not); parts the run did not measure are
    passed over."""
    whys = []
    for part in parts:
        if not any(_measured(got, f"{part}.{m}") for m in models):
            continue
        why = "; ".join(f"{m}: {w}" for m in models if (w := unfaithful(got, f"{part}.{m}")))
        if not why:
            return part, whys
        whys.append(f"{sampling_label(got, f'{part}.{models[0]}')}: {why}")
    return "", whys


def _interval(m: Mapping[str, Any] | None) -> str:
    lo, hi = _value(m, "ci_low"), _value(m, "ci_high")
    return f" [{num.sig3(lo)}, {num.sig3(hi)}]" if not (math.isnan(lo) or math.isnan(hi)) else ""


def models_gap(summary: Mapping[str, Any]) -> list[str]:
    """001-models: µs of client CPU per query by category for both models, and what makes the gap."""
    got = metrics_by_key(summary)
    models = tuple(m for *_, m in MODELS_SIDES)
    part, whys = _first_faithful(got, MODELS_PARTS, models)
    if not part and not whys:
        return []
    sides = []
    for label, exp, variant, model in MODELS_SIDES:
        cpu = _value(got.get((exp, variant, "cpu_us_per_query")))
        if math.isnan(cpu):
            return []
        # the comparison's faithful part, else this model's own first faithful profile (shown, not compared)
        own = part or _first_faithful(got, MODELS_PARTS, (model,))[0]
        shares = _shares(got, f"{own}.{model}") if own else None
        sides.append((label, cpu, {c: s * cpu for c, s in (shares or {}).items()},
                      sampling_label(got, f"{own}.{model}") if own else ""))
    lines = ["- Where the client CPU goes (µs per query, the measured CPU split by the profiled pass's shares): "
             + "; ".join(f"{label} {num.sig3(cpu)}: " +
                         (f"({own_how}) " + ", ".join(f"{c} {num.sig3(us)}" for c, us in
                                                      sorted(by.items(), key=lambda kv: -kv[1]) if us >= 0.5)
                          if by else "no faithful profile")
                         for label, cpu, by, own_how in sides) + "."]
    python = python_of(got, f"{part}.{models[0]}") if part else ""
    measured_on = str((got.get((MODELS_SIDES[0][1], MODELS_SIDES[0][2], "cpu_us_per_query")) or {}).get("interpreter")
                      or "")
    if python and measured_on and not measured_on.startswith(f"CPython {python}."):
        # the shares are another interpreter's: say what its own windows spent, beside the measured CPU
        own = "; ".join(f"{label} {num.sig3(_value(got.get(('profiled', f'{part}.{model}', 'cpu_us_per_op'))))}"
                        for label, _, _, model in MODELS_SIDES)
        lines.append(f"- The shares are of CPython {python}, applied to the CPU measured on {measured_on}; the "
                     f"profiled pass's own plain windows on {python} spent (µs per query, one window each): {own}.")
    if whys:
        lines.append(f"- Profiles not read: {'; '.join(whys)}.")
    (a, a_cpu, a_us, _), (b, b_cpu, b_us, _) = sides
    gap = a_cpu - b_cpu
    lines.append(f"- The gap, {a} − {b}: {num.sig3(gap)} µs per query. "
                 + (gap_text(gap, a_us, b_us) if part else
                    "Not explained: no one way of profiling was faithful to both models."))
    return lines


def gap_text(gap: float, a_us: Mapping[str, float], b_us: Mapping[str, float]) -> str:
    """Which named categories make up at least half of `gap` (a − b), largest first; or "not explained"."""
    if gap == 0 or math.isnan(gap):
        return "No gap to explain."
    sign = 1 if gap > 0 else -1
    widen = sorted(((sign * (a_us[c] - b_us[c]), c) for c in a_us if c != profiles.OTHER), reverse=True)
    named, held = [], 0.0
    for part, category in widen:
        if part <= 0 or held >= abs(gap) / 2:
            break
        named.append(f"{category} {sign * part:+,.1f} µs")
        held += part
    if held < abs(gap) / 2:
        return (f"Not explained: the named categories hold {num.sig3(held)} µs of it, less than half "
                f"({profiles.OTHER}: {num.sig3(a_us[profiles.OTHER] - b_us[profiles.OTHER])} µs).")
    return f"Made of (at least half of it): {', '.join(named)}."


def _per_request(got: Mapping, model: str, share: float) -> str:
    """The lock's share as µs of the model's measured CPU per request (pool-bound), an apportionment."""
    cpu = _value(got.get(("pg_models", f"{BOUND}.{model}", "cpu_us_per_req")))
    return "" if math.isnan(cpu) else f" (≈ {num.sig3(share * cpu)} µs of its {num.sig3(cpu)} µs of CPU per request)"


def cpu_mechanism(summary: Mapping[str, Any]) -> list[str]:
    """002-cpu: context switches per request and the interpreter lock's share, against the seed's cause."""
    got = metrics_by_key(summary)
    switches = {model: got.get(("pg_models", f"{BOUND}.{model}", "ctx_vol_per_req")) for _, model in CPU_SIDES}
    lines = []
    if all(switches.values()):
        shown = "; ".join(f"{label} {num.sig3(_value(switches[m]))}{_interval(switches[m])}" for label, m in CPU_SIDES)
        invol = "; ".join(f"{label} {num.sig3(_value(got.get(('pg_models', f'{BOUND}.{m}', 'ctx_invol_per_req'))))}"
                          for label, m in CPU_SIDES)
        t, u = switches[CPU_SIDES[0][1]], switches[CPU_SIDES[1][1]]
        holds = _value(t, "ci_low") >= 1 and _value(t, "ci_low") > _value(u, "ci_high")
        lines.append(f"- Context switches per request (pool-bound, pool 20), voluntary: {shown}; involuntary: "
                     f"{invol}. \"A context switch per wake-up\": "
                     + ("**holds**: the threads switch at least once a request, more than uvloop + asyncpg."
                        if holds else "**not borne out** by these counts (rule: the threads' interval at least 1 "
                                      "and above uvloop + asyncpg's)."))
    threads = CPU_SIDES[0][1]
    faithful, whys = _first_faithful(got, GIL_PARTS, (threads,))
    # shown: the faithful part's profile, else the last one measured (shown, not judged)
    part = faithful or next((p for p in reversed(GIL_PARTS) if _measured(got, f"{p}.{threads}")), "")
    how = sampling_label(got, f"{part}.{threads}")
    why = "" if faithful else "; ".join(whys)
    gil = []
    for label, model in CPU_SIDES:
        share = _value(got.get(("profiled", f"{part}.{model}", f"share_{profiles.KEYS[profiles.GIL]}")), "median")
        n = _value(got.get(("profiled", f"{part}.{model}", "samples")), "median")
        if not (math.isnan(share) or math.isnan(n)) and n > 0:
            gil.append((label, model, share, int(n)))
    if len(gil) == len(CPU_SIDES):
        _, _, t_share, t_n = gil[0]
        low = stats.share_interval(round(t_share * t_n), t_n)[0]   # the share's 95% lower end
        shown = "; ".join(f"{label} {share:.1%} of {n} samples" + _per_request(got, model, share)
                          for label, model, share, n in gil)
        lines.append(f"- The interpreter lock's share of the client's profile (pool-bound, the profiled pass, {how}): "
                     f"{shown}. "
                     "\"A GIL handoff every time libpq returns\" as a cause of the threads' extra CPU: "
                     + (f"**not judged**: the threads' profile is not faithful ({why})." if why else
                        f"**holds**: at least {low:.1%} of the threads' samples (95% lower end; rule: "
                        f"≥ {GIL_MATERIAL:.0%})." if low >= GIL_MATERIAL else
                        f"**not borne out**: the lock holds {t_share:.1%} of the threads' samples (95% lower end "
                        f"{low:.1%}; rule: ≥ {GIL_MATERIAL:.0%})."))
    return lines


MECHANISMS = {"001-models": models_gap, "002-cpu": cpu_mechanism}


def lines(summary: Mapping[str, Any], lesson_id: str) -> list[str]:
    """The mechanism lines of `lesson_id` for RESULTS ([] when the run measured none)."""
    make = MECHANISMS.get(lesson_id)
    return make(summary) if make else []
