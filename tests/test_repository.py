"""The committed tree stays lean (issue 23): only the reference run keeps raw data, every earlier
run is a manifest and a summary under data/history, and the tracked data/ stays under 200 MB
(150 MB until the reference 0dff: a client twice as fast records twice the requests per window,
and its raw data is 130 MB against da6c's 99).
Read from git's index, so a file on disk that git ignores does not count. And RESULTS states the
kept runs' times (in their table and their own sections), machine speeds and unstable figures as
their committed summaries do."""

from __future__ import annotations

import re
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from conftest import REPO_ROOT

from harness.core import store

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
# A run's own section opens "**`<run id>`** ... <m> min of run, <f>% [of it] inside measured windows
# (`pg_models` <p> min" (lines break anywhere; "of repeats" in older sections).
_RUN_SECTION_TIME = re.compile(
    r"\*\*`(?P<run>\d{8}T\d{6}Z-\w+-\w{4})`\*\*(?:(?!\*\*`).){0,900}?(?P<minutes>\d+(?:\.\d+)?)\s+min\s+of\s+"
    r"(?:run|repeats),?\s+(?P<inside>\d+)%(?:\s+of\s+it)?\s+inside\s+measured\s+windows"
    r"(?:\s+\(`pg_models`\s+(?P<pg_models>\d+(?:\.\d+)?)\s+min)?", re.S)


def _as_written(value: float, written: str) -> float:
    """`value` rounded to as many decimals as `written` shows."""
    return round(value, len(written.partition(".")[2]))


def _results() -> str:
    return (REPO_ROOT / "docs" / "RESULTS.md").read_text()


def _kept_runs_table() -> str:
    return _results().split("## The runs kept for history", 1)[1].split("\n## ", 1)[0]


def _runs_read(pattern: re.Pattern[str], text: str, at_least: int) -> list[tuple[re.Match[str], dict[str, Any]]]:
    """The places in `text` that `pattern` reads, each with its run's committed summary."""
    places = list(pattern.finditer(text))
    assert len(places) >= at_least, f"only {len(places)} places in RESULTS read by {pattern.pattern!r}"
    data = REPO_ROOT / "data"
    found = []
    for place in places:
        where = [store.location_dir(kept, data) / place["run"] for kept in store.COMMITTED
                 if (store.location_dir(kept, data) / place["run"] / "summary.json").exists()]
        assert where, f"RESULTS names {place['run']}, which is not committed under data/"
        found.append((place, store.load_summary(where[0])))
    return found


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
    own), at the precision written; b135's 71.7 min, against its summary's 72.2, went unnoticed for
    a day before this test."""
    places = (_runs_read(_KEPT_RUN_ROW, _kept_runs_table(), at_least=20)
              + _runs_read(_RUN_SECTION_TIME, _results(), at_least=10))
    wrong = _disagreements(places, _times)
    assert not wrong, "; ".join(wrong)


def _ceilings(row: re.Match[str], summary: dict[str, Any]) -> _Pair:
    calibration = summary["calibration"]
    readings = {name: calibration["before"][name]["values"] + calibration["after"][name]["values"]
                for name in ("python_cpu", "pgbench")}
    return ((float(row["loop"]), int(row["pgbench"].replace(",", ""))),
            (_as_written(statistics.median(readings["python_cpu"]) / 1e6, row["loop"]),
             round(statistics.median(readings["pgbench"]))))


def test_the_kept_runs_ceilings_in_results_are_their_calibrations():
    """The machine's speed a row states is the median of the run's own calibration readings."""
    wrong = _disagreements(_runs_read(_KEPT_RUN_CEILINGS, _kept_runs_table(), at_least=10), _ceilings)
    assert not wrong, "; ".join(wrong)


def _stability(row: re.Match[str], summary: dict[str, Any]) -> _Pair:
    figures = summary["metrics"]
    cvs = [figure["cv"] for figure in figures if figure.get("cv") is not None]
    return ((int(row["unstable"].replace(",", "")), int(row["figures"].replace(",", "")), float(row["cv"])),
            (sum(1 for figure in figures if figure.get("unstable")), len(figures),
             _as_written(100 * statistics.median(cvs), row["cv"])))


def test_the_kept_runs_stability_in_results_is_their_summaries():
    """The unstable figures a row counts, of how many, and their median CV are the summary's."""
    wrong = _disagreements(_runs_read(_KEPT_RUN_STABILITY, _kept_runs_table(), at_least=20), _stability)
    assert not wrong, "; ".join(wrong)
