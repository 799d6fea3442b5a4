"""The committed tree stays lean (issue 23): only the reference run keeps raw data, every earlier
run is a manifest and a summary under data/history, and the tracked data/ stays under 200 MB
(150 MB until the reference 0dff: a client twice as fast records twice the requests per window,
and its raw data is 130 MB against da6c's 99).
Read from git's index, so a file on disk that git ignores does not count. And RESULTS states the
kept runs' times (in their table and their own sections), machine speeds, FastAPI peaks, unstable
figures and lesson readings (with the repeats in a lesson's premise), each run's section its lesson
readings, verdict counts and the supporting rows the adjustment undid, and each table of runs side
by side its runs' commits, regimes and lesson readings, as their committed summaries and manifests
do."""

from __future__ import annotations

import functools
import re
import statistics
import subprocess
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from conftest import REPO_ROOT

from harness.core import store
from harness.reading import readout, show

DATA_LIMIT_BYTES = 200 * 10**6


def tracked_data_files() -> list[PurePosixPath]:
    out = subprocess.run(["git", "ls-files", "-z", "--", "data"], cwd=REPO_ROOT, capture_output=True,
                         timeout=60, check=True)
    return [PurePosixPath(name) for name in out.stdout.decode().split("\0") if name]


def test_the_tracked_data_folder_stays_under_200_mb():
    files = tracked_data_files()
    assert files, "git lists no file under data/: is this a clone?"
    size = sum((REPO_ROOT / f).stat().st_size for f in files)
    assert size < DATA_LIMIT_BYTES, f"tracked data/ is {size / 1e6:.0f} MB: keep raw data only for the reference"


def test_only_the_reference_keeps_raw_data_and_history_runs_keep_two_files():
    runs_by_location: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in tracked_data_files():
        if len(f.parts) >= 4:   # data/<location>/<run-id>/...
            runs_by_location[f.parts[1]][f.parts[2]].add("/".join(f.parts[3:]))
    assert set(runs_by_location) <= set(store.COMMITTED), \
        f"runs committed outside reference/ and history/: {sorted(runs_by_location)}"
    assert len(runs_by_location["reference"]) == 1, sorted(runs_by_location["reference"])
    history = runs_by_location["history"]
    assert history, "no earlier run kept in data/history"
    odd = {run: files for run, files in history.items() if files != set(store.HISTORY_FILES)}
    assert not odd, f"history runs must keep manifest.json and summary.json only: {odd}"


# One row of RESULTS' table of kept runs: "| `<run id>` | how made | <m> min of run (<f>% inside
# windows; `pg_models` <p> min), ..." ("of repeats" in older rows; the parts after the minutes optional).
_KEPT_RUN_ROW = re.compile(
    r"^\| `(?P<run>[^`]+)` \|[^|]*\| (?P<minutes>\d+(?:\.\d+)?) min of (?:run|repeats) "
    r"\((?P<inside>\d+)%(?: inside windows)?(?:; `pg_models` (?P<pg_models>\d+(?:\.\d+)?) min)?", re.M)
# "loop <M> M loops/s, pgbench <tps> tps": the medians over a run's six calibration readings (three
# before the experiments, three after), as the kept-runs rows since 32d6 state them.
_KEPT_RUN_CEILINGS = re.compile(
    r"^\| `(?P<run>[^`]+)` \|.*?\bloop (?P<loop>\d+(?:\.\d+)?) M loops/s, pgbench (?P<pgbench>[\d,]+) tps", re.M)
# "<u> of <n> [figures] unstable (median CV <cv>%)": the summary's figures flagged unstable, of all.
_KEPT_RUN_STABILITY = re.compile(
    r"^\| `(?P<run>[^`]+)` \|.*?(?P<unstable>[\d,]+) of (?P<figures>[\d,]+)(?: figures)? unstable "
    r"\(median CV (?P<cv>\d+(?:\.\d+)?)%\)", re.M)
# A run's own section, read on its line of `_run_sections_on_lines()`: the run's bold id, then the first
# place on that line (so in that section) that the rest of a pattern reads.
_SECTION_HEAD = r"\*\*`(?P<run>\d{8}T\d{6}Z-\w+-\w{4})`\*\*.*?"
# A run's own section opens "**`<run id>`** ... <m> min of run, <f>% [of it] inside measured windows
# (`pg_models` <p> min" ("of repeats" in older sections).
_RUN_SECTION_TIME = re.compile(
    _SECTION_HEAD + r"(?P<minutes>\d+(?:\.\d+)?) min of (?:run|repeats),? (?P<inside>\d+)%(?: of it)? inside "
    r"measured windows(?: \(`pg_models` (?P<pg_models>\d+(?:\.\d+)?) min)?")


def _as_written(value: float, written: str) -> float:
    """`value` rounded to as many decimals as `written` shows."""
    return round(value, len(written.partition(".")[2]))


def _count(written: str) -> int:
    """A count as RESULTS writes it ("39,840"; "none" and "one" in words) as a number."""
    return {"none": 0, "one": 1}[written] if written in ("none", "one") else int(written.replace(",", ""))


def _results() -> str:
    return (REPO_ROOT / "docs" / "RESULTS.md").read_text()


def _kept_runs_table() -> str:
    return _results().split("## The runs kept for history", 1)[1].split("\n## ", 1)[0]


def _runs_read(pattern: re.Pattern[str], text: str, at_least: int) -> list[tuple[re.Match[str], dict[str, Any]]]:
    """The places in `text` that `pattern` reads, each with its run's committed summary."""
    places = list(pattern.finditer(text))
    assert len(places) >= at_least, f"only {len(places)} places in RESULTS read by {pattern.pattern!r}"
    return [(place, _committed_record(place["run"])[0]) for place in places]


def _committed_run(named: str) -> Path:
    """The committed run RESULTS names, by its id or the id's last four characters (`eab5`)."""
    data = REPO_ROOT / "data"
    where = [run for kept in store.COMMITTED for run in sorted(store.location_dir(kept, data).glob(f"*{named}"))
             if (run / "summary.json").exists() and run.name.endswith(named)]
    assert len(where) == 1, f"RESULTS names {named}, which is not one committed run under data/: {where}"
    return where[0]


@functools.cache
def _committed_record(named: str) -> tuple[dict[str, Any], store.Manifest]:
    """The summary and manifest of the committed run RESULTS names, read once for every test."""
    where = _committed_run(named)
    return store.load_summary(where), store.load_manifest(where)


def _ceilings_shown(named: str) -> dict[str, dict[str, Any]]:
    """The run's machine ceilings as `harness show` prints them (`readout.ceilings`): the median of its
    six readings, three before the experiments and three after (python_cpu in M loops/s), their CV."""
    return readout.ceilings(*_committed_record(named))


# What a place in RESULTS states and what its run's summary gives, in the same form, read by a `_Compare`
# (None where there is nothing to compare).
_Pair = tuple[tuple[float, ...], tuple[float, ...]]
_Compare = Callable[[re.Match[str], dict[str, Any]], _Pair | None]


def _disagreements(places: list[tuple[re.Match[str], dict[str, Any]]], compare: _Compare) -> list[str]:
    """Each place whose stated figures are not its summary's, as '<run>: RESULTS (...), summary (...)'."""
    wrong = []
    for place, summary in places:
        pair = compare(place, summary)
        if pair is not None and pair[0] != pair[1]:
            wrong.append(f"{place['run']}: RESULTS {pair[0]}, summary {pair[1]}")
    return wrong


def _times(row: re.Match[str], summary: dict[str, Any]) -> _Pair | None:
    timing = summary.get("timing")
    if not timing:   # summaries before version 2 kept no timing
        return None
    stated: tuple[float, ...] = (float(row["minutes"]), int(row["inside"]))
    measured: tuple[float, ...] = (_as_written(timing["wall_s"] / 60, row["minutes"]),
                                   round(100 * timing["measured_fraction"]))
    if row["pg_models"]:
        stated += (float(row["pg_models"]),)
        measured += (_as_written(timing["experiments"]["pg_models"]["wall_s"] / 60, row["pg_models"]),)
    return stated, measured


def test_the_kept_runs_durations_in_results_are_their_summaries():
    """A run's time in RESULTS, in the kept-runs table and at the head of the run's own section, is the
    summary's (`timing`: the experiments' wall time, the share inside measured windows, `pg_models`'
    own), at the precision written; run times copied by hand drifted from their summaries unnoticed
    for a day before this test."""
    places = (_runs_read(_KEPT_RUN_ROW, _kept_runs_table(), at_least=20)
              + _runs_read(_RUN_SECTION_TIME, _run_sections_on_lines(), at_least=10))
    wrong = _disagreements(places, _times)
    assert not wrong, "; ".join(wrong)


def _ceilings(row: re.Match[str], summary: dict[str, Any]) -> _Pair:
    shown = _ceilings_shown(row["run"])
    return ((float(row["loop"]), _count(row["pgbench"])),
            (_as_written(shown["python_cpu"]["value"], row["loop"]), round(shown["pgbench"]["value"])))


def test_the_kept_runs_ceilings_in_results_are_their_calibrations():
    """The machine's speed a row states is the median of the run's own calibration readings."""
    wrong = _disagreements(_runs_read(_KEPT_RUN_CEILINGS, _kept_runs_table(), at_least=10), _ceilings)
    assert not wrong, "; ".join(wrong)


def _stability(row: re.Match[str], summary: dict[str, Any]) -> _Pair:
    figures = summary["metrics"]
    cvs = [figure["cv"] for figure in figures if figure.get("cv") is not None]
    return ((_count(row["unstable"]), _count(row["figures"]), float(row["cv"])),
            (sum(1 for figure in figures if figure.get("unstable")), len(figures),
             _as_written(100 * statistics.median(cvs), row["cv"])))


def test_the_kept_runs_stability_in_results_is_their_summaries():
    """The unstable figures a row counts, of how many, and their median CV are the summary's."""
    wrong = _disagreements(_runs_read(_KEPT_RUN_STABILITY, _kept_runs_table(), at_least=20), _stability)
    assert not wrong, "; ".join(wrong)


# What a run's section states of the machine, of FastAPI and of its figures' stability.
_SECTION_MACHINE = re.compile(
    _SECTION_HEAD + r"(?P<loop_before>\d+(?:\.\d+)?) M loops/s before(?: it)? and (?P<loop_after>\d+(?:\.\d+)?) M "
    r"after \((?:median )?(?P<loop>\d+(?:\.\d+)?) M over (?:all )?6, CV (?P<loop_cv>\d+(?:\.\d+)?)%\),? pgbench "
    r"(?P<pgbench_before>[\d,]+) and (?P<pgbench_after>[\d,]+) tps \((?P<pgbench>[\d,]+) over 6, CV "
    r"(?P<pgbench_cv>\d+(?:\.\d+)?)%\)")
_SECTION_PEAK = re.compile(
    _SECTION_HEAD + r"FastAPI's async peak was (?P<peak>\d+) req/s against (?P<reference_peak>\d+) in the reference")
_SECTION_STABILITY = re.compile(
    _SECTION_HEAD + r"(?P<unstable>[\d,]+) of its (?P<figures>[\d,]+) figures carry the stability warning "
    r"\(median CV (?P<cv>\d+(?:\.\d+)?)%\)")


def _run_sections_on_lines() -> str:
    """Each run's own section of RESULTS (`_run_sections`) on a line of its own, so that a pattern opening
    with `_SECTION_HEAD` reads only within the section its run's bold id opens."""
    return "\n".join(text for _, text in _run_sections())


def _machine(head: re.Match[str], summary: dict[str, Any]) -> _Pair:
    calibration, shown = summary["calibration"], _ceilings_shown(head["run"])
    return ((float(head["loop_before"]), float(head["loop_after"]), float(head["loop"]), float(head["loop_cv"]),
             _count(head["pgbench_before"]), _count(head["pgbench_after"]), _count(head["pgbench"]),
             float(head["pgbench_cv"])),
            (_as_written(calibration["before"]["python_cpu"]["median"] / 1e6, head["loop_before"]),
             _as_written(calibration["after"]["python_cpu"]["median"] / 1e6, head["loop_after"]),
             _as_written(shown["python_cpu"]["value"], head["loop"]),
             _as_written(100 * shown["python_cpu"]["cv"], head["loop_cv"]),
             round(calibration["before"]["pgbench"]["median"]), round(calibration["after"]["pgbench"]["median"]),
             round(shown["pgbench"]["value"]), _as_written(100 * shown["pgbench"]["cv"], head["pgbench_cv"])))


def test_the_machine_each_run_section_states_is_its_calibration():
    """"The Python loop read b M loops/s before and a M after (m M over 6, CV c%), pgbench b and a tps
    (m over 6, CV c%)": the medians of the three readings before the experiments and the three after,
    of all six, and the six's coefficient of variation, as the run's summary keeps them."""
    heads = _runs_read(_SECTION_MACHINE, _run_sections_on_lines(), at_least=6)
    wrong = _disagreements(heads, _machine)
    assert not wrong, "; ".join(wrong)


def _locust_peak(summary: dict[str, Any]) -> float:
    """The median over repeats of the async endpoint's Locust peak (the seed's "Max RPS")."""
    peaks = [figure["median"] for figure in summary["metrics"] if figure["experiment"] == "fastapi_locust"
             and figure["variant"] == "async" and figure["metric"] == "locust_peak_rps"]
    assert len(peaks) == 1, peaks
    return peaks[0]


def _peaks(head: re.Match[str], summary: dict[str, Any]) -> _Pair:
    (reference,) = store.location_dir("reference", REPO_ROOT / "data").iterdir()
    return ((int(head["peak"]), int(head["reference_peak"])),
            (round(_locust_peak(summary)), round(_locust_peak(_committed_record(reference.name)[0]))))


def test_the_fastapi_peak_each_run_section_states_is_its_summary():
    """"FastAPI's async peak was p req/s against r in the reference": the median Locust peak of the async
    endpoint over the run's repeats, and the reference's, as README's findings give the reference's."""
    wrong = _disagreements(_runs_read(_SECTION_PEAK, _run_sections_on_lines(), at_least=3), _peaks)
    assert not wrong, "; ".join(wrong)


def test_the_stability_each_run_section_states_is_its_summary():
    """"u of its n figures carry the stability warning (median CV c%)", at the head of a run's section."""
    wrong = _disagreements(_runs_read(_SECTION_STABILITY, _run_sections_on_lines(), at_least=6), _stability)
    assert not wrong, "; ".join(wrong)


# A table of runs side by side in RESULTS: its header's first cell is "run", and each row names a run by
# its id's last four characters. The columns a summary or manifest can check are read by their header.
_RUN_TABLE = re.compile(r"^\| run \|.*\|\n\|[-| ]+\|\n(?:\|.*\|\n?)+", re.M)
_RATIO_CELL = re.compile(r"^×(?P<estimate>[\d.]+) \[(?P<low>[\d.]+), (?P<high>[\d.]+)\](?: `(?P<verdict>[^`]+)`)?$")


def _run_table_cells() -> list[tuple[str, str, str]]:
    """(run, column header, cell) for every cell of every table of runs in RESULTS."""
    cells = []
    for table in _RUN_TABLE.finditer(_results()):
        header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")]
                            for line in table.group(0).strip().splitlines()]
        cells += [(row[0], column, cell) for row in rows for column, cell in zip(header[1:], row[1:])]
    return cells


def _primary_row(summary: dict[str, Any], lesson: str) -> dict[str, Any] | None:
    """The run's primary ledger row for `lesson` (its `primary` field names the lesson); None if none."""
    return next((claim for claim in summary["claims"] if claim.get("primary") == lesson), None)


def _lesson_reading(claim: dict[str, Any], written: re.Match[str]) -> _Pair:
    """A lesson's estimate, interval and (where written) verdict as RESULTS writes them (`written`'s groups
    estimate, low, high, verdict) and as the run's primary row for that lesson (`claim`) gives them."""
    parts = {"estimate": "estimate", "ci_low": "low", "ci_high": "high"}   # the claim's field: the group
    return (tuple(float(written[part]) for part in parts.values()) + (written["verdict"],),
            tuple(_as_written(claim[field], written[part]) for field, part in parts.items())
            + (written["verdict"] and claim["verdict"],))


def _regime_choice(summary: dict[str, Any], regime: str, metric: str) -> float:
    chosen = [figure["estimate"] for figure in summary["metrics"]
              if figure["experiment"] == "pg_models" and figure["variant"].startswith(f"{regime}.")
              and figure["metric"] == metric]
    assert len(chosen) == 1, f"{regime} {metric}: {chosen}"
    return chosen[0]


def _run_table_disagreement(run: str, column: str, cell: str) -> str | None:
    """What a cell states against what its run's summary or manifest gives, or None where they agree or
    the column is not one they hold (time to report, CPU parts from raw data since dropped)."""
    run = run.strip("`")
    summary, manifest = _committed_record(run)
    stated: tuple[Any, ...]
    if column == "from":
        stated, measured = (cell,), (manifest["environment"]["git"]["describe"],)
    elif column.startswith("loop"):
        stated, measured = (float(cell),), (_as_written(_ceilings_shown(run)["python_cpu"]["value"], cell),)
    elif column.startswith("pgbench"):
        stated, measured = (_count(cell),), (round(_ceilings_shown(run)["pgbench"]["value"]),)
    elif column == "bound cells (ms)":
        stated, measured = (float(cell),), (_as_written(_regime_choice(summary, "bound", "chosen_db_ms"), cell),)
    elif column == "split share":
        stated, measured = (float(cell),), (_as_written(_regime_choice(summary, "split", "chosen_share_cores"), cell),)
    elif (claim := _primary_row(summary, column)) is not None:
        ratio = _RATIO_CELL.match(cell)
        if ratio is None:
            return f"{run} {column}: {cell!r} is not '×estimate [low, high]'"
        stated, measured = _lesson_reading(claim, ratio)
    else:
        return None
    return None if stated == measured else f"{run} {column}: RESULTS {stated}, summary {measured}"


def test_the_tables_of_runs_in_results_are_their_summaries():
    """A table of runs side by side (RESULTS' seven runs of one boot) states each run's commit, machine
    speed, chosen regimes and lesson readings as its manifest and summary do, at the precision written;
    a lesson's cell names its verdict only as the summary gives it."""
    cells = _run_table_cells()
    assert len({run for run, _, _ in cells}) >= 6, "RESULTS has no table of runs side by side"
    assert any(column == "002-cpu" for _, column, _ in cells), "no lesson column read"
    wrong = [w for cell in cells if (w := _run_table_disagreement(*cell)) is not None]
    assert not wrong, "; ".join(wrong)


# A lesson's reading, in a row of the kept-runs table or a run's section: "<lesson> `<verdict>` (×<estimate>
# [<low>, <high>]", then the repeats in its premise where written (", 7 of 8 repeats in its premise"). A
# reading shared by several lessons ("001-client and 001-pool `size not reproduced` (×4.59 [...]; ×10.1
# [...])") is matched with its group `shared` and left out: its figures follow the lessons' order, which a
# pattern cannot pair reliably.
_LESSON_READING = re.compile(
    r"(?P<shared>\d{3}-[a-z]+(?:-[a-z]+)?(?:, | and ))?(?P<lesson>\d{3}-[a-z]+(?:-[a-z]+)?) `(?P<verdict>[^`]+)` "
    r"\(×(?P<estimate>[\d.]+) \[(?P<low>[\d.]+), (?P<high>[\d.]+)\]"
    r"(?:, (?:(?P<used>\d+) of (?P<ran>\d+)|all (?P<all>\d+)) repeats in its premise)?")


def test_the_kept_runs_lesson_readings_in_results_are_their_summaries():
    """Each lesson a kept-runs row reads ("002-cpu `size not reproduced` (×E [L, H])") is the
    run's primary row for that lesson: its verdict, estimate and interval at the precision written, and
    "k of n repeats in its premise" its repeats used and run."""
    rows = _runs_read(re.compile(r"^\| `(?P<run>[^`]+)` \|.*$", re.M), _kept_runs_table(), at_least=20)
    readings = [(row["run"], summary, lesson) for row, summary in rows for lesson in _LESSON_READING.finditer(row[0])
                if not lesson["shared"]]
    assert len(readings) >= 40, f"only {len(readings)} lesson readings in the kept-runs table"
    wrong = [w for reading in readings if (w := _lesson_disagreement(*reading)) is not None]
    assert not wrong, "; ".join(wrong)


def _run_sections() -> list[tuple[str, str]]:
    """(run, text on one line) of each section of RESULTS that is about one run: the run its first bold
    id names ("**`<run id>`**"); sections that name no run in bold (the kept-runs table, the lessons
    learned) are left out."""
    sections = []
    for section in re.split(r"^## ", _results(), flags=re.M)[1:]:
        first = re.search(r"\*\*`(\d{8}T\d{6}Z-\w+-\w{4})`\*\*", section)
        if first is not None:
            sections.append((first.group(1), re.sub(r"\s+", " ", section)))
    return sections


# "<n> measurement rows: <count> <verdict>, <count> <verdict>, ...": the verdicts of a run's ledger
# rows, counted over its three documents (a verdict with no row left out; "direction, no seed figure"
# holds a comma, so the list splits only where a count follows; a remark in parentheses may follow).
_SECTION_VERDICTS = re.compile(r"(?P<rows>\d+) measurement rows: (?P<counts>\d+ [a-z][^.:]*)[.:]")
# "Benjamini-Hochberg over the <k> supporting rows undid <u> [(<row id>, ...)]".
_SECTION_SUPPORTING = re.compile(r"Benjamini-Hochberg over the (?P<tested>\d+) supporting rows undid "
                                 r"(?P<undone>none|one|\d+)(?: \((?P<ids>\d{3}-[^)]*)\))?")


def test_the_verdicts_each_run_section_counts_are_its_summary():
    """"72 measurement rows: 14 reproduced, 13 size not reproduced, ...": each count in a run's own
    section is its measurement rows' verdicts as `harness show` counts them (`show.verdict_counts`),
    summed over the three seeds, no verdict missing and none added, and the rows add up to the total
    written."""
    wrong, read = [], 0
    for run, text in _run_sections():
        counted = dict(sum(show.verdict_counts(_committed_record(run)[0]).values(), Counter()))
        for written in _SECTION_VERDICTS.finditer(text):
            read += 1
            parts = re.split(r"(?:^|, )(\d+) ", written["counts"])[1:]
            # a verdict may carry a remark in parentheses ("7 premise not met (all on the seed's ...)")
            stated = {verdict.split(" (")[0]: int(n) for n, verdict in zip(parts[::2], parts[1::2])}
            if (int(written["rows"]), stated) != (sum(counted.values()), counted):
                wrong.append(f"{run}: RESULTS {written['rows']} rows {stated}, summary "
                             f"{sum(counted.values())} rows {counted}")
    assert read >= 8, f"only {read} verdict counts read in RESULTS' run sections"
    assert not wrong, "; ".join(wrong)


def test_the_supporting_rows_each_run_section_says_were_undone_are_its_summary():
    """"Benjamini-Hochberg over the k supporting rows undid u (ids)": the supporting family's size, and the
    rows whose decisive verdict the adjustment undid, as the run's summary records them."""
    wrong, read = [], 0
    for run, text in _run_sections():
        for written in _SECTION_SUPPORTING.finditer(text):
            read += 1
            family = _committed_record(run)[0]["multiple_comparisons"]["families"]["supporting"]
            stated: tuple[Any, ...] = (int(written["tested"]), _count(written["undone"]))
            measured: tuple[Any, ...] = (family["tested"], len(family["undone"]))
            if written["ids"]:
                stated += (sorted(written["ids"].split(", ")),)
                measured += (sorted(family["undone"]),)
            if stated != measured:
                wrong.append(f"{run}: RESULTS {stated}, summary {measured}")
    assert read >= 8, f"only {read} Benjamini-Hochberg counts read in RESULTS' run sections"
    assert not wrong, "; ".join(wrong)


def _lesson_disagreement(run: str, summary: dict[str, Any], written: re.Match[str]) -> str | None:
    """What a lesson reading (`_LESSON_READING`) states against the run's primary row for the lesson, or
    None where they agree."""
    claim = _primary_row(summary, written["lesson"])
    if claim is None:
        return f"{run}: no primary row for {written['lesson']}"
    stated, measured = _lesson_reading(claim, written)
    if written["used"] or written["all"]:
        stated += (int(written["used"] or written["all"]), int(written["ran"] or written["all"]))
        measured += (claim["n_used"], claim["n_ran"])
    return None if stated == measured else f"{run} {written['lesson']}: RESULTS {stated}, summary {measured}"


def test_the_lesson_readings_each_run_section_states_are_its_summary():
    """Each lesson a run's section reads on its own ("002-cpu `size not reproduced` (×E [L, H]") is the
    run's primary row for that lesson, and "k of n repeats in its premise" its repeats used and run."""
    readings = [(run, _committed_record(run)[0], lesson) for run, text in _run_sections()
                for lesson in _LESSON_READING.finditer(text) if not lesson["shared"]]
    assert len(readings) >= 40, f"only {len(readings)} lesson readings read in RESULTS' run sections"
    wrong = [w for reading in readings if (w := _lesson_disagreement(*reading)) is not None]
    assert not wrong, "; ".join(wrong)
