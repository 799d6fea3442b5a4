"""`harness power`: how many repeats each lesson's primary row needs (harness.core.power's rule),
from the committed full runs, beside the repeats its experiments plan in the `full` profile.

Only runs that measured the row as the ledger defines it today count (the same `a` and `b`: a row
whose figure was redefined starts afresh), and only `full` runs
(the reference profile's windows). `docs/POWER.md` is this command's output at the time the
profiles were set (`--write`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import ledger, num, pooling, power
from ..core.config import REPO_ROOT
from ..experiments import registry
from ..judging import claims, findings

POWER_DOC = REPO_ROOT / "docs" / "POWER.md"
ALL_PROCESSORS = findings.ALL_PROCESSORS


def planned_repeats(row: Mapping[str, Any], profile: str = "full") -> int | None:
    """The fewest repeats the profile plans among the experiments the row reads (its n can be no
    more); None when it reads none that is registered."""
    counts = []
    for experiment in pooling.experiments_read(row):
        exp = registry.all_experiments().get(experiment)
        if exp is not None:
            counts.append(int(exp.repeats.get(profile, 1)))
    return min(counts) if counts else None


def same_definition(run: pooling.RunRecord, row: Mapping[str, Any]) -> bool:
    """Whether the run measured the row as the ledger defines it today (the same a and b)."""
    try:
        theirs = pooling.claim_row(run.summary, str(row["claim_id"]))
    except pooling.NotPoolable:
        return False
    return all(str(theirs.get(k) or "") == str(row.get(k) or "") for k in ("a", "b"))


def primary_tests(rows: pd.DataFrame) -> int:
    """The one-sided tests Holm's adjustment runs over (harness.judging.claims.adjust): two per judged
    primary row (its seed's side and the opposite one)."""
    return 2 * int((ledger.is_primary(rows) & rows["comparison"].isin(["ratio", "equivalence"])).sum())


def _full_runs(runs: Sequence[pooling.RunRecord]) -> list[pooling.RunRecord]:
    """The runs of the `full` profile (`RunRecord.run_profile`: the manifest's, else the run id's),
    the only ones the plan and its check read."""
    return [r for r in runs if r.run_profile == "full"]


def power_table(runs: list[pooling.RunRecord] | None = None, processor: str | None = None) -> pd.DataFrame:
    """One row per lesson: its primary row, the committed runs' spread, the repeats needed and planned.
    `processor`: only the full runs whose CPU model or kind contains it (`pooling.of_processor`), for
    a lesson whose runs are two populations, one per kind (002-cpu)."""
    runs = pooling.committed_runs() if runs is None else runs
    full = _full_runs(runs)
    if processor is not None:
        full = pooling.of_processor(full, processor, lambda r: r.cpu_model)
    rows = claims.load().set_index("claim_id", drop=False)
    level = power.decision_level(primary_tests(rows))
    out = []
    for lesson in findings.LESSONS:
        row = rows.loc[lesson.claims[0]].to_dict()
        mine = [r for r in full if same_definition(r, row)]
        planned = planned_repeats(row)
        got = power.plan(mine, {row["claim_id"]: row}, {row["claim_id"]: planned} if planned else {}, level)
        out.append({"lesson": lesson.id, **got.iloc[0].to_dict()})
    return pd.DataFrame(out)


def by_processor(runs: list[pooling.RunRecord] | None = None) -> dict[str, pd.DataFrame]:
    """`power_table` over every processor's runs, then over each kind's (`pooling.by_processor_kind`):
    label -> table, `ALL_PROCESSORS` first. A kind with no full run is left out."""
    runs = pooling.committed_runs() if runs is None else runs
    kinds = pooling.by_processor_kind(_full_runs(runs))
    return {ALL_PROCESSORS: power_table(runs),
            **{kind: power_table(group) for kind, group in kinds.items()}}


def forecast_check(runs: list[pooling.RunRecord] | None = None, own_kind: bool = False) -> pd.DataFrame:
    """Each committed full run's band words against the forecast made from the full runs before it
    alone (run ids start with their UTC time), at the run's own repeats: one row per lesson and run
    (in time order) that had a forecast (two earlier runs with intervals at least) and an interval
    of its own. `own_kind`: from the earlier runs on the run's own kind of processor only
    (`pooling.processor_kind`). Columns: run_id, lesson, word (forecast), share (predicted), read
    (the run's own word against the band), hit."""
    runs = pooling.committed_runs() if runs is None else runs
    full = sorted(_full_runs(runs), key=lambda r: r.run_id)
    rows = claims.load().set_index("claim_id", drop=False)
    out = []
    for lesson in findings.LESSONS:
        row = rows.loc[lesson.claims[0]].to_dict()
        claim_id = row["claim_id"]
        mine = [r for r in full if same_definition(r, row)]
        for i, run in enumerate(mine):
            try:
                measured = pooling.row_input(run.summary, claim_id)
            except pooling.NotPoolable:   # no interval of its own (premise not met, fewer than 2 repeats)
                continue
            kind = pooling.processor_kind(run.cpu_model)
            before = [r for r in mine[:i] if not own_kind or pooling.processor_kind(r.cpu_model) == kind]
            got = power.plan(before, {claim_id: row}, {claim_id: measured.n}).iloc[0]
            if not got["band_word"]:
                continue
            read = power.word_read(row, measured)
            out.append({"run_id": run.run_id, "lesson": lesson.id, "word": got["band_word"],
                        "share": float(got["band_share"]), "read": read, "hit": read == got["band_word"]})
    return pd.DataFrame(out, columns=["run_id", "lesson", "word", "share", "read", "hit"])


def forecast_checks(runs: list[pooling.RunRecord] | None = None) -> dict[str, pd.DataFrame]:
    """`forecast_check` both ways, labelled as POWER.md's last table names them: from every earlier
    run, and from the earlier runs of the run's own kind of processor."""
    runs = pooling.committed_runs() if runs is None else runs
    return {"from every earlier run": forecast_check(runs), "from its own kind's": forecast_check(runs, own_kind=True)}


def forecast_check_text(checks: Mapping[str, pd.DataFrame]) -> str:
    """`forecast_check`'s rows per lesson, one column per way of forecasting: runs forecast, the hits
    the predicted shares expect (their sum) and the hits."""
    def cell(g: pd.DataFrame) -> str:
        return "—" if g.empty else f"{len(g)}, {g['share'].sum():.1f}, {int(g['hit'].sum())}"

    rows = []
    for lesson in [*(x.id for x in findings.LESSONS), "all"]:
        parts = [c if lesson == "all" else c[c["lesson"] == lesson] for c in checks.values()]
        if any(len(g) for g in parts):
            rows.append((lesson, [cell(g) for g in parts]))
    return _lesson_table([f"{label}: runs, hits expected, hits" for label in checks], rows)


def _lesson_table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A markdown table with a lesson column, then `columns`; `rows`: (lesson, its cells)."""
    lines = ["| lesson | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    lines += [f"| {lesson} | " + " | ".join(cells) + " |" for lesson, cells in rows]
    return "\n".join(lines)


FORECAST_CHECK_HEAD = (
    "## How the forecast fared, each run forecast from the runs before it\n\n"
    "Each committed full run, in time order, judged against the forecast the runs before it alone would "
    "have given, at its own repeats (`power.forecast_check`): from every earlier run, and from the earlier "
    "runs on its own kind of processor. Per lesson: the runs forecast (two earlier runs with intervals at "
    "least), the hits the predicted shares expect (their sum), and the hits (runs whose own interval read the "
    "forecast word against the row's band). Hits near their expected count say the shares are "
    "calibrated; far fewer, that they are too confident. A lesson whose runs are two populations is "
    "forecast well only from its own kind's runs (002-cpu).\n\n")


def _f(x: Any, digits: int = 3) -> str:
    v = num.finite(x)
    return "—" if v is None else f"{v:.{digits}g}"


def power_text(table: pd.DataFrame) -> str:
    lines = ["| lesson | primary row | runs | expected estimate | sd of log per repeat (between runs) | "
             "edge (null or margin) | repeats needed | planned (full) | nearest band edge (repeats at 90%) | "
             "a run's band word: share of runs predicted (committed runs that read it) | |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def count(x: Any) -> str:
        return "—" if x is None or pd.isna(x) else str(int(x))

    for r in table.itertuples():
        band = "—" if pd.isna(r.band_edge) else f"{_f(r.band_edge)} ({count(r.band_repeats)})"
        word = _band_word_text(r)
        lines.append(f"| {r.lesson} | {r.claim_id} | {r.runs} | {_f(r.estimate)} | {_f(r.sd_log)} "
                     f"({_f(r.between_sd_log)}) | {_f(r.nearest_edge)} | {count(r.needed)} | {count(r.planned)} | "
                     f"{band} | {word} | {r.note} |")
    return "\n".join(lines)


def _has_word(row: Any) -> bool:
    """Whether a plan row forecasts a band word (a table built from records may hold NaN for none)."""
    return isinstance(row.band_word, str) and bool(row.band_word)


def _band_word_text(row: Any) -> str:
    """A plan row's forecast word: `word`: predicted share (committed runs that read it of its runs)."""
    if not _has_word(row):
        return "—"
    return f"`{row.band_word}`: {row.band_share:.0%} ({int(row.band_seen)} of {row.runs})"


def band_words_text(tables: Mapping[str, pd.DataFrame]) -> str:
    """`by_processor`'s forecasts side by side: one row per lesson that has a band word in some
    group, one column per group."""
    indexed = [t.set_index("lesson") for t in tables.values()]
    rows = []
    for lesson in findings.LESSONS:
        plans = [t.loc[lesson.id] for t in indexed]
        if any(_has_word(p) for p in plans):
            rows.append((lesson.id, [_band_word_text(p) for p in plans]))
    return _lesson_table(list(tables), rows)


BY_PROCESSOR_HEAD = (
    "## A run's band word by kind of processor\n\n"
    "The same forecast planned from every processor's runs, then from each kind's runs alone "
    "(`harness power --processor TEXT`): where a lesson's size follows the processor, the spread between "
    "all runs mixes two populations, and a run answers the lesson for its own kind of machine. Each cell: "
    "the likelier word, the share of runs predicted to read it at the planned repeats, and how many of the "
    "group's committed runs read it.\n\n")


def write_doc(tables: Mapping[str, pd.DataFrame], checks: Mapping[str, pd.DataFrame], path: Path = POWER_DOC) -> Path:
    """docs/POWER.md from `by_processor`'s tables and `forecast_checks`: the plan over every
    processor's runs, which the `full` profile follows, the band word each kind of processor
    forecasts, and how the forecasts fared."""
    tests = primary_tests(claims.load())
    level = power.decision_level(tests)
    head = (
        "# Repeats set by power, before the run\n\n"
        "Generated by `harness power --write` from the committed full runs (data/reference, data/history) "
        "that measured each lesson's primary row as the ledger defines it today. The rule "
        "(`harness/core/power.py`): a row's repeats are enough when the expected half-width of its interval "
        "at the level Holm's adjustment decides it at, t(n-1) sd / sqrt(n) with sd the median per-repeat "
        "spread of the runs, is at most half the distance from the runs' median estimate to the edge where "
        f"the lesson stops being decided (the null of a ratio row, the margin of an equivalence row). The "
        f"level: {level:.2%} two-sided, 1 - 2 x 0.05 / {tests}, Holm's strictest step over the {tests} "
        "one-sided tests of the primary rows, which decides a row whatever the other rows give. The band's "
        "nearest edge only chooses between two decisive words (`reproduced`, `size not reproduced`, at the "
        "90% level); the repeats that would tell them apart are shown beside it, and so is the word a run is "
        "likelier to read: the share of runs that read it, their estimates spread as the committed runs' do "
        "between runs (hours, boots) and judged at the planned repeats, and how many committed runs read it. "
        "A share well below 100% means the next run can read either word whatever its repeats; the pooled "
        "row decides the size. Where a lesson's runs are two populations, one per kind of processor "
        "(002-cpu), `harness power --processor TEXT` plans from one kind's runs, the second table gives each "
        "kind's forecast, and the last checks the forecasts on the committed runs, each from the runs before "
        "it. A row whose expected estimate "
        "sits on or near its edge cannot be decided by any budget; a row with no committed interval has no "
        "spread to plan from. A row whose premise was not met in every run since the last that gave an "
        "interval is expected to read `premise not met`: its premise is a regime the machine reaches or not, "
        "which repeats do not change. A lesson whose row is short here is expected to read `inconclusive`: this "
        "table, committed before the run, is where the study says so. The spread between runs (in brackets) "
        "is not reduced by repeats within a run: `harness history --lessons` pools the runs across boots.\n\n")
    text = (power_text(tables[ALL_PROCESSORS]) + "\n\n" + BY_PROCESSOR_HEAD + band_words_text(tables) + "\n\n"
            + FORECAST_CHECK_HEAD + forecast_check_text(checks))
    path.write_text(head + text + "\n")
    return path
