"""The committed tree stays lean (issue 23): only the reference run keeps raw data, every earlier
run is a manifest and a summary under data/history, and the tracked data/ stays under 200 MB
(a client twice as fast records twice the requests per window). Read from git's index, so a file on
disk that git ignores does not count. RESULTS' figures are generated blocks, not prose read back:
tests/test_answer.py."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import PurePosixPath

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
