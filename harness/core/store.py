"""The run store: `data/runs/<run-id>/`, written aside and renamed into place only when complete.

Where runs live, each found by `open_run` and listed by `list_runs`:
    data/reference/<run-id>/   the one reference run, raw data and all (committed)
    data/history/<run-id>/     earlier committed runs: manifest.json.gz and summary.json.gz only
    data/runs/<run-id>/        new runs, raw data and all (git-ignored working area); `latest`
`promote()` makes a run of data/runs the reference and moves the old reference's manifest and
summary to data/history. Manifests are read through `load_manifest()` and summaries through
`load_summary()`, which upgrade every older format to the current one (`upgrade_manifest()`,
`upgrade_summary()`); `Manifest` declares the manifest's keys.

Layout of one run:
    manifest.json                       format version, run id, profile, parameters, status, metadata
    <experiment>/r<k>/<table>.parquet   raw tables of repeat k (see experiments/base.py)
    <experiment>/r<k>/result.json       that repeat's status, error, timings and notes
    <experiment>/r<k>/artifacts/        raw files of external tools (Locust CSVs, pgbench logs)
    servers/                            server logs
    report/                             the HTML report and executed notebooks (`harness report`)

While a run is in progress it lives in `data/runs/.incomplete-<run-id>/`. Only a finished run is
renamed to its id.

Statuses. A *cell* is one variant in one repeat (`result.json["cells"]`): `ok`, `failed` (any
failed operation in its window, beyond the experiment's `failure_tolerance`; or its repeat
crashed or timed out) or `skipped` (`ctx.skip`). An experiment is `ok` (every cell ok or skipped,
at least one ok), `skipped` (all skipped), `failed` (none ok) or `partial`. A run ends
- `complete`: it finished and at least one experiment has an ok cell; `has_failures` in the
  manifest says whether any experiment is `partial` or `failed`;
- `failed`: it finished with no ok cell at all;
- `interrupted` (signal, Ctrl-C) or `incomplete` (the run could not be written, e.g. a full
  disk): left in `.incomplete-<run-id>/`, marked so if the manifest could still be written.

`data/runs/latest` moves (atomically) only to a run whose status is `complete`: the newest run
that finished with something to show, failures included (`has_failures`, and each cell's status,
tell a reader what is missing). A failed, interrupted or unwritable run never replaces or
corrupts an earlier one. `Run.table()` keeps only rows of ok cells unless `ok_only=False`: a
failed cell's rows stay on disk as raw data but never enter a table as if clean.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

import pandas as pd

from . import config, tables
from .errors import HarnessError
from .processes import write_json_atomic  # noqa: F401  (re-exported: the run store's writer)

FORMAT_VERSION = 3          # the run format new runs write (docs/FORMAT.md keeps the history)
READABLE_FORMATS = (1, 2, 3)  # 1: cells derived from repeats; 1 and 2 upgraded by `upgrade_manifest`
INCOMPLETE_PREFIX = ".incomplete-"
CELL_STATUSES = ("ok", "failed", "skipped")
CELL_COLUMNS = ["repeat", "variant", "status", "reason", "ops", "failed_ops"]


def default_data_dir() -> Path:
    return config.data_dir()


def runs_dir(data_dir: Path | None = None) -> Path:
    return Path(data_dir or default_data_dir()) / "runs"


# Where runs live, in the order a run id is looked up (a run in two places: its copy with raw data).
LOCATIONS = ("reference", "runs", "history")
COMMITTED = ("reference", "history")
# All a run keeps under data/history: its manifest and summary, gzipped (a kept run's 1.7 MB of JSON is
# about 0.16 MB so; every committed byte stays in every clone). Readers take either form (`run_file`).
HISTORY_FILES = ("manifest.json.gz", "summary.json.gz")
GZ = ".gz"


def location_dir(where: str, data_dir: Path | None = None) -> Path:
    if where not in LOCATIONS:
        raise HarnessError(f"unknown run location {where!r}; one of {', '.join(LOCATIONS)}")
    return Path(data_dir or default_data_dir()) / where


def location_of(path: Path, data_dir: Path | None = None) -> str:
    """`reference`, `history` or `runs` for a run directory in one of them (of `data_dir` when given,
    else of any data directory), else `elsewhere`."""
    parent = Path(path).resolve().parent
    if data_dir is None:
        return parent.name if parent.name in LOCATIONS else "elsewhere"
    for where in LOCATIONS:
        if parent == location_dir(where, data_dir).resolve():
            return where
    return "elsewhere"


def check_writable(data_dir: Path | None = None) -> Path:
    """The runs directory, created if needed and proven writable (a probe file is created and
    removed); a one-line HarnessError naming the path otherwise. Call before any server starts."""
    root = runs_dir(data_dir)
    probe = root / f".probe-{os.getpid()}-{secrets.token_hex(2)}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise HarnessError(f"data directory {root.parent} is not usable: cannot write {root} "
                           f"({e.strerror or type(e).__name__}); set --data-dir or STUDY_DATA_DIR "
                           "to a writable directory") from None
    return root


def experiment_status(cells: list[dict[str, Any]] | pd.DataFrame) -> str:
    """ok | partial | failed | skipped from an experiment's cells (contract C2)."""
    statuses = list(cells["status"]) if isinstance(cells, pd.DataFrame) else [c["status"] for c in cells]
    if statuses and all(s == "skipped" for s in statuses):
        return "skipped"
    if not any(s == "ok" for s in statuses):
        return "failed"
    return "ok" if all(s in ("ok", "skipped") for s in statuses) else "partial"


class RunWriteError(HarnessError):
    """A run could not be written (a full disk, a directory gone): the run is left incomplete."""


def _writing(what: Path, call: Any) -> Any:
    try:
        return call()
    except OSError as e:
        raise RunWriteError(f"could not write {what}: {e.strerror or type(e).__name__}; the run is left "
                            "incomplete and data/runs/latest is unchanged") from None


def new_run_id(profile: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{profile}-{secrets.token_hex(2)}"


class RunWriter:
    """Writes one run aside (`.incomplete-<id>`) and renames it into place when it ends."""

    def __init__(self, data_dir: Path | None, run_id: str, manifest: dict[str, Any]):
        self.root = check_writable(data_dir)
        self.run_id = run_id
        self.final_path = self.root / run_id
        if self.final_path.exists():
            raise HarnessError(f"run {run_id} already exists at {self.final_path}; not overwriting it")
        self.path = self.root / f"{INCOMPLETE_PREFIX}{run_id}"
        _writing(self.path, self.path.mkdir)
        self.manifest = {"format_version": FORMAT_VERSION, "run_id": run_id, "status": "running",
                         **manifest}
        self.save()

    def save(self) -> None:
        _writing(self.path / "manifest.json", lambda: write_json_atomic(self.path / "manifest.json", self.manifest))

    def repeat_dir(self, experiment: str, repeat: int) -> Path:
        d = self.path / experiment / f"r{repeat}"
        _writing(d, lambda: d.mkdir(parents=True, exist_ok=True))
        return d

    def commit(self, status: str) -> Path:
        """Finish the run: rename it into place; move `latest` to it if it is complete."""
        self.manifest["status"] = status
        self.manifest["has_failures"] = any(e.get("status") in ("failed", "partial")
                                            for e in self.manifest.get("experiments", {}).values())
        self.manifest["finished_at"] = _now()
        self.save()
        _writing(self.final_path, lambda: os.rename(self.path, self.final_path))
        self.path = self.final_path
        if status == "complete":
            link = self.root / "latest"
            tmp = self.root / f".latest-{self.run_id}"
            tmp.unlink(missing_ok=True)
            _writing(link, lambda: os.symlink(self.run_id, tmp))
            _writing(link, lambda: os.replace(tmp, link))
        return self.final_path

    def abandon(self, status: str, error: str | None = None) -> Path:
        """Leave an interrupted run where it is (`.incomplete-<id>`), marked as such if the manifest
        can still be written (on a full disk it may not: the name still says incomplete)."""
        self.manifest["status"] = status
        self.manifest["finished_at"] = _now()
        if error:
            self.manifest["error"] = error
        try:
            self.save()
        except OSError:
            pass
        return self.path


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Run:
    """A finished run, read-only: the manifest and the raw tables of each experiment."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.manifest: Manifest = load_manifest(self.path)

    @property
    def id(self) -> str:
        return self.manifest["run_id"]

    @property
    def experiments(self) -> dict[str, dict]:
        return self.manifest.get("experiments", {})

    def repeat_dirs(self, experiment: str) -> list[tuple[int, Path]]:
        d = self.path / experiment
        if not d.is_dir():
            return []
        out = [(int(p.name[1:]), p) for p in d.iterdir() if p.is_dir() and p.name[1:].isdigit()]
        return sorted(out)

    def cells(self, experiment: str) -> pd.DataFrame:
        """One row per cell (variant x repeat): repeat, variant, status, reason, ops, failed_ops.

        A format-1 run has no cells: each repeat gives one row, variant None, its repeat status."""
        rows = []
        for k, _d in self.repeat_dirs(experiment):
            result = self.result(experiment, k)
            cells = result.get("cells")
            if cells is None:
                status = "ok" if result.get("status") == "ok" else "failed"
                cells = [{"variant": None, "status": status, "reason": result.get("error"),
                          "ops": result.get("operations"), "failed_ops": result.get("operation_errors")}]
            rows += [{"repeat": k, **{c: cell.get(c) for c in CELL_COLUMNS[1:]}} for cell in cells]
        return pd.DataFrame(rows, columns=CELL_COLUMNS)

    def table(self, experiment: str, table: str, ok_only: bool = True) -> pd.DataFrame:
        """All repeats of one raw table, with a `repeat` column; an empty frame if the experiment
        recorded no such table.

        `ok_only` (the default) keeps the rows of ok cells only: for a table with a `variant`
        column, rows whose (repeat, variant) cell is ok; for a table without one, rows of repeats
        whose cells are all ok or skipped (and at least one ok)."""
        cells = self.cells(experiment) if ok_only else None
        parts = []
        for k, d in self.repeat_dirs(experiment):
            f = d / f"{table}.parquet"
            if not f.exists():
                continue
            df = tables.read_table(f)
            if cells is not None:
                mine = cells[cells["repeat"] == k]
                by_variant = "variant" in df.columns and mine["variant"].notna().any()
                if by_variant:
                    df = df[df["variant"].isin(set(mine.loc[mine["status"] == "ok", "variant"]))]
                elif experiment_status(mine) != "ok":
                    continue
            df.insert(0, "repeat", k)
            parts.append(df)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def repeat_status(self, experiment: str, repeat: int) -> str | None:
        f = self.path / experiment / f"r{repeat}" / "result.json"
        return json.loads(f.read_text()).get("status") if f.exists() else None

    def result(self, experiment: str, repeat: int) -> dict:
        f = self.path / experiment / f"r{repeat}" / "result.json"
        return json.loads(f.read_text()) if f.exists() else {}

    def has_raw_data(self) -> bool:
        """Whether any experiment kept a repeat directory (a history run keeps only its summary)."""
        return any(self.repeat_dirs(name) for name in self.experiments)

    def server_label(self, role: str) -> str:
        """e.g. 'FerretDB v1.24.2 on PostgreSQL 15.18' or 'MongoDB 8.2.1': never one for the other."""
        ident = self.manifest.get("servers", {}).get(role) or {}
        return ident.get("label", "unknown server")


def run_file(run_dir: Path, name: str) -> Path | None:
    """A run directory's `name` (manifest.json, summary.json) as it is stored: plain, or gzipped as
    data/history keeps it; None when neither is there."""
    for f in (run_dir / name, run_dir / (name + GZ)):
        if f.exists():
            return f
    return None


def _run_dirs(where: str, data_dir: Path | None = None) -> list[Path]:
    root = location_dir(where, data_dir)
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir()
                  if not d.is_symlink() and d.is_dir() and run_file(d, "manifest.json") is not None)


def _bare_id(name: str) -> str:
    return name[len(INCOMPLETE_PREFIX):] if name.startswith(INCOMPLETE_PREFIX) else name


def open_run(ref: str | Path | None = None, data_dir: Path | None = None) -> Run:
    """A run by path; by id, or a unique prefix or suffix of one (`55e0`), in data/reference,
    data/runs or data/history (a run kept in two of them: the copy with raw data); or (None /
    'latest') the newest complete run of data/runs."""
    root = runs_dir(data_dir)
    if ref is None or str(ref) == "latest":
        link = root / "latest"
        if not link.exists():
            raise HarnessError(f"no complete run yet in {root}: run `python -m harness run ...` first")
        return Run(link.resolve())
    p = Path(ref)
    if p.is_dir():
        return Run(p)
    text = str(ref)
    for where in LOCATIONS:
        if (location_dir(where, data_dir) / text).is_dir():
            return Run(location_dir(where, data_dir) / text)
    if text and "/" not in text:
        matches: dict[str, Path] = {}
        for where in LOCATIONS:
            for d in _run_dirs(where, data_dir):
                name = _bare_id(d.name)
                if name.startswith(text) or name.endswith(text):
                    matches.setdefault(d.name, d)
        if len(matches) == 1:
            return Run(next(iter(matches.values())))
        if len(matches) > 1:
            raise HarnessError(f"run {text!r} is ambiguous: it matches {', '.join(sorted(matches))}; "
                               "give more of the id")
    places = ", ".join(str(location_dir(w, data_dir)) for w in LOCATIONS)
    raise HarnessError(f"no run {text!r}: not a directory, nor a run id (or a unique part of one) in {places}")


def list_runs(data_dir: Path | None = None, where: tuple[str, ...] = LOCATIONS) -> list[dict[str, Any]]:
    """Every stored run, oldest first, interrupted and incomplete ones included: run_id, status,
    has_failures, profile, path, `where` it lives (reference, history, runs), `has_summary`, and per
    experiment its status, cell counts and first reasons."""
    out = []
    for place in where:
        for d in _run_dirs(place, data_dir):
            base = {"path": str(d), "where": place, "has_summary": summary_path(d).exists()}
            try:
                m = load_manifest(d)
            except HarnessError:
                out.append({"run_id": d.name, "status": "unreadable", "profile": None, "experiments": {},
                            "has_failures": None, **base})
                continue
            status = m.get("status")
            if d.name.startswith(INCOMPLETE_PREFIX) and status in ("running", None):
                status = "incomplete"   # the process that wrote it is gone (or still running)
            out.append({"run_id": m.get("run_id"), "status": status, "profile": m.get("profile"),
                        "has_failures": m.get("has_failures"), **base,
                        "experiments": {n: {"status": e.get("status"), "cells": e.get("cells", {}),
                                            "reasons": e.get("reasons", [])}
                                        for n, e in m.get("experiments", {}).items()}})
    return sorted(out, key=lambda r: (_bare_id(Path(r["path"]).name), LOCATIONS.index(r["where"])))


# -- manifests: one reader, every format upgraded to the current one --------------------------------

class Manifest(TypedDict, total=False):
    """manifest.json in the current format (3), as `load_manifest` returns it whatever format is on
    disk. Written by `RunWriter` and `study.run` as the run goes; docs/FORMAT.md lists these keys."""

    format_version: int                 # the run format: 3 (`upgraded_from` holds an older one read)
    upgraded_from: int                  # set by `upgrade_manifest` only: the format stored on disk
    run_id: str
    status: str                         # running | complete | failed | interrupted | incomplete
    has_failures: bool                  # an experiment `partial` or `failed`
    error: str                          # why a run that did not complete stopped
    profile: str
    repeat: int | None                  # the `--repeat` override
    overrides: dict[str, Any]           # `--set` parameter overrides
    command: list[str]                  # sys.argv
    started_at: str
    finished_at: str
    wall_s: float
    experiments: dict[str, dict[str, Any]]  # name -> title, needs, params, version, status, cells, ...
    schedule: list[list[Any]]           # [experiment, repeat] in the order the repeats ran
    timing: dict[str, dict[str, float]]  # name -> wall_s, measured_s (contract C3)
    calibration: dict[str, Any]         # before, after: the in-run ceilings (contract C3)
    environment: dict[str, Any]         # python, packages, machine, git, lock_sha256
    interpreter: dict[str, Any]         # the client side's interpreter and its venv's packages
    placement: dict[str, Any] | None    # client and server CPUs; null until the servers are placed
    prepared: dict[str, Any]            # experiment -> what its `prepare()` recorded before servers start
    servers: dict[str, dict[str, Any]]  # role -> product, version, label, source, uri
    servers_provision_s: float
    server_resets: list[dict[str, Any]]  # every CHECKPOINT + VACUUM ANALYZE between repeats
    server_restarts: list[dict[str, Any]]  # every local server found dead and started again
    summary: dict[str, Any]             # {"path": "summary.json"} or {"error": ...}


def upgrade_manifest(d: Any, source: str = "manifest") -> Manifest:
    """A manifest of any readable format in the current format's shape (a new dict; `d` is left as
    it is). Format 3 writes, from the start of a run, what formats 1 and 2 wrote only sometimes or
    in another shape; a manifest that lacks them (any format: hand-made ones too) gets:
    - `interpreter`: `{}` when absent; its `interpreter` record (implementation, version, build)
      from `environment.python` when it names no version (runs before interpreters were recorded);
    - `placement`: `{"placement": <name>}` for a bare name; null when absent;
    - `prepared`: `{}`; `server_resets`, `server_restarts`: `[]`; `experiments`, `environment`,
      `servers`: `{}`.
    An older format is marked `upgraded_from`. A HarnessError (one line, naming `source`) for
    anything that is not a manifest, or a format this harness does not read."""
    if not isinstance(d, dict):
        raise HarnessError(f"{source}: malformed manifest.json (not a JSON object)")
    version = d.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise HarnessError(f"{source}: stored in run format {version}, newer than this harness reads "
                           f"(up to {FORMAT_VERSION}): upgrade the harness to read it")
    if version not in READABLE_FORMATS:
        raise HarnessError(f"{source}: run format {version} is not a format this harness "
                           f"reads ({', '.join(map(str, READABLE_FORMATS))})")
    out = dict(d)
    for key in ("experiments", "environment", "servers", "prepared"):
        if not isinstance(out.get(key), dict):
            out[key] = {}
    for key in ("server_resets", "server_restarts"):
        if not isinstance(out.get(key), list):
            out[key] = []
    interp = dict(out.get("interpreter") or {})
    py = out["environment"].get("python") or {}
    if not (interp.get("interpreter") or {}).get("version") and py.get("version"):
        free = not py.get("gil_enabled", True)
        interp["interpreter"] = {"implementation": str(py.get("implementation", "python")).lower(),
                                 "version": py["version"], "gil_disabled": free,
                                 "build": "free-threaded" if free else ""}
    out["interpreter"] = interp
    placement = out.get("placement")
    out["placement"] = ({"placement": placement} if isinstance(placement, str)
                        else placement if isinstance(placement, dict) and placement else None)
    if version != FORMAT_VERSION:
        out["upgraded_from"] = version
    out["format_version"] = FORMAT_VERSION
    return cast(Manifest, out)


def load_manifest(where: Path) -> Manifest:
    """A run directory's manifest.json (or the file), upgraded to the current format: the one way
    the harness reads a manifest. One-line HarnessError for a missing or malformed file."""
    f = Path(where)
    run_dir, found = (f.parent, f) if f.suffix in (".json", GZ) else (f, run_file(f, "manifest.json"))
    if found is None or not found.exists():
        raise HarnessError(f"{run_dir} is not a run (no manifest.json)")
    return upgrade_manifest(_read_json(found), str(found.parent))


def _read_json(f: Path) -> Any:
    """A run file's JSON, gzipped or not; a one-line HarnessError naming the file when it is malformed
    or unreadable."""
    try:
        raw = gzip.decompress(f.read_bytes()) if f.suffix == GZ else f.read_bytes()
        return json.loads(raw)
    except (ValueError, EOFError, gzip.BadGzipFile) as e:
        raise HarnessError(f"{f}: malformed {f.name} ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise HarnessError(f"{f}: cannot read ({e.strerror or type(e).__name__})") from None


# -- summaries: one reader, every format upgraded to the current one --------------------------------

SUMMARY_VERSION = 4   # the summary format `load_summary` returns (docs/FORMAT.md keeps the history)
SUMMARY_VERSIONS = (1, 2, 3, 4)


def upgrade_summary(d: Any, source: str = "summary") -> dict[str, Any]:
    """A summary of any readable version in the current version's shape (a new dict; `d` is left as
    it is). Version 1 lacks what version 2 adds; it is filled in from what
    version 1 has and marked so:
    - metric rows: `estimate` := the median (version 1 kept no estimate that belongs to the interval),
      `estimate_from` = "median (v1)";
    - claim rows: `verdict_raw` := `verdict` (no correction was applied), `n_used` := `n_ran` := `n`,
      `estimate` := `value`, `ci_level` = 0.95 (the interval version 1 stored), `p_adjusted` = null.
    Version 2 adjusted every judged row with Holm's correction over all of
    them; version 3 adjusts by lesson (Holm over the primary rows, Benjamini-Hochberg over the
    rest, `claims.adjust`). A version-2 claim row gets `primary` = "" and `error_family` = "all rows
    (Holm, version 2)": its `verdict` and `p_adjusted` are the old rule's, kept as they were.
    Version 4 judges by bands that check size (`ledger.band`; `size not reproduced` and `direction,
    no seed figure` where versions up to 3 wrote `direction only`); the rows have the same keys, and
    an older summary keeps its verdicts and bands as they were, marked by `upgraded_from`.
    A summary with no version is version 1. A HarnessError (one line, naming `source`) for anything
    that is not a summary, or a version this harness does not read."""
    if not isinstance(d, dict):
        raise HarnessError(f"{source}: malformed summary: expected a JSON object, got {type(d).__name__}")
    version = d.get("summary_version", 1)
    if isinstance(version, int) and version > SUMMARY_VERSION:
        raise HarnessError(f"{source}: stored in summary version {version}, newer than this harness reads "
                           f"(up to {SUMMARY_VERSION}): upgrade the harness to read it")
    if version not in SUMMARY_VERSIONS:
        raise HarnessError(f"{source}: summary version {version!r} is not one this harness reads "
                           f"({', '.join(map(str, SUMMARY_VERSIONS))})")
    for key in ("metrics", "claims"):
        rows = d.get(key, [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise HarnessError(f"{source}: malformed summary: `{key}` is not a list of rows")
    out = dict(d, metrics=[dict(r) for r in d.get("metrics", [])], claims=[dict(r) for r in d.get("claims", [])])
    for step in range(version, SUMMARY_VERSION):   # one step per version, oldest first
        _SUMMARY_STEPS[step](out)
    if version < SUMMARY_VERSION:
        out["upgraded_from"] = version
    out["summary_version"] = SUMMARY_VERSION
    return out


def _summary_1_to_2(s: dict[str, Any]) -> None:
    """Version 1 kept no estimate that belongs to the interval, no raw verdict, one n."""
    for r in s["metrics"]:
        r.setdefault("estimate", r.get("median"))
        r.setdefault("estimate_from", "median (v1)")
    for r in s["claims"]:
        r.setdefault("verdict_raw", r.get("verdict"))
        r.setdefault("n_used", r.get("n"))
        r.setdefault("n_ran", r.get("n"))
        r.setdefault("estimate", r.get("value"))
        r.setdefault("ci_level", 0.95)
        r.setdefault("p_adjusted", None)
        r.setdefault("error_family", "none (version 1)")


def _summary_2_to_3(s: dict[str, Any]) -> None:
    """Version 3 adjusts by lesson; a version-2 row was adjusted by Holm over every judged row."""
    for r in s["claims"]:
        r.setdefault("primary", "")
        r.setdefault("error_family", "all rows (Holm, version 2)")


def _summary_3_to_4(s: dict[str, Any]) -> None:
    """Version 4 judges by bands that check size; the rows have the same keys, and an older row
    keeps its verdict and band as they were (marked by `upgraded_from`)."""


_SUMMARY_STEPS = {1: _summary_1_to_2, 2: _summary_2_to_3, 3: _summary_3_to_4}


def summary_path(where: Run | Path) -> Path:
    """A run's summary file: the one stored (plain or gzipped), else where summary.json would go."""
    p = where.path if isinstance(where, Run) else Path(where)
    if p.suffix in (".json", GZ):
        return p
    return run_file(p, "summary.json") or p / "summary.json"


def load_summary(where: Run | Path) -> dict[str, Any]:
    """A run's summary.json (a Run, its directory, or the file), upgraded to the current version:
    the only way `harness show`, `history` and `compare` read a summary. One-line HarnessError for a
    missing or malformed file."""
    f = summary_path(where)
    if not f.exists():
        raise HarnessError(f"{f.parent}: no summary.json (a run with raw data gets one from "
                           f"`python -m harness summarise {f.parent.name}`)")
    return upgrade_summary(_read_json(f), str(f))


# -- promotion: a new run becomes the reference ------------------------------------------------------

# A committed reference run keeps its server logs, gzipped when large: FerretDB's log of a full run
# is about 8 MB of text that compresses about 15-fold, and every committed byte stays in the clone.
LARGE_LOG_BYTES = 1 << 20


def compress_server_logs(run_path: Path) -> list[str]:
    """gzip each `servers/*.log` of a run larger than LARGE_LOG_BYTES (written aside, then renamed;
    the plain file is removed only after). Returns one line per log compressed."""
    done = []
    for log in sorted((run_path / "servers").glob("*.log")):
        if log.stat().st_size <= LARGE_LOG_BYTES:
            continue
        tmp = log.with_name(f"{INCOMPLETE_PREFIX}{log.name}.gz")
        with log.open("rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, log.with_name(log.name + ".gz"))
        log.unlink()
        done.append(f"{run_path.name}: {log.relative_to(run_path)} gzipped")
    return done


def machine_record(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """The machine the run was made on (`environment.machine`; empty when not recorded)."""
    return (manifest.get("environment") or {}).get("machine") or {}


def boot_id(manifest: Mapping[str, Any]) -> str | None:
    """The boot the run was made on (`environment.machine.boot_id`): what tells machines apart."""
    return machine_record(manifest).get("boot_id") or None


def cpu_model(manifest: Mapping[str, Any]) -> str | None:
    """The processor the run was made on (`environment.machine.cpu_model`)."""
    return machine_record(manifest).get("cpu_model") or None


VERSION_ALIASES = Path(__file__).with_name("version_aliases.json")


@functools.lru_cache(maxsize=1)
def _version_aliases() -> dict[str, dict[str, str]]:
    return json.loads(VERSION_ALIASES.read_text())["aliases"]


def experiment_version(manifest: Mapping[str, Any], name: str) -> str | None:
    """The version of experiment `name` the run recorded (`experiments.<name>.version`), read as
    today's harness names it: a version recorded before versions were hashed from each experiment's
    own syntax tree becomes that same code's version now (version_aliases.json, FORMAT)."""
    rec = (manifest.get("experiments") or {}).get(name)
    recorded = rec.get("version") if isinstance(rec, Mapping) else None
    return _version_aliases().get(name, {}).get(recorded, recorded) if recorded else recorded


def experiment_versions(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """Experiment name -> the version the run recorded for it (experiment_version)."""
    exps = manifest.get("experiments") or {}
    return {name: experiment_version(manifest, name) for name, e in exps.items() if isinstance(e, Mapping)}


def committed_manifests(data_dir: Path | None = None) -> list[Manifest]:
    """The committed runs' manifests (data/reference, data/history), oldest first: enough to ask
    which runs measured an experiment's code, without reading their summaries."""
    found = [load_manifest(d) for place in ("reference", "history") for d in _run_dirs(place, data_dir)]
    return sorted(found, key=lambda m: str(m.get("run_id") or ""))


def runs_of_version(manifests: Iterable[Manifest], experiment: str, version: str,
                    profile: str = "full") -> list[Manifest]:
    """The manifests of `profile` runs that record `version` for `experiment`: the runs a new run of
    that code would pool with across boots (their rows still need the same rules; pooling checks)."""
    return [m for m in manifests if m.get("profile") == profile and experiment_versions(m).get(experiment) == version]


def _new_complete_run(ref: str | Path, data_dir: Path | None, what: str) -> Run:
    """Run `ref`, checked to be a complete run of data/runs with a readable summary (`what` names
    the step, for the error)."""
    run = open_run(ref, data_dir)
    if location_of(run.path, data_dir) != "runs":
        raise HarnessError(f"run {run.id} is in {run.path.parent}, not in {runs_dir(data_dir)}: only a new "
                           f"run can be {what}")
    if run.path.name.startswith(INCOMPLETE_PREFIX) or run.manifest.get("status") != "complete":
        raise HarnessError(f"run {run.id} is {run.manifest.get('status')}: only a complete run can be {what}")
    load_summary(run)   # it must have a readable summary
    return run


def _copy_to_history(run_dir: Path, hist_root: Path) -> Path:
    """`run_dir`'s manifest.json and summary.json written aside in `hist_root`, gzipped
    (`HISTORY_FILES`), then renamed into place as `hist_root/<name>`."""
    hist_root.mkdir(parents=True, exist_ok=True)
    tmp = hist_root / f"{INCOMPLETE_PREFIX}{run_dir.name}"
    tmp.mkdir(exist_ok=True)
    for name in HISTORY_FILES:
        source = run_file(run_dir, name.removesuffix(GZ))
        if source is None:
            raise HarnessError(f"{run_dir} has no {name.removesuffix(GZ)} to keep")
        (tmp / name).write_bytes(gzipped(source.read_bytes() if source.suffix != GZ
                                         else gzip.decompress(source.read_bytes())))
    os.rename(tmp, hist_root / run_dir.name)
    return hist_root / run_dir.name


def gzipped(data: bytes) -> bytes:
    """`data` gzipped the same way every time (no name, no time stamp): a file kept twice is the
    same bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def keep(ref: str | Path, data_dir: Path | None = None) -> Path:
    """Commit run `ref` (a complete run of data/runs with a summary) to history: its manifest.json
    and summary.json copied to data/history/<id>/, its raw data left where it is. How a run from
    another boot joins the pool across boots without becoming the reference. Returns the new
    directory."""
    run = _new_complete_run(ref, data_dir, "kept in history")
    hist_root = location_dir("history", data_dir)
    if (hist_root / run.path.name).exists():
        raise HarnessError(f"{hist_root / run.path.name} already exists: not overwriting it")
    return _copy_to_history(run.path, hist_root)


def promote(ref: str | Path, data_dir: Path | None = None) -> list[str]:
    """Make run `ref` (a complete run of data/runs, with raw data and summary.json) the reference:
    the current reference's manifest.json and summary.json go to data/history/<id>/ and its raw
    data to data/runs/<id>/ (the ignored working area: nothing is deleted; `git rm` takes it out
    of the tree); the new run moves to data/reference/<id>/. Everything is checked before anything
    moves; each move is a rename. Returns one line per move."""
    run = _new_complete_run(ref, data_dir, "promoted")
    if not run.has_raw_data():
        raise HarnessError(f"run {run.id} has no raw data: the reference keeps its raw tables")
    ref_root, hist_root, work_root = (location_dir(w, data_dir) for w in ("reference", "history", "runs"))
    current = _run_dirs("reference", data_dir)
    if len(current) > 1:
        raise HarnessError(f"{ref_root} holds {len(current)} runs ({', '.join(d.name for d in current)}); "
                           "it must hold one: move the others by hand first")
    moves = []
    old = current[0] if current else None
    if old is not None:
        load_summary(old)
        for dest in (hist_root / old.name, work_root / old.name):
            if dest.exists():
                raise HarnessError(f"{dest} already exists: not overwriting it")
        _copy_to_history(old, hist_root)
        moves.append(f"{old.name}: manifest.json and summary.json -> {hist_root / old.name}")
        os.rename(old, work_root / old.name)
        moves.append(f"{old.name}: raw data -> {work_root / old.name} (git-ignored; `git rm -r --cached "
                     f"{old}` takes it out of the tree)")
    ref_root.mkdir(parents=True, exist_ok=True)
    was_latest = (work_root / "latest").resolve() == run.path.resolve()
    os.rename(run.path, ref_root / run.path.name)
    moves.append(f"{run.id}: -> {ref_root / run.path.name} (the reference)")
    moves += compress_server_logs(ref_root / run.path.name)
    if was_latest:   # `latest` follows it
        link, tmp_link = work_root / "latest", work_root / f".latest-{run.id}"
        tmp_link.unlink(missing_ok=True)
        os.symlink(os.path.relpath(ref_root / run.path.name, work_root), tmp_link)
        os.replace(tmp_link, link)
    return moves
