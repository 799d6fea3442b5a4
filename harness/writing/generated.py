"""The generated blocks of README.md and docs/RESULTS.md: every figure from the committed runs, never typed.

Each block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->`. README.md, the answer:

    lessons    one row per seed lesson: what to do, this study's figure beside the seed's, and how
               sure the study is across machines (the legend above it explains the words)
    models     seed 002's four PostgreSQL client models in the reference run, in its two regimes side
               by side, each with its conditions
    semaphore  what a FIFO semaphore in front of the MongoDB pool buys (the slowest query) and what it
               costs (the median), at the same throughput
    verify     the load `harness verify` sends by default and its caps (the code's own constants)
    study      how long the reference run took

docs/RESULTS.md, the detail: `lesson-<id>` for each lesson (the reference run's figure and verdict,
the pool across machines, each kind of processor, and the new-run range checked on the runs
themselves, `pooling.leave_one_out`), and `runs` (the kept runs, one row each).

`harness docs` checks every block against what its generator gives today (exit 1 naming the blocks
that differ); `harness docs --write` rewrites them. The figures come from the reference run's
summary and manifest and from `pooling.pooled_lessons` over the committed runs.

Across machines, in plain words (`across_text`): the pooled word of a lesson's primary row over the
committed runs of the reference's experiment versions, with how many runs alone read the same word,
how many read another decisive word (for a band, a size outside it contradicts `reproduced`), and
how many decided nothing. Where the contradicting runs are at least as many as the agreeing ones,
the cell says *mixed* instead of a pooled word.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import num, pooling, store
from ..core.config import REPO_ROOT
from ..core.errors import HarnessError
from ..core.verdicts import NOT_MEASURED
from ..core.workload_file import CAPS, Load
from ..judging import answer, findings, mechanisms

CELL_MAX = 160   # characters of a table cell on the answer page

# -- the lessons -----------------------------------------------------------------------------------

def lessons_block(summary: Mapping[str, Any], pooled: Mapping[str, Mapping[str, Any]],
                  kinds: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """The answer's table: `answer.rows` as markdown, under the legend."""
    lines = [answer.LEGEND, "", "| lesson | what to do | here (the reference machine) | across machines |",
             "|---|---|---|---|"]
    for r in answer.rows(summary, pooled, kinds):
        lines.append("| " + " | ".join(_cell(r[k]) for k in ("lesson", "do", "here", "across")) + " |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    if len(text) > CELL_MAX:
        raise HarnessError(f"an answer cell is {len(text)} characters, over {CELL_MAX}: {text[:60]}...")
    return text


# -- the four PostgreSQL models ----------------------------------------------------------------------

REGIMES = (("fast.pool20", "shared"), ("split.pool50", "own core"))
MODEL_FIGURES = (("rps", "req/s"), ("cpu_us_per_req", "CPU µs/req"), ("p99_ms", "p99 ms"))


def _metrics(summary: Mapping[str, Any], experiment: str) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(str(m.get("variant")), str(m.get("metric"))): m for m in summary.get("metrics", []) or []
            if isinstance(m, Mapping) and m.get("experiment") == experiment}


def _figure(m: Mapping[str, Any] | None) -> str:
    value = num.finite((m or {}).get("estimate"))
    return "—" if value is None else num.sig3(value)


def models_block(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    got = _metrics(summary, "pg_models")
    params = manifest["experiments"]["pg_models"]["params"]
    share = _figure(got.get(("split.pool50", "chosen_share_cores")))
    repeats = {int(m["n_repeats"]) for (v, _), m in got.items()
               if v.startswith(("fast.pool20.", "split.pool50.")) and m.get("n_repeats") is not None}
    head = ["model"] + [f"{unit} ({where})" for _, where in REGIMES for _, unit in MODEL_FIGURES]
    lines = [f"{params['clients']} closed-loop clients on the reference machine "
             f"({_machine(manifest)}), geometric means over {', '.join(str(r) for r in sorted(repeats))} "
             "repeats. *Shared*: client and server share 2 cores, queries with no added wait, pool 20. "
             f"*Own core*: the client pinned to one core and held to {share} of it, 10 ms per query, "
             "pool 50, where client CPU is the limit. The ranking changes with the regime.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, label in findings.PG_MODELS:
        cells = [_figure(got.get((f"{variant}.{model}", metric))) for variant, _ in REGIMES
                 for metric, _ in MODEL_FIGURES]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def _machine(manifest: Mapping[str, Any]) -> str:
    machine = (manifest.get("environment") or {}).get("machine") or {}
    cpu = re.sub(r"\((R|TM)\)", "", str(machine.get("cpu_model") or "unknown processor"))
    return f"{' '.join(cpu.split())}, {machine.get('cpu_count_logical', '?')} cores"


# -- the semaphore -----------------------------------------------------------------------------------

SEMAPHORE_FIGURES = (("throughput_qps", "queries/s"), ("p50_ms", "median ms"), ("p99_ms", "p99 ms"),
                     ("max_ms", "slowest ms"), ("ops_per_task_min", "fewest per task"),
                     ("ops_per_task_max", "most per task"))


def semaphore_block(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    got = _metrics(summary, "mongo_pool")
    params = manifest["experiments"]["mongo_pool"]["params"]
    head = ["", *(label for _, label in SEMAPHORE_FIGURES)]
    lines = [f"{params['tasks']} asyncio tasks sharing a pool of {params['pool_size']} connections "
             f"(PyMongo's AsyncMongoClient on FerretDB, {params['duration_s']:g} s windows), the reference run: "
             "the semaphore keeps the throughput and the slowest query near the median, and pays for it "
             "with a longer median: every task waits its turn.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant, label in (("bare", "bare pool"), ("semaphore", "FIFO semaphore")):
        lines.append("| " + " | ".join([label, *(_figure(got.get((variant, m))) for m, _ in SEMAPHORE_FIGURES)])
                     + " |")
    return "\n".join(lines)


# -- verify's load -------------------------------------------------------------------------------------

def verify_block() -> str:
    load = Load()
    return (f"By default a PostgreSQL workload runs {load.clients} clients on a pool of {load.pools[0]} for each "
            f"of {len(load.models)} client models, {load.warmup_s:g} s of warm-up and a {load.duration_s:g} s "
            f"window each, {load.repeats} times (MongoDB: {load.tasks} tasks and {load.threads} threads). A "
            f"workload file may ask for at most {CAPS['clients']:,} clients or tasks, {CAPS['threads']:,} threads, "
            f"a pool of {CAPS['pool']:,}, {CAPS['duration_s']:g} s windows and {CAPS['repeats']} repeats; a "
            f"variant whose operations fail more than {load.max_error_rate:.0%} of the time stops the run.")


# -- why: the mechanisms and the profiler's cost ---------------------------------------------------------

WHY_LESSONS = ("001-models", "002-cpu")


def why_block(summary: Mapping[str, Any]) -> str:
    """The mechanism lines of the lessons that have one (`mechanisms`), and what the profiler cost."""
    by_id = {lesson.id: lesson for lesson in findings.LESSONS}
    parts = [f"**{by_id[lid].name}** ({lid}): " + " ".join(line.removeprefix("- ") for line in got)
             for lid in WHY_LESSONS if (got := mechanisms.lines(summary, lid))]
    if not parts:
        return "The reference run has no profiled pass yet: the mechanisms appear here once it has one."
    figures = mechanisms.metrics_by_key(summary)
    cost: dict[str, list[float]] = {}
    for (experiment, variant, metric), m in figures.items():
        if experiment == "profiled" and metric == "profiled_over_plain" and num.finite(m.get("median")) is not None:
            cost.setdefault(mechanisms.sampling_label(figures, variant), []).append(float(m["median"]))
    if cost:
        parts.append("The profiler (py-spy, or perf) kept " + "; ".join(f"{min(c):.0%}–{max(c):.0%} ({way})" for way, c
                                                                       in sorted(cost.items())) +
                     " of each model's throughput in its window; no verdict reads a profiled window.")
    return "\n\n".join(parts)


# -- the study's own time ------------------------------------------------------------------------------

def study_block(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    timing = summary.get("timing") or {}
    minutes = float(timing.get("wall_s") or 0) / 60
    return (f"`make study` took {minutes:.0f} minutes of experiments on the reference machine "
            f"({_machine(manifest)}); installing, the servers' start and the report add a few more.")


# -- RESULTS: each lesson, and the runs ----------------------------------------------------------------

def lesson_detail(lesson: findings.Lesson, row: Mapping[str, Any], pooled: Mapping[str, Any] | None,
                  by_kind: Mapping[str, Mapping[str, Mapping[str, Any]]], loo: Mapping[str, Any],
                  summary: Mapping[str, Any]) -> str:
    """A lesson's figures for RESULTS: the seed's, the reference run's, across machines, per kind of
    processor, the mechanism behind them where the run measured one (`mechanisms`), and how the
    new-run range held its own runs."""
    lines = [f"- The seed: {lesson.seed_figure}.",
             f"- The reference run: **{row['verdict']}**, {row['figure_plain']}: {lesson.measure}"
             + (f"; {row['sides']}" if row["sides"] else "") + (f" ({row['server']})" if row["server"] else "") + ".",
             f"- Across machines (the reference's experiment versions): {findings.pooled_text(pooled)}."]
    kinds = [f"{kind}: {findings.compact_pooled_text(group.get(lesson.claims[0]))}"
             for kind, group in by_kind.items() if kind != findings.ALL_PROCESSORS]
    if kinds:
        lines.append("- By kind of processor (every version, by the newest rules): " + "; ".join(kinds) + ".")
    lines += mechanisms.lines(summary, lesson.id)
    if loo.get("checked"):
        lines.append(f"- The new-run range, each run left out in turn: {loo['inside']} of {loo['checked']} runs "
                     f"inside the range the others give (median width ×{num.sig3(loo['median_width'])}).")
    return "\n".join(lines)


def runs_block(runs: Sequence[pooling.RunRecord], reference_id: str) -> str:
    """One row per kept run, oldest first: when, the machine (its boot, processor), profile, minutes
    of experiments, and how many of the twelve lessons read the reference's word."""
    ref = next((r for r in runs if r.run_id == reference_id), None)
    ref_words = _words(ref) if ref else {}
    lines = ["| run | started | machine | processor | profile | minutes | lessons as the reference |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        words = _words(r)
        same = sum(1 for c, w in words.items() if ref_words.get(c) == w)
        measured = sum(1 for w in words.values() if w)
        minutes = float((r.summary.get("timing") or {}).get("wall_s") or 0) / 60
        started = f"{r.run_id[:4]}-{r.run_id[4:6]}-{r.run_id[6:8]} {r.run_id[9:11]}:{r.run_id[11:13]}"
        cpu = pooling.processor_kind(r.cpu_model) or "unknown"
        lines.append(f"| {pooling.short_id(r.run_id)}{' (reference)' if r.run_id == reference_id else ''} | "
                     f"{started} | {(r.boot_id or 'unknown')[:8]} | {cpu} | {r.run_profile} | "
                     f"{minutes:.0f} | {same} of {measured} |")
    return "\n".join(lines)


def _words(run: pooling.RunRecord) -> dict[str, str]:
    out = {}
    for lesson in findings.LESSONS:
        try:
            out[lesson.claims[0]] = str(pooling.claim_row(run.summary, lesson.claims[0]).get("verdict") or "")
        except pooling.NotPoolable:
            out[lesson.claims[0]] = ""
    return {c: w for c, w in out.items() if w and w != NOT_MEASURED}


# -- the blocks, read and written ---------------------------------------------------------------------

def blocks(root: Path = REPO_ROOT) -> dict[Path, dict[str, str]]:
    """Every block's text as its generator gives it today, by file and name."""
    ref = findings.reference_summary(root / "data")
    if ref is None:
        raise HarnessError("no reference run under data/reference: the answer's figures come from it")
    summary = store.load_summary(ref)
    manifest = store.load_manifest(ref.parent)
    runs = pooling.committed_runs(root)
    pooled = findings.committed_pooled(runs=runs)
    by_kind = findings.committed_by_processor(runs=runs)
    rows = {r["lesson"]: r for r in findings.lesson_rows(summary)}
    readme: dict[str, Callable[[], str]] = {
        "lessons": lambda: lessons_block(summary, pooled, answer.kinds_pooled(runs)),
        "models": lambda: models_block(summary, manifest),
        "semaphore": lambda: semaphore_block(summary, manifest),
        "verify": verify_block,
        "why": lambda: why_block(summary),
        "study": lambda: study_block(summary, manifest),
    }
    results = {f"lesson-{lesson.id}": lesson_detail(lesson, rows[lesson.id], pooled.get(lesson.claims[0]), by_kind,
                                                    pooling.leave_one_out(runs, lesson.claims[0]), summary)
               for lesson in findings.LESSONS}
    results["runs"] = runs_block(runs, str(summary.get("run_id")))
    return {root / "README.md": {name: make() for name, make in readme.items()},
            root / "docs" / "RESULTS.md": results}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def read_block(text: str, name: str, where: str = "README.md") -> str:
    start, end = _markers(name)
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise HarnessError(f"{where} has no `{start}` ... `{end}` block")
    return text[i + len(start):j].strip("\n")


def write_blocks(text: str, made: Mapping[str, str], where: str = "README.md") -> str:
    for name, body in made.items():
        start, end = _markers(name)
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise HarnessError(f"{where} has no `{start}` ... `{end}` block")
        text = text[:i] + f"{start}\n{body}\n" + text[j:]
    return text


def differing(text: str, made: Mapping[str, str], where: str = "README.md") -> list[str]:
    """The names of the blocks whose text in `text` differs from `made`."""
    return [name for name, body in made.items() if read_block(text, name, where) != body]


def check_or_write(write: bool, root: Path = REPO_ROOT) -> list[str]:
    """Every file's blocks against their generators: rewritten when `write`, else the differing ones
    listed as `FILE: NAME` (empty when every block is up to date)."""
    out = []
    for path, made in blocks(root).items():
        where = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8")
        if write:
            path.write_text(write_blocks(text, made, where), encoding="utf-8")
        else:
            out += [f"{where}: {name}" for name in differing(text, made, where)]
    return out
