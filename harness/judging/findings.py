"""The lessons: one per seed lesson, and what a run's `summary.json` says of each.

A *lesson* is what a seed tells someone writing such code: each "Verify:" line of seeds 001 and
002, and seed 000's sync-vs-async and mixed-driver lessons. `LESSONS` is that list as data: the
seed's own words (the Verify lines from `harness.core.seed_lines`, which verify's checks quote too), the
seed's figure, the claims ledger rows the lesson rests on (the first is the one whose figure and
verdict stand for the lesson; the others are counted beside it), a short name, one instruction per
verdict class (holds / fails / open, `harness.core.verdicts`) for the answer's table
(`harness.judging.answer`), and one sentence per class on what the outcome means. Each text is written for
its class, so it stays true whatever figures a run gives within that class.

`lesson_rows` reads one run's summary (through `store.upgrade_summary`, so a version-1 summary reads
as a version-2 one would); `committed_pooled` and `committed_by_processor` pool each lesson over the
committed runs (`harness.core.pooling`). The README's and RESULTS' tables are generated from them
(`harness.writing.generated`, `harness docs`), never typed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ledger, num, pooling, store
from ..core.config import REPO_ROOT
from ..core.errors import HarnessError
from ..core.seed_lines import LINES
from ..core.verdicts import (  # noqa: F401 -- verdict_class re-exported
    NOT_MEASURED,
    ORDER,
    PREMISE_NOT_MET,
    SIZE_NOT_REPRODUCED,
    TOO_FEW_BOOTS,
    verdict_class,
)
from ..experiments.analysis import metric_name

DO_MAX = 110   # characters of a lesson's instruction: its answer-table cell stays under 160
# what a lesson whose direction holds but whose size departs says before its advice
SIZE_DEPARTS = "The direction holds, but the size here lies outside the seed's band (the figure says by how much). "


@dataclass(frozen=True)
class Lesson:
    """One seed lesson. `claims[0]` is the row whose figure and verdict stand for the lesson."""

    id: str
    seed: str                      # "000", "001", "002"
    words: str                     # the seed's own words (its Verify line, or its sentence)
    seed_figure: str               # the seed's figure, as the seed gives it
    measure: str                   # what this study's figure (claims[0]) is
    claims: tuple[str, ...]        # claims ledger rows the lesson rests on
    means: Mapping[str, str]       # verdict class (holds / fails / open) -> one sentence
    figure: str = ""               # the report's small figure for this lesson, if any
    sides: tuple[str, ...] = ()    # the options claims[0] compares, a then b: shown with their medians
    name: str = ""                 # a short name for the answer's table (README, report)
    do: Mapping[str, str] | None = None   # verdict class -> one instruction, at most DO_MAX characters


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        id="000-sync-async", seed="000",
        words=LINES["000-sync-async"],
        seed_figure="Max RPS ~113.4 async (event loop), ~48.8 sync (1 thread) (2.32×)",
        measure="async / sync (1 thread) Locust peak RPS",
        claims=("000-rps-01", "000-lat-01", "000-lat-02", "000-bottleneck-01"),
        means={"holds": "A `def` endpoint gets one database wait per thread token; an `async def` endpoint "
                        "with the async driver keeps serving while it waits, so size the thread pool of "
                        "sync endpoints to the concurrency you expect.",
               "fails": "Here the async app did not out-serve a one-thread sync app: measure your own "
                        "endpoint before rewriting it for throughput.",
               "open": "This run cannot say whether async out-serves a one-thread sync app: do not rest a "
                       "rewrite on the seed's figure alone."},
        figure="findings_fastapi_staircase",
        sides=("async", "sync, 1 thread"),
        name="Async endpoints under load",
        do={"holds": "Serve I/O-bound endpoints with `async def` and the async driver; size sync endpoints' "
                     "thread pools.",
            "fails": "Measure your own endpoint before rewriting it as async for throughput.",
            "open": "Measure your own endpoint before rewriting it as async for throughput."}),
    Lesson(
        id="000-mixed", seed="000",
        words=LINES["000-mixed"],
        seed_figure="no number (the direction only)",
        measure="max RPS, sync driver in `async def` / sync app with 40 threads",
        claims=("000-mixed-01",),
        means={"holds": "Never call the synchronous driver inside `async def`: it blocks the event loop, "
                        "and a plain `def` endpoint on a thread pool does better.",
               "fails": "Here the blocking driver in `async def` was not worse than 40 threads, but it still "
                        "blocks the loop on every call: use `def` or the async driver.",
               "open": "This run cannot rank the two; a sync driver in `async def` still blocks the loop on "
                       "every call, so use `def` or the async driver."},
        sides=("sync driver in `async def`", "sync, 40 threads"),
        name="Sync driver inside `async def`",
        do={"holds": "Never call sync PyMongo inside `async def`: use a `def` endpoint or the async driver.",
            "fails": "Still avoid sync PyMongo inside `async def`: it blocks the loop on every call.",
            "open": "Avoid sync PyMongo inside `async def`: it blocks the loop on every call."}),
    Lesson(
        id="001-client", seed="001",
        words=LINES["001-client"],
        seed_figure="2.44 ms per query with a client per request, 0.20 ms shared (12.2×)",
        measure="time per query, client per request / shared client",
        claims=("001-client-01",),
        means={"holds": "Create one AsyncMongoClient in the application's lifespan and share it: a client "
                        "per request pays a connection and handshake on every query.",
               "fails": "Here a client per request cost no more than a shared one; one shared client per "
                        "process is still what the driver is built for.",
               "open": "The cost of a client per request could not be settled in this run; share one client "
                       "per process regardless."},
        sides=("client per request", "shared client"),
        name="A client per request",
        do={"holds": "Create one AsyncMongoClient per process, in the app's lifespan, and share it.",
            "fails": "Share one AsyncMongoClient per process all the same: it is what the driver is built for.",
            "open": "Share one AsyncMongoClient per process."}),
    Lesson(
        id="001-bulk", seed="001",
        words=LINES["001-bulk"],
        seed_figure="insert_one 200 µs per document, insert_many 5.2 µs (38×); ordered=False 0.51 s against 0.52 s",
        measure="time per document, insert_one in a loop / insert_many",
        claims=("001-bulk-01", "001-bulk-04"),
        means={"holds": "Load data with insert_many or bulk_write, and choose `ordered` by what should happen "
                        "after the first error, not by speed.",
               "fails": "Here insert_many did not beat a loop of insert_one: measure bulk loads on your own "
                        "server before relying on it.",
               "open": "This run cannot size the gain of insert_many; choose `ordered` by what should happen "
                       "after the first error either way."},
        sides=("insert_one", "insert_many"),
        name="Bulk writes",
        do={"holds": "Load with insert_many or bulk_write; choose `ordered` by what should follow the first error.",
            "fails": "Measure bulk loads on your own server before relying on insert_many.",
            "open": "Prefer insert_many; choose `ordered` by what should follow the first error."}),
    Lesson(
        id="001-cursor", seed="001",
        words=LINES["001-cursor"],
        seed_figure="longest stall 8.6 ms with batch_size=1000 (410 ms with default batches)",
        measure="longest event-loop stall with batch_size=1000, against 10 ms",
        claims=("001-cursor-02", "001-cursor-01", "001-cursor-03", "001-cursor-05"),
        means={"holds": "Set batch_size on large cursors and watch the loop with a probe: each batch is "
                        "decoded on the event loop, so a large batch stalls every other request.",
               "fails": "Here batch_size=1000 did not keep stalls under 10 ms: choose the batch size by "
                        "measuring stalls on your own documents.",
               "open": "This run cannot say whether batch_size=1000 keeps stalls under 10 ms: measure the "
                       "stalls of your own cursors with a probe."},
        figure="findings_mongo_cursor_stalls",
        name="Large cursors",
        do={"holds": "Set batch_size on large cursors and watch event-loop stalls with a probe.",
            "fails": "Choose batch_size by measuring loop stalls on your own documents: 1000 was not enough here.",
            "open": "Measure loop stalls of your own large cursors with a probe; set batch_size from that."}),
    Lesson(
        id="001-pool", seed="001",
        words=LINES["001-pool"],
        seed_figure="slowest query 4,020 ms bare, 36 ms behind Semaphore(10) (110×); per task 1–2,857 against 153–154",
        measure="slowest query, bare pool / behind a FIFO semaphore",
        claims=("001-pool-13", "001-pool-01", "001-pool-02", "001-pool-03", "001-pool-05", "001-pool-06",
                "001-pool-07", "001-pool-08", "001-pool-09", "001-pool-12"),
        means={"holds": "With more tasks than connections, put a FIFO asyncio.Semaphore sized to maxPoolSize "
                        "in front of the client: the driver's wait for a connection lets some tasks starve.",
               "fails": "Here the bare pool was as fair as the semaphore: check the maximum and per-task "
                        "counts under your own load before adding one.",
               "open": "This run cannot say whether the semaphore helps: count completions per task under "
                       "your own load, and compare the maximum with the p99."},
        figure="findings_mongo_pool_starvation",
        sides=("bare pool", "FIFO semaphore"),
        name="More tasks than connections",
        do={"holds": "Put a FIFO asyncio.Semaphore(maxPoolSize) in front of the client when tasks outnumber "
                     "connections.",
            "fails": "Count completions per task under your load before adding a semaphore.",
            "open": "Count completions per task under your load; compare the maximum latency with the p99."}),
    Lesson(
        id="001-models", seed="001",
        words=LINES["001-models"],
        seed_figure="client CPU per query 128 µs async, 221 µs with 32 threads (0.58×)",
        measure="client CPU per query, async client / 32 threads",
        claims=("001-models-02", "001-models-01", "001-models-03", "001-models-04", "001-models-08"),
        means={"holds": "The async client used less CPU per query than threads here too; the seed's advice "
                        "stands: measure CPU per query and the tail on your real query mix before migrating.",
               "fails": "The async client did not use less CPU per query than threads on this server: "
                        "measure on your real query mix before migrating, as the seed says.",
               "open": "This run cannot rank async against threads on CPU per query: measure on your real "
                       "query mix before migrating."},
        sides=("async client", "32 threads"),
        name="Async client's CPU (MongoDB)",
        do={"holds": "Measure CPU per query and the tail on your real query mix before migrating.",
            "fails": "Do not assume the async client saves CPU: measure CPU per query on your mix before migrating.",
            "open": "Measure CPU per query on your real query mix before migrating."}),
    Lesson(
        id="002-cpu", seed="002",
        words=LINES["002-cpu"],
        seed_figure="client CPU 85% with threads, 27% with uvloop + asyncpg, at the same throughput (3.1×)",
        measure="client CPU, threads + psycopg / uvloop + asyncpg (pool-bound by calibration, pool 20)",
        claims=("002-bound20-03", "002-bound20-06", "002-bound20-09", "002-bound20-12", "002-slow20-03",
                "002-slow20-06", "002-slow20-09", "002-slow20-12"),
        means={"holds": "Record client CPU beside throughput: at the same throughput the models burn very "
                        "different CPU, and only CPU tells a pool-bound service from a client-bound one.",
               "fails": "Here the models burned about the same CPU at the same throughput; client CPU is "
                        "still what tells a pool-bound service from a client-bound one.",
               "open": "This run cannot rank the models' CPU at the same throughput; record client CPU "
                       "beside throughput all the same."},
        sides=("threads + psycopg", "uvloop + asyncpg"),
        name="Record client CPU",
        do={"holds": "Record client CPU beside throughput: it alone tells a pool-bound service from a "
                     "client-bound one.",
            "fails": "Record client CPU beside throughput all the same.",
            "open": "Record client CPU beside throughput."}),
    Lesson(
        id="002-pool", seed="002",
        words=LINES["002-pool"],
        seed_figure="1,734–1,823 req/s for all four models, pool bound 1,818 (slowest / fastest 0.95)",
        measure="throughput, slowest / fastest of the four models (pool-bound by calibration, pool 20)",
        claims=("002-bound20-15", "002-bound20-01", "002-bound20-04", "002-bound20-07", "002-bound20-10",
                "002-slow20-15", "002-slow20-01", "002-slow20-04", "002-slow20-07", "002-slow20-10"),
        means={"holds": "When throughput sits at pool size / database time, the pool is the limit: grow the "
                        "pool or speed up the queries; another concurrency model will not help.",
               "fails": "Here the models did not all reach the pool's bound, so something else limited some "
                        "of them: find the limiting resource before choosing a model.",
               "open": "This run cannot say whether every model reaches the pool's bound: compare your "
                       "throughput with pool size / database time before choosing a model."},
        figure="findings_pg_pool_bound",
        sides=("slowest model", "fastest model"),
        name="A pool-bound service",
        do={"holds": "If throughput ≈ pool size / query time, grow the pool or speed up queries; no model will help.",
            "fails": "Find the limiting resource before choosing a model: not every model reached the pool's bound.",
            "open": "Compare your throughput with pool size / query time before choosing a model."}),
    Lesson(
        id="002-client", seed="002",
        words=LINES["002-client"],
        seed_figure="threads with psycopg at 195% CPU: 2,630 req/s with 20 connections, 2,788 with 50 (1.06×)",
        measure="throughput of threads + psycopg, pool 50 / pool 20 (fast queries)",
        claims=("002-fast50-01", "002-fast20-02", "002-fast20-05", "002-fast50-02", "002-slow50-02",
                "002-fast20-01", "002-fast20-03", "002-fast20-07", "002-fast20-08", "002-fast20-09",
                "002-fast20-10"),
        means={"holds": "When the client process is at its CPU limit, more connections do not raise "
                        "throughput: cut CPU per request (asyncio, asyncpg, uvloop) instead.",
               "fails": "Here more connections changed throughput although the client looked CPU-bound: "
                        "check client CPU and the pool before resizing either.",
               "open": "This run cannot say whether more connections help a CPU-bound client: look at client "
                       "CPU before resizing the pool."},
        sides=("pool 50", "pool 20"),
        name="CPU-bound client, more connections",
        do={"holds": "When the client is at its CPU limit, cut CPU per request instead of adding connections.",
            "fails": "Check client CPU and the pool before resizing either.",
            "open": "Look at client CPU before resizing the pool."}),
    Lesson(
        id="002-tail", seed="002",
        words=LINES["002-tail"],
        seed_figure="p99 160 ms with asyncpg, 44 ms with psycopg async (3.6×), fast queries, pool 20",
        measure="p99, asyncpg / psycopg async (fast queries, pool 20)",
        claims=("002-fast20-15", "002-fast20-14", "002-tail-04", "002-tail-01", "002-tail-03"),
        means={"holds": "Compare drivers on p99 as well as throughput: drivers with similar throughput can "
                        "differ severalfold in the tail.",
               "fails": "Here the drivers' tails did not differ as the seed's did; measure the p99 of the pool "
                        "and concurrency you will run.",
               "open": "This run cannot rank the drivers' tails: measure the p99 of the pool and concurrency "
                       "you will run."},
        sides=("asyncpg", "psycopg async"),
        name="Tail latency by driver",
        do={"holds": "Compare drivers on p99 as well as throughput: similar throughput, severalfold tails.",
            "fails": "Measure p99 at the pool and concurrency you will run.",
            "open": "Measure p99 at the pool and concurrency you will run."}),
    Lesson(
        id="002-decide", seed="002",
        words=LINES["002-limit"],
        seed_figure="pool 50, 10 ms queries: 3,634 req/s with asyncio + psycopg, 2,435 with threads (1.49×)",
        measure=("throughput, asyncio + psycopg / threads (10 ms queries, pool 50, the client on a core of its own "
                 "or the share of it a probe chose)"),
        claims=("002-split50-01", "002-split50-04", "002-slow50-01", "002-slow50-04", "002-fast20-13"),
        means={"holds": "Once the pool is large enough that client CPU limits, the model matters again: name "
                        "the limiting resource, and test at the pool size you will run.",
               "fails": "Here, with the client's CPU the limit, asyncio did not pull ahead of threads: name the "
                        "resource that limited your benchmark, and measure your own models on the cores your "
                        "service will have, before choosing one.",
               "open": "This run cannot rank the models with a larger pool: name the resource that limited "
                       "your benchmark, and test at the pool size you will run."},
        sides=("asyncio + psycopg", "threads + psycopg"),
        name="Which model, when the client limits",
        do={"holds": "Name what limits your benchmark, and test at the pool size you will run.",
            "fails": "Name what limits your benchmark; test models on your service's cores: asyncio was slower here.",
            "open": "Name what limits your benchmark, and test at the pool size you will run."}),
)

FIGURED = {lesson.figure: lesson.id for lesson in LESSONS if lesson.figure}


# -- reading a summary ---------------------------------------------------------------------------

def reference_summary(data_dir: Path | None = None) -> Path | None:
    """`data/reference/<id>/summary.json` of the one reference run; None when there is none yet."""
    root = store.location_dir("reference", data_dir)
    found = sorted(root.glob("*/summary.json"))
    if len(found) > 1:
        raise HarnessError(f"{len(found)} reference runs under {root}: keep exactly one "
                           f"({', '.join(p.parent.name for p in found)})")
    return found[0] if found else None


# -- one row per lesson --------------------------------------------------------------------------

def _short_server(server: str) -> str:
    """`FerretDB v1.24.2 on PostgreSQL 15.18 (reports server version 7.0.42)` -> without the note."""
    return re.sub(r"\s*\(.*\)\s*$", "", server or "").strip()


def figure_text(claim: Mapping[str, Any], at_verdict: tuple[float, float, float] | None = None) -> str:
    """This study's figure: estimate [interval] (level, repeats used of run); with `at_verdict`
    (`pooling.verdict_interval`: the interval at the level the adjusted verdict was decided at), that
    interval beside it."""
    est = num.finite(claim.get("estimate"))
    if est is None:   # nothing to estimate from: say how many repeats ran, and what limited them
        notes = [f"n=0 of {claim['n_ran']}"] if claim.get("n_ran") else []
        if claim.get("verdict") == PREMISE_NOT_MET and claim.get("bottleneck_measured"):
            notes.append(f"bottleneck measured: {claim['bottleneck_measured']}")
        return "—" + (f" ({'; '.join(notes)})" if notes else "")
    ratio = str(claim.get("seed_unit") or "").startswith("x") or claim.get("comparison") == "equivalence"
    unit = "" if ratio else f" {claim.get('seed_unit') or ''}".rstrip()
    text = f"{'×' if ratio else ''}{num.sig3(est)}{unit}"
    lo, hi = num.finite(claim.get("ci_low")), num.finite(claim.get("ci_high"))
    level = num.finite(claim.get("ci_level")) or 0.95
    used, ran = claim.get("n_used"), claim.get("n_ran")
    n = f"n={used}" + (f" of {ran}" if ran not in (None, used) else "")
    if lo is not None and hi is not None:
        text += f" [{num.sig3(lo)}, {num.sig3(hi)}] ({level:.0%}, {n})"
    else:
        text += f" (no interval, {n})"
    if at_verdict is not None:
        v_lo, v_hi, v_level = at_verdict
        text += f"; [{num.sig3(v_lo)}, {num.sig3(v_hi)}] at the verdict's {_pct(v_level)}"
    return text


def _pct(level: float) -> str:
    """A confidence level to the decimals that tell it from 100%: 90%, 99.4%, 99.97%."""
    digits = max(0, math.ceil(-math.log10(1 - level)) - 1) if level < 1 else 6
    return f"{100 * level:.{digits}f}".rstrip("0").rstrip(".") + "%"


def _units(summary: Mapping[str, Any]) -> dict[str, str]:
    """{dotted figure name (the ledger's): unit} from the summary's metrics."""
    out = {}
    for m in summary.get("metrics", []) or []:
        if isinstance(m, Mapping) and m.get("experiment") and m.get("metric"):
            name = metric_name(str(m["experiment"]), str(m.get("variant") or ""), str(m["metric"]))
            out[name] = UNIT_SHOWN.get(str(m.get("unit") or ""), str(m.get("unit") or ""))
    return out


UNIT_SHOWN = {"us": "µs", "ratio": "", "count": ""}


def sides_text(claim: Mapping[str, Any], lesson: Lesson, units: Mapping[str, str]) -> str:
    """The two options the lesson's row compares, each with its median over repeats and unit: what a
    reader deciding between them weighs, beside the ratio the verdict judges. Empty when the row is
    not a comparison of two single figures, or this run has no medians for it."""
    if len(lesson.sides) != 2:
        return ""
    a, b = num.finite(claim.get("a_median")), num.finite(claim.get("b_median"))
    if a is None or b is None:
        return ""
    parts = []
    for label, value, expr in zip(lesson.sides, (a, b), (claim.get("a"), claim.get("b"))):
        name = ledger.single_ref(expr)
        unit = units.get(name, "") if name else ""
        parts.append(f"{label} {num.sig3(value)}{(' ' + unit) if unit else ''}")
    return "medians: " + " against ".join(parts)


def claims_by_id(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A summary's claim rows by id, the first row per claim (the run's own interpreter's)."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for c in summary.get("claims", []):
        by_id.setdefault(str(c.get("claim_id")), c)
    return by_id


def lesson_rows(summary: Mapping[str, Any], lessons: Sequence[Lesson] = LESSONS) -> list[dict[str, Any]]:
    """One dict per lesson: its words, the seed's figure, this run's figure, verdict and meaning.

    `summary` must already be upgraded (`load_summary` or `upgrade`)."""
    by_id = claims_by_id(summary)
    units = _units(summary)
    out = []
    for lesson in lessons:
        head = by_id.get(lesson.claims[0])
        verdict = str(head.get("verdict") or NOT_MEASURED) if head else NOT_MEASURED
        counts = Counter(str(by_id[c].get("verdict") or NOT_MEASURED) if c in by_id else NOT_MEASURED
                         for c in lesson.claims)
        at_verdict = verdict_interval(summary, lesson.claims[0]) if head else None
        out.append({
            "lesson": lesson.id, "seed": lesson.seed, "words": lesson.words,
            "seed_figure": lesson.seed_figure, "measure": lesson.measure, "claim": lesson.claims[0],
            "figure": figure_text(head, at_verdict) if head else "—",
            "figure_plain": figure_text(head) if head else "—",      # without the verdict's-level interval
            "estimate": num.finite(head.get("estimate")) if head else None,
            "ci_low": num.finite(head.get("ci_low")) if head else None,
            "ci_high": num.finite(head.get("ci_high")) if head else None,
            "at_verdict": at_verdict,
            "sides": sides_text(head, lesson, units) if head else "",
            "server": _short_server(str(head.get("server") or "")) if head else "",
            "verdict": verdict, "verdict_raw": str(head.get("verdict_raw") or verdict) if head else verdict,
            "rows": dict(counts), "n_rows": len(lesson.claims),
            "means": (SIZE_DEPARTS if verdict == SIZE_NOT_REPRODUCED else "") + lesson.means[verdict_class(verdict)],
            "report_figure": lesson.figure,
        })
    return out


def verdict_interval(summary: Mapping[str, Any], claim_id: str) -> tuple[float, float, float] | None:
    try:
        return pooling.verdict_interval(summary, claim_id)
    except pooling.NotPoolable:   # the row appears once per interpreter: no single interval to widen
        return None


def pooled_text(p: Mapping[str, Any] | None) -> str:
    """A lesson's primary row pooled across boots (`pooling.pooled_lessons`, one row of its frame):
    the pooled estimate with the 90% prediction interval for a new run, how many runs agree, and the
    runs of these versions left out for want of an interval (`pooling.unpooled`)."""
    if p is None or not p.get("k"):
        why = p.get("pi_reason") if p is not None else None
        return f"— ({why or 'no committed run of these versions gives an interval'})"
    return _estimate_text(p) + "".join(f"; {run} not pooled: {why}" for run, why in pooling.unpooled(p))


def _estimate_text(p: Mapping[str, Any]) -> str:
    if not p.get("pooled"):
        return f"1 run ({pooling.short_id(p['runs'][-1])}): its own interval; pooling needs runs from 2 machines"
    text = f"{_pooled_figure(p)} over {pooling.over(p['k'], p.get('n_runs'))}"
    if p.get("verdict") == TOO_FEW_BOOTS:
        return (f"{text}; a new run's range and a verdict across machines need {pooling.MIN_FOR_VERDICT}; "
                f"{p['agree_text']}")
    if p.get("pi_low") is not None:
        text += f"; a new run: {num.sig3(p['pi_low'])} to {num.sig3(p['pi_high'])} (90% prediction)"
    else:
        text += f"; no prediction interval ({p.get('pi_reason') or 'it needs 3 machines'})"
    return f"{text}; **{p['verdict']}**, {p['agree_text']}"


def _pooled_figure(p: Mapping[str, Any]) -> str:
    return f"{num.sig3(p['estimate'])} [{num.sig3(p['ci_low'])}, {num.sig3(p['ci_high'])}]"


def committed_pooled(lessons: Sequence[Lesson] = LESSONS, root: Path = REPO_ROOT,
                     runs: Sequence[pooling.RunRecord] | None = None) -> dict[str, Mapping[str, Any]]:
    """Each lesson's primary row pooled over the committed runs (data/reference and data/history) of
    the newest run's experiment versions and rules, each boot once (`pooling.pooled_lessons`).
    `runs`: those runs already read (`pooling.committed_runs(root)`), so that callers read them once."""
    runs = pooling.committed_runs(root) if runs is None else runs
    frame = pooling.pooled_lessons(runs, [lesson.claims[0] for lesson in lessons])
    return {str(r["claim_id"]): r for r in frame.to_dict("records")}


ALL_PROCESSORS = "all processors"


def committed_by_processor(lessons: Sequence[Lesson] = LESSONS, root: Path = REPO_ROOT,
                           runs: Sequence[pooling.RunRecord] | None = None
                           ) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Each lesson's primary row pooled by rules (`match="rules"`: the committed runs judged by the
    newest run's verdict rules, whatever their code versions) over every processor, then over each
    kind's runs (`pooling.by_processor_kind`): label -> claim id -> pooled row. `ALL_PROCESSORS` first,
    then the kinds by name; runs that recorded no processor count only in the first. `runs`: as in
    `committed_pooled`."""
    runs = list(pooling.committed_runs(root) if runs is None else runs)
    claims = [lesson.claims[0] for lesson in lessons]
    groups = {ALL_PROCESSORS: runs, **pooling.by_processor_kind(runs)}
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for label, group in groups.items():
        frame = pooling.pooled_lessons(group, claims, match="rules")
        out[label] = {str(r["claim_id"]): r for r in frame.to_dict("records")}
    return out


def compact_pooled_text(p: Mapping[str, Any] | None) -> str:
    """A pooled row in one short cell: pooled [interval], boots (runs), and at 3 boots or more the
    verdict across boots with how many runs say the same (a float in a frame where other rows have
    none: printed as the count it is); runs of the key that gave no interval (`pooling.unpooled`)
    counted."""
    if p is None or not p.get("k"):
        return "—"
    n_runs = int(p.get("n_runs") or 0)
    figure = _pooled_figure(p)
    if not p.get("pooled"):
        text = f"{figure} (one machine's newest run); no pooled figure"
    elif p.get("verdict") == TOO_FEW_BOOTS:
        text = f"{figure}, 2 machines ({n_runs} runs); a verdict needs {pooling.MIN_FOR_VERDICT} machines"
    else:
        text = f"{figure}, {p['k']} machines ({n_runs} runs): **{p['verdict']}**, {int(p['agree'])} of {n_runs} agree"
    missing = len(pooling.unpooled(p))
    return text + (f"; {missing} more without an interval" if missing else "")


PG_MODELS = (("threads_psycopg", "threads + psycopg"), ("asyncio_psycopg", "asyncio + psycopg"),
             ("asyncio_asyncpg", "asyncio + asyncpg"), ("uvloop_asyncpg", "uvloop + asyncpg"))
