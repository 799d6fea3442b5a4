"""`harness verify`: the seeds' "Verify" lines judged on a user's workload.

`checks(run)` gives one row per check and subject, each with its figure over repeats (estimate and a
90% interval: the two one-sided 95% bounds the verdict reads, as the claims ledger's one-sided
tests), a verdict and one sentence on what to change:

    pass          the interval lies on the passing side of the threshold
    fail          the interval lies on the failing side
    inconclusive  the interval straddles it, there are fewer than MIN_REPEATS repeats or a
                  zero-width interval (but a ratio of counts that agrees in every repeat gets
                  the counts' resolution as its interval: `count_ratio_interval`), a window
                  had failed operations (not a clean figure), or
                  the machine was busy with other work (the load generator's own validity,
                  as Locust warns past 90% of its CPU)

PostgreSQL (seed 002), per client model at each pool size (`verify_postgres`; figures from
`analysis.postgres.models_table`, the study's own derivation):
    002-pool-bound   "throughput is close to pool_size / per-request database time":
                     rps / (pool / db_time) within [BUSY, 1 / BUSY]
    002-limit        "the decision names which resource limited throughput ... and the production
                     pool size matches the tested one": one limiting resource
                     (`postgres.limiting_resource`) in at least LIMIT_AGREEMENT of the repeats, not
                     "not identified", and `load.production_pool` among the pools tested
    002-tail         "reports p99 and the p99/p50 ratio ... and the chosen configuration meets the
                     latency objective": p99 below `load.p99_objective_ms`
    002-decide       seed 002's decision rule on the measured limits, with asyncio's CPU per
                     request as a share of the threads model's (paired by repeat)
MongoDB (seed 001), `verify_mongo`:
    001-fairness     "the maximum latency is within a small multiple of the p99 (max/p99 <=
                     MAX_OVER_P99), and per-task completion counts are even (fewest/most >= EVEN)",
                     per closed-loop variant: bare[pool=P] and semaphore[pool=P]
    001-stall        "a probe shows loop stalls below 10 ms" while the large read runs, per batching:
                     the longest stall counted in the loop thread's own CPU (what decoding a batch
                     costs, net of the wait for a core on a shared machine); the wall-clock stall
                     and its wait share are given beside it in the reason
    001-migration    "the migration's benefit is measured on the real query mix -- CPU per query
                     and tail latency": the async client's CPU per query over the threads model's
    001-client       "exactly one AsyncMongoClient is constructed per process": time per query with
                     a client per request over a shared client's, above 1
    001-bulk         "loaders use insert_many or bulk_write" (only with allow_writes, in a scratch
                     collection): time per document one by one over insert_many's, above 1

Each experiment's per-repeat figures are its own `compute_metrics` (contract C1's long form).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...core import stats
from ...core.seed_lines import LINES as SEED_LINES
from ...core.store import Run
from ...core.verdicts import CHECKS, FAIL, INCONCLUSIVE, PASS
from ..analysis import BUSY
from ..mongo.analysis import closed_loop_summary, stall_split
from ..postgres.analysis import models_table

CONFIDENCE = 0.90          # two one-sided 95% bounds
MIN_REPEATS = 3
LIMIT_AGREEMENT = 0.8      # share of repeats that must name the same limiting resource
MAX_OVER_P99 = 2.0         # "a small multiple of the p99"
EVEN = 0.5                 # fewest / most completions per task
OTHER_LOAD_PCT = 100.0     # other processes' CPU (% of one core) past which a window is not valid
VERDICTS = CHECKS

# The seed's sentence each check tests (harness.core.seed_lines: typed once, shared with the findings).
LINES = {check: SEED_LINES[key] for check, key in (
    ("002-pool-bound", "002-pool"), ("002-limit", "002-limit"), ("002-tail", "002-tail"),
    ("002-decide", "002-decide"), ("001-fairness", "001-pool"), ("001-stall", "001-cursor"),
    ("001-client", "001-client"), ("001-bulk", "001-bulk"), ("001-migration", "001-models"))}
CHECK_COLUMNS = ("check", "subject", "verdict", "figure", "unit", "estimate", "ci_low", "ci_high", "n",
                 "threshold", "reason", "advice", "line")


def _workload(run: Run, experiment: str) -> dict[str, Any]:
    text = run.manifest.get("experiments", {}).get(experiment, {}).get("params", {}).get("workload") or "{}"
    return json.loads(text)


def guard_lines(run: Run) -> list[str]:
    """The report's first lines on PostgreSQL: the role verify used and what it may write, then the
    functions the walk could not read or was told to trust, as `verify_postgres`'s first repeat
    recorded them (`harness.experiments.verify.postgres.guarded_preflight`); none for MongoDB."""
    if "verify_postgres" not in run.experiments:
        return []
    notes = run.result("verify_postgres", 0).get("notes", {})
    out = list(notes.get("role", {}).get("lines", []))
    reach = notes.get("reach", {})
    if reach.get("not_checked"):
        out.append(f"not checked (a body the walk cannot read): {', '.join(reach['not_checked'])}")
    if reach.get("trusted"):
        out.append(f"trusted, not walked (--trust-function): {', '.join(reach['trusted'])}")
    return out


def interval(values: Sequence[float]) -> dict[str, Any]:
    s = stats.summarise(list(values), confidence=CONFIDENCE)
    return {"estimate": s["estimate"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "n": s["n"]}


def _unusable(n: int, lo: float, hi: float, dirty: str) -> str:
    """Why no verdict can be read from an interval ("" when one can)."""
    if dirty:
        return dirty
    if n < MIN_REPEATS:
        return f"{n} repeat{'s' if n != 1 else ''}: at least {MIN_REPEATS} are needed for an interval"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval"
    if lo == hi:
        return "every repeat gave the same figure: a zero-width interval is no evidence"
    return ""


def below(values: Sequence[float], limit: float, dirty: str = "") -> tuple[str, dict[str, Any], str]:
    """Verdict of "the figure is below `limit`" from its repeats: (verdict, interval, reason)."""
    return _judge(values, limit, "below", dirty)


def above(values: Sequence[float], limit: float, dirty: str = "") -> tuple[str, dict[str, Any], str]:
    """Verdict of "the figure is above `limit`" from its repeats."""
    return _judge(values, limit, "above", dirty)


def paired_interval(a: dict[Any, float], b: dict[Any, float]) -> dict[str, Any]:
    """Interval of a / b from figures paired by repeat (the repeats both have)."""
    r = stats.paired_ratio(a, b, confidence=CONFIDENCE)
    return {"estimate": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "n": r["n"]}


def _judge(values: Sequence[float], limit: float, side: str, dirty: str) -> tuple[str, dict[str, Any], str]:
    return judge_interval(interval(values), limit, side, dirty)


def judge_interval(iv: dict[str, Any], limit: float, side: str, dirty: str = "") -> tuple[str, dict[str, Any], str]:
    """Verdict of "the figure is `side` (below / above) `limit`" from its interval: pass when the
    whole interval is on that side, fail when it is all on the other, else inconclusive."""
    why = _unusable(iv["n"], iv["ci_low"], iv["ci_high"], dirty)
    if why:
        return INCONCLUSIVE, iv, why
    if iv["ci_high"] < limit:
        return (PASS if side == "below" else FAIL), iv, f"the 90% interval lies below {limit:g}"
    if iv["ci_low"] > limit:
        return (PASS if side == "above" else FAIL), iv, f"the 90% interval lies above {limit:g}"
    return INCONCLUSIVE, iv, f"the 90% interval straddles {limit:g}"


def within(values: Sequence[float], low: float, high: float, dirty: str = "") -> tuple[str, dict[str, Any], str]:
    iv = interval(values)
    why = _unusable(iv["n"], iv["ci_low"], iv["ci_high"], dirty)
    if why:
        return INCONCLUSIVE, iv, why
    if low <= iv["ci_low"] and iv["ci_high"] <= high:
        return PASS, iv, f"the 90% interval lies within [{low:.2f}, {high:.2f}]"
    if iv["ci_high"] < low or iv["ci_low"] > high:
        return FAIL, iv, f"the 90% interval lies outside [{low:.2f}, {high:.2f}]"
    return INCONCLUSIVE, iv, f"the 90% interval crosses an end of [{low:.2f}, {high:.2f}]"


def _pct(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "—"


def _f(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "—"


def _bounds(iv: dict[str, Any], fmt=_f) -> str:
    """"[low, high]" of an interval, or "(no interval)" when it has none (one repeat)."""
    lo, hi = iv.get("ci_low", math.nan), iv.get("ci_high", math.nan)
    return f"[{fmt(lo)}, {fmt(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else "(no interval)"


def _row(check: str, subject: str, verdict: str, figure: str, unit: str, iv: dict[str, Any], threshold: str,
         reason: str, advice: str) -> dict[str, Any]:
    return {"check": check, "subject": subject, "verdict": verdict, "figure": figure, "unit": unit,
            "estimate": iv.get("estimate", math.nan), "ci_low": iv.get("ci_low", math.nan),
            "ci_high": iv.get("ci_high", math.nan), "n": iv.get("n", 0), "threshold": threshold,
            "reason": reason, "advice": advice, "line": LINES[check]}


def _dirty(g: pd.DataFrame, errors: str = "errors", other: str | None = None) -> str:
    """Why the windows of `g` are not clean figures ("" when they are)."""
    failed = int(g[errors].sum()) if errors in g else 0
    if failed:
        return f"{failed} failed operation{'s' if failed != 1 else ''} in the windows: not a clean figure"
    busy = g[other].dropna() if other and other in g else pd.Series(dtype=float)
    if len(busy) and (busy := float(busy.median())) > OTHER_LOAD_PCT:
        return f"other processes used {busy:.0f}% of a core during the windows: the load was not the workload's alone"
    return ""


# ------------------------------------------------------------------------------------------ PostgreSQL

def pg_checks(run: Run) -> list[dict[str, Any]]:
    t = models_table(run, "verify_postgres")
    if t.empty:
        return []
    load = _workload(run, "verify_postgres").get("load", {})
    objective, production = load.get("p99_objective_ms"), load.get("production_pool")
    pools = sorted(int(p) for p in t["pool"].unique())
    rows = []
    for (pool, model), g in t.groupby(["pool", "model"], sort=False):
        subject = f"{model}, pool {int(pool)}"
        dirty = _dirty(g, "errors", "other_cpu_pct")
        verdict, iv, why = within(g["pool_bound_frac"], BUSY, 1 / BUSY, dirty)
        advice = {PASS: "The pool decides: change the pool size or the queries, not the concurrency model.",
                  FAIL: "Throughput is not at the pool's bound: the pool does not decide here (see 002-limit).",
                  INCONCLUSIVE: "Run more repeats or a longer window to tell."}[verdict]
        rows.append(_row("002-pool-bound", subject, verdict, "rps / (pool / db_time)", "ratio", iv,
                         f"[{BUSY:.2f}, {1 / BUSY:.2f}]", why, advice))
        rows.append(_limit_row(g, subject, pools, production, dirty))
        ratio = interval(g["p99_p50_ratio"])
        p99_note = f"p99/p50 {_f(ratio['estimate'])} {_bounds(ratio)}"
        if objective:
            verdict, iv, why = below(g["p99_ms"], float(objective), dirty)
            advice = {PASS: f"p99 meets the {objective:g} ms objective ({p99_note}).",
                      FAIL: f"p99 misses the {objective:g} ms objective ({p99_note}): bound the waiters or "
                              "size the pool for the tail.",
                      INCONCLUSIVE: f"Not clear of the {objective:g} ms objective ({p99_note})."}[verdict]
            rows.append(_row("002-tail", subject, verdict, "p99", "ms", iv, f"< {objective:g} ms", why, advice))
        else:
            iv = interval(g["p99_ms"])
            rows.append(_row("002-tail", subject, INCONCLUSIVE, "p99", "ms", iv, "no objective",
                             "the workload file gives no load.p99_objective_ms", f"Set one to judge ({p99_note})."))
    for pool, g in t.groupby("pool", sort=False):
        rows.append(_decide_row(g, int(pool)))
    return rows


def _modal_limit(g: pd.DataFrame) -> tuple[str, int, int]:
    counts = g["limit"].value_counts()
    return str(counts.index[0]), int(counts.iloc[0]), int(counts.sum())


def _limit_row(g: pd.DataFrame, subject: str, pools: list[int], production: int | None,
               dirty: str) -> dict[str, Any]:
    limit, k, n = _modal_limit(g)
    iv = {"estimate": k / n, "ci_low": math.nan, "ci_high": math.nan, "n": n}
    threshold = f">= {LIMIT_AGREEMENT:.0%} of repeats"
    if production is not None and production not in pools:
        return _row("002-limit", subject, FAIL, f"limit: {limit}", "share of repeats", iv, threshold,
                    f"load.production_pool {production} is not among the pools tested ({pools})",
                    f"Test the pool production runs ({production} connections).")
    if dirty or n < MIN_REPEATS:
        why = dirty or f"{n} repeat{'s' if n != 1 else ''}: at least {MIN_REPEATS} are needed"
        return _row("002-limit", subject, INCONCLUSIVE, f"limit: {limit}", "share of repeats", iv, threshold,
                    why, "Run more repeats.")
    reason = "; ".join(g.loc[g["limit"] == limit, "limit_reason"].head(1))
    if limit == "not identified" and k / n >= LIMIT_AGREEMENT:
        client_cpu = float(g.loc[g["limit"] == limit, "cpu_pct"].median())   # NaN when never measured
        return _row("002-limit", subject, FAIL, f"limit: {limit}", "share of repeats", iv, threshold, reason,
                    not_identified_advice(client_cpu))
    if k / n >= LIMIT_AGREEMENT:
        return _row("002-limit", subject, PASS, f"limit: {limit}", "share of repeats", iv, threshold,
                    f"{k} of {n} repeats: {reason}", f"The limiting resource is {limit}.")
    return _row("002-limit", subject, INCONCLUSIVE, f"limit: {limit}", "share of repeats", iv, threshold,
                f"only {k} of {n} repeats name {limit}", "The limit moves between repeats: run longer windows.")


def not_identified_advice(client_cpu_pct: float) -> str:
    """What to do when no resource reached its limit, from the client's median CPU (% of a core):
    "more clients" only for a client with CPU to spare. A threads client on a GIL build often sits
    at one core with the machine's other core partly idle (the PostgreSQL example here: threads +
    psycopg at 101% of a core, the machine at about 155% of 200%), where more clients add work to
    a client already that busy."""
    if not math.isnan(client_cpu_pct) and client_cpu_pct >= BUSY * 100.0:
        return (f"No resource reached its limit by this check's rule, but the client ran {client_cpu_pct:.0f}% of a "
                "core: more clients would add work to a client already that busy. The limit lies outside what is "
                "measured (the interpreter lock and the hand-offs between threads, locks, the network, a server "
                "elsewhere); compare the models' CPU per request (002-decide).")
    return ("No resource was saturated: the load may be too light (more clients) or the limit is "
            "outside what is measured (locks, the network, a server elsewhere).")


def switches_text(g: pd.DataFrame, voluntary: str, involuntary: str, by: str = "model") -> str:
    """Each model's median context switches per operation over the repeats, voluntary + involuntary
    ('' for a run recorded before they were read)."""
    if voluntary not in g.columns:
        return ""
    parts = [f"{m} {_f(float(gm[voluntary].median()))} + {_f(float(gm[involuntary].median()))}"
             for m, gm in g.groupby(by, sort=True) if gm[voluntary].notna().any()]
    return f"context switches per operation, voluntary + involuntary: {', '.join(parts)}" if parts else ""


def _decide_row(g: pd.DataFrame, pool: int) -> dict[str, Any]:
    limits = {m: _modal_limit(gm) for m, gm in g.groupby("model")}
    threads = "threads_psycopg"
    iv: dict[str, Any] = {"estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    shares = []
    if threads in limits:
        base = g[g["model"] == threads].set_index("repeat")["cpu_us_per_req"].to_dict()
        for m in sorted(set(limits) - {threads}):
            r = stats.paired_ratio(g[g["model"] == m].set_index("repeat")["cpu_us_per_req"].to_dict(), base,
                                   confidence=CONFIDENCE)
            if r["n"]:
                shares.append((m, r))
    best = min(shares, key=lambda x: x[1]["ratio"]) if shares else None
    if best:
        iv = {"estimate": best[1]["ratio"], "ci_low": best[1]["ci_low"], "ci_high": best[1]["ci_high"],
              "n": best[1]["n"]}
    share_text = "; ".join(f"{m} uses {_pct(r['ratio'])} {_bounds(r, _pct)} of the threads' CPU per request"
                           for m, r in shares)
    if switches := switches_text(g, "ctx_vol_per_req", "ctx_invol_per_req"):
        share_text = f"{share_text}; {switches}" if share_text else switches
    named = {m: lim for m, (lim, k, n) in limits.items() if n >= MIN_REPEATS and k / n >= LIMIT_AGREEMENT}
    subject = f"pool {pool}"
    figure = f"CPU per request, {best[0]} / threads" if best else "CPU per request"
    if len(named) < len(limits) or any(v == "not identified" for v in named.values()):
        return _row("002-decide", subject, INCONCLUSIVE, figure, "ratio", iv, "a limit for every model",
                    "the limiting resource is not identified for every model", share_text or "—")
    if all(v == "pool" for v in named.values()):
        return _row("002-decide", subject, PASS, figure, "ratio", iv, "a limit for every model",
                    "every model is pool-bound",
                    "The pool decides: keep the codebase's concurrency model; size the pool or speed up the "
                    f"queries. ({share_text})" if share_text else "The pool decides: keep the concurrency model.")
    if named.get(threads) == "client CPU":
        return _row("002-decide", subject, PASS, figure, "ratio", iv, "a limit for every model",
                    "the threads model is bound by its own CPU",
                    f"The client decides: {share_text}. Move the hot path to the cheapest model.")
    summary = ", ".join(f"{m}: {v}" for m, v in sorted(named.items()))
    return _row("002-decide", subject, PASS, figure, "ratio", iv, "a limit for every model", summary,
                f"Limits: {summary}. {share_text}." if share_text else f"Limits: {summary}.")


# ---------------------------------------------------------------------------------------------- MongoDB

def stalls(run: Run) -> pd.DataFrame:
    """Per large-read variant and repeat: the longest loop stall in wall-clock time (`max_stall_ms`),
    the longest counted in the loop thread's own CPU (`max_stall_run_ms`, what the 001-stall check
    reads) and the longest wall-clock stall's wait share (`max_stall_wait_share`), with the documents
    and the time (`analysis.mongo.stall_split`). A read that ended before the probe's first wake-up
    has no probe row: its stall is at most the read's own time, which stands in for both (an upper
    bound). Runs before the probe split stalls have no run time: their wall-clock stall, which holds
    it, stands in."""
    reads = run.table("verify_mongo", "reads")
    if reads.empty:
        return pd.DataFrame()
    probe = run.table("verify_mongo", "probe")
    rows = []
    for _, r in reads.iterrows():
        p = probe[(probe["variant"] == r["variant"]) & (probe["repeat"] == r["repeat"])] if len(probe) else probe
        split = stall_split(p)
        if len(p):
            wall, run_ms, share = split["max_ms"], split["run_max_ms"], split["max_wait_share"]
            if math.isnan(run_ms):
                run_ms = wall
        else:
            wall = run_ms = 1000.0 * float(r["wall_s"])
            share = np.nan
        rows.append({"variant": r["variant"], "repeat": r["repeat"], "batch_size": int(r["batch_size"]),
                     "documents": int(r["documents"]), "read_s": float(r["wall_s"]), "max_stall_ms": wall,
                     "max_stall_run_ms": run_ms, "max_stall_wait_share": share,
                     "wakeups": len(p), "ok": bool(r["ok"])})
    return pd.DataFrame(rows)


def closed_loop(run: Run) -> pd.DataFrame:
    t = closed_loop_summary(run, "verify_mongo")
    if t.empty:
        return t
    t = t.copy()
    t["max_over_p99"] = t["max_ms"] / t["p99_ms"]
    t["fewest_over_most"] = t["ops_per_task_min"] / t["ops_per_task_max"].replace(0, np.nan)
    t["other_cpu_pct"] = t.get("machine_cpu_pct", np.nan) - t.get("client_cpu_pct", np.nan) \
        - t.get("db_cpu_pct", np.nan)
    return t


def count_ratio_interval(g: pd.DataFrame) -> dict[str, Any]:
    """Interval of fewest / most completions per task over repeats. The figure is a ratio of whole
    counts, so repeats that agree give a zero-width t-interval that says nothing of its error; then
    the interval is the counts' own resolution instead (half a completion either way, over the
    repeats' counts): a fair pool that completes 19 and 20 per task in every repeat reads 0.95
    [0.90, 1.00], not "no evidence"."""
    iv = interval(g["fewest_over_most"].fillna(0.0))
    if iv["n"] < MIN_REPEATS or not iv["ci_low"] == iv["ci_high"]:
        return iv
    fewest, most = g["ops_per_task_min"].astype(float), g["ops_per_task_max"].astype(float)
    low = ((fewest - 0.5).clip(lower=0.0) / (most + 0.5)).min()
    high = ((fewest + 0.5) / (most - 0.5).clip(lower=0.5)).clip(upper=1.0).max()
    return {**iv, "ci_low": float(low), "ci_high": float(high)}


def mongo_checks(run: Run) -> list[dict[str, Any]]:
    rows = []
    t = closed_loop(run)
    body = _workload(run, "verify_mongo")
    if not t.empty:
        for variant, g in t[t["mode"].isin(["bare", "semaphore"])].groupby("variant", sort=False):
            dirty = _dirty(g, "errors", "other_cpu_pct")
            v_tail, iv_tail, why_tail = below(g["max_over_p99"], MAX_OVER_P99, dirty)
            v_even, iv_even, why_even = judge_interval(count_ratio_interval(g), EVEN, "above", dirty)
            verdict = (FAIL if FAIL in (v_tail, v_even) else
                       PASS if (v_tail, v_even) == (PASS, PASS) else INCONCLUSIVE)
            semaphore = g["semaphore"].iloc[0]
            fix = ("Starved tasks: put a FIFO asyncio.Semaphore sized to maxPoolSize in front of the client."
                   if not semaphore else "Still unfair behind the semaphore: fewer tasks or a larger pool.")
            advice = {PASS: "The pool is fair at this concurrency.", FAIL: fix,
                      INCONCLUSIVE: "Run more repeats or a longer window to tell."}[verdict]
            reason = (f"max/p99 {_f(iv_tail['estimate'])} {_bounds(iv_tail)} ({v_tail}: {why_tail}); "
                      f"fewest/most per task {_f(iv_even['estimate'])} {_bounds(iv_even)} ({v_even}: {why_even})")
            # the figure shown is the one that decided: the evenness when the tail alone would pass
            even_decides = v_even == FAIL or (v_tail == PASS and v_even != PASS)
            figure, iv = (("fewest / most completions per task", iv_even) if even_decides
                          else ("max / p99", iv_tail))
            rows.append(_row("001-fairness", str(variant), verdict, figure, "ratio", iv,
                             f"max/p99 <= {MAX_OVER_P99:g} and fewest/most >= {EVEN:g}", reason, advice))
        bare = t[t["mode"] == "bare"]
        threads = t[t["mode"] == "threads"]
        if len(bare) and len(threads):
            first = bare[bare["pool_size"] == bare["pool_size"].min()]
            iv = paired_interval(first.set_index("repeat")["cpu_us_per_query"].to_dict(),
                                 threads.set_index("repeat")["cpu_us_per_query"].to_dict())
            tail = paired_interval(first.set_index("repeat")["p99_ms"].to_dict(),
                                   threads.set_index("repeat")["p99_ms"].to_dict())
            dirty = _dirty(pd.concat([first, threads]), "errors", "other_cpu_pct")
            verdict, iv, reason = judge_interval(iv, 1.0, "below", dirty)
            if verdict != INCONCLUSIVE:
                reason += f": the async client's CPU per query is {'lower' if verdict == 'pass' else 'higher'}"
            tail_text = f"p99 async/threads {_f(tail['estimate'])} {_bounds(tail)}"
            if switches := switches_text(pd.concat([first, threads]), "ctx_vol_per_query", "ctx_invol_per_query",
                                         by="mode"):
                tail_text += f"; {switches}"
            advice = {PASS: f"Migrating saves CPU per query on this query; {tail_text}.",
                      FAIL: f"Migrating costs CPU per query on this query; {tail_text}. Keep the threads.",
                      INCONCLUSIVE: f"No clear CPU benefit; {tail_text}."}[verdict]
            subject = f"async pool {int(first['pool_size'].iloc[0])} vs {int(threads['workers'].iloc[0])} threads"
            rows.append(_row("001-migration", subject, verdict, "CPU per query, async / threads", "ratio", iv,
                             "< 1", reason, advice))
    rows += _ratio_row(run, "clients", "queries", "client_per_request", "shared_client", "001-client",
                       "time per query, a client per request / shared", "a shared client",
                       {PASS: "Construct one AsyncMongoClient per process and share it: a client per request "
                                "pays a connection and handshake on every query here.",
                        FAIL: "A client per request was not slower here; share one all the same (pools, "
                                "monitoring threads).",
                        INCONCLUSIVE: "Run more repeats or more queries to tell."})
    rows += _ratio_row(run, "writes", "documents", "insert_one", "insert_many", "001-bulk",
                       "time per document, insert_one / insert_many", "bulk writes",
                       {PASS: "Load with insert_many or bulk_write; choose `ordered` by what should follow a "
                                "first error.",
                        FAIL: "Bulk writes did not pay here: check the server's write path before changing "
                                "the loader.",
                        INCONCLUSIVE: "Run more repeats or more documents to tell."})
    s = stalls(run)
    large = (body.get("mongodb") or {}).get("large_read") or {}
    limit = float(large.get("stall_limit_ms", 10.0))
    for variant, g in (s.groupby("variant", sort=False) if not s.empty else []):
        dirty = "" if g["ok"].all() else "the read failed in a repeat"
        # judged on the loop's own CPU: on cores shared with the server the wall-clock stall also
        # counts the loop thread's wait for a core, which is the machine's load, not the batch size
        verdict, iv, why = below(g["max_stall_run_ms"], limit, dirty)
        size = int(g["batch_size"].iloc[0])
        advice = {PASS: f"Batching {'by default' if not size else f'of {size}'} keeps the loop responsive.",
                  FAIL: "Set a smaller batch_size on this cursor (and a matching limit for pages).",
                  INCONCLUSIVE: "Run more repeats to tell."}[verdict]
        share = g["max_stall_wait_share"].median()
        wall = (f"; wall-clock longest stall {g['max_stall_ms'].median():.1f} ms"
                + (f", {100 * share:.0f}% of it waiting for a core" if not math.isnan(share) else ""))
        rows.append(_row("001-stall", str(variant), verdict, "longest loop stall, loop's own CPU", "ms", iv,
                         f"< {limit:g} ms",
                         f"{why}{wall}; {int(g['documents'].median())} documents in {g['read_s'].median():.2f} s",
                         advice))
    return rows


def _ratio_row(run: Run, table: str, count: str, slow: str, fast: str, check: str, figure: str, what: str,
               advice: dict[str, str]) -> list[dict[str, Any]]:
    """A check that `fast` beats `slow` on this server (001-client, 001-bulk): time per unit of
    `slow` over `fast`'s, paired by repeat; pass when the interval lies above 1. [] when the run
    has no such table (001-bulk runs only with allow_writes)."""
    t = run.table("verify_mongo", table)
    if t.empty:
        return []
    t = t.assign(us_per=1e6 * t["wall_s"] / t[count])
    iv = paired_interval(t[t["method"] == slow].set_index("repeat")["us_per"].to_dict(),
                         t[t["method"] == fast].set_index("repeat")["us_per"].to_dict())
    verdict, iv, reason = judge_interval(iv, 1.0, "above",
                                         "" if t["ok"].all() else f"the {table} check failed in a repeat")
    if verdict != INCONCLUSIVE:
        reason += f": {what} {'faster' if verdict == 'pass' else 'slower'} on this server"
    subject = f"{int(t[count].iloc[0])} {count}" + (", scratch collection" if table == "writes" else "")
    return [_row(check, subject, verdict, figure, "ratio", iv, "> 1", reason, advice[verdict])]


def checks(run: Run) -> pd.DataFrame:
    """Every check of the run's verify experiments (columns CHECK_COLUMNS)."""
    rows = pg_checks(run) if "verify_postgres" in run.experiments else []
    rows += mongo_checks(run) if "verify_mongo" in run.experiments else []
    return pd.DataFrame(rows, columns=list(CHECK_COLUMNS))
