"""The committed tree stays lean: only the reference run keeps raw data, every earlier run is a
gzipped manifest and summary under data/history, and each has a budget in bytes, measured on the
files git tracks (a file on disk that git ignores does not count): the tracked data/ at most 80 MB, a
kept run at most 0.3 MB, the reference's directory at most 40 MB. The AMD EPYC reference written in
format 3 (times as whole microseconds, the samples ordered by variant and start; core/tables.py),
its report's PNGs on a 256-colour palette and its executed notebooks left out holds 37.6 MB: its
tables 29.9 MB (pg_models' samples 13.2 MB), the report's page 3.6 MB, the summary 2.1 MB. The
AMD EPYC reference before it, in format 2 (times at a nanosecond, rows as recorded), held 61.5 MB."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import PurePosixPath

from conftest import REPO_ROOT

from harness.core import store

DATA_LIMIT_BYTES = 80 * 10**6
KEPT_RUN_LIMIT_BYTES = 300 * 10**3
REFERENCE_LIMIT_BYTES = 40 * 10**6


def tracked_data_files() -> list[PurePosixPath]:
    out = subprocess.run(["git", "ls-files", "-z", "--", "data"], cwd=REPO_ROOT, capture_output=True,
                         timeout=60, check=True)
    return [PurePosixPath(name) for name in out.stdout.decode().split("\0") if name]


def test_the_tracked_data_stays_within_its_budgets():
    files = tracked_data_files()
    assert files, "git lists no file under data/: is this a clone?"
    size = {f: (REPO_ROOT / f).stat().st_size for f in files}
    total = sum(size.values())
    assert total <= DATA_LIMIT_BYTES, f"tracked data/ is {total / 1e6:.1f} MB, over {DATA_LIMIT_BYTES / 1e6:.0f} MB"
    by_run: dict[tuple[str, str], int] = defaultdict(int)
    for f, n in size.items():
        if len(f.parts) >= 4:
            by_run[(f.parts[1], f.parts[2])] += n
    over = {run: n for (where, run), n in by_run.items() if where == "history" and n > KEPT_RUN_LIMIT_BYTES}
    assert not over, f"kept runs over {KEPT_RUN_LIMIT_BYTES / 1e3:.0f} kB: {over}"
    reference = {run: n for (where, run), n in by_run.items() if where == "reference"}
    assert reference and all(n <= REFERENCE_LIMIT_BYTES for n in reference.values()), \
        f"the reference's directory is {reference} bytes, over {REFERENCE_LIMIT_BYTES / 1e6:.0f} MB"


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
