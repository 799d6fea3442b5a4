"""The committed tree stays lean: only the reference run keeps raw data, every earlier run is a
gzipped manifest and summary under data/history, and each has a budget in bytes, measured on the
files git tracks (a file on disk that git ignores does not count): the tracked data/ at most 80 MB, a
kept run at most 0.3 MB, the reference's directory at most 64 MB. The reference's budget was meant to
be 40 MB; its raw tables stored compactly (core/tables.py) came to 38.7 MB by themselves on the Intel
reference, times at a nanosecond being about 3.4 bytes of entropy each (pg_models' 1.36 million
operations, four times apiece: 17.9 MB). The AMD EPYC reference that followed completes about 1.4
times the operations in the same windows (pg_models' samples: 25.3 MB), and its directory holds 61.5
MB with the report's page (6.3 MB). Rewritten in format 3 (times at a microsecond, the samples
ordered by variant and start), its tables take 30.8 MB instead of 51.5 (34.9 at a microsecond
unordered), and its page with 256-colour PNGs 3.3 MB instead of 6.3: 37.8 MB in all, within 40 MB
once a reference is written so."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import PurePosixPath

from conftest import REPO_ROOT

from harness.core import store

DATA_LIMIT_BYTES = 80 * 10**6
KEPT_RUN_LIMIT_BYTES = 300 * 10**3
REFERENCE_LIMIT_BYTES = 64 * 10**6


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
