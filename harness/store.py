"""The run store: `data/runs/<run-id>/`, written aside and renamed into place only when complete.

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

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import pandas as pd

from . import config
from .errors import HarnessError
from .processes import write_json_atomic  # noqa: F401  (re-exported: the run store's writer)

FORMAT_VERSION = 2          # 2: per-cell statuses in result.json; 1 is read (cells from repeats)
READABLE_FORMATS = (1, 2)
INCOMPLETE_PREFIX = ".incomplete-"
CELL_STATUSES = ("ok", "failed", "skipped")
CELL_COLUMNS = ["repeat", "variant", "status", "reason", "ops", "failed_ops"]


def default_data_dir() -> Path:
    return config.data_dir()


def runs_dir(data_dir: Path | None = None) -> Path:
    return Path(data_dir or default_data_dir()) / "runs"


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
        manifest_path = self.path / "manifest.json"
        if not manifest_path.exists():
            raise HarnessError(f"{self.path} is not a run (no manifest.json)")
        self.manifest = json.loads(manifest_path.read_text())
        version = self.manifest.get("format_version")
        if version not in READABLE_FORMATS:
            raise HarnessError(f"{self.path}: run format {version} is not a format this harness "
                               f"reads ({', '.join(map(str, READABLE_FORMATS))})")

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
            df = pd.read_parquet(f)
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

    def server_label(self, role: str) -> str:
        """e.g. 'FerretDB v1.24.2 on PostgreSQL 15.18' or 'MongoDB 8.2.1': never one for the other."""
        ident = self.manifest.get("servers", {}).get(role) or {}
        return ident.get("label", "unknown server")


def open_run(ref: str | Path | None = None, data_dir: Path | None = None) -> Run:
    """A run by path, by id, or (None / 'latest') the newest complete one."""
    root = runs_dir(data_dir)
    if ref is None or str(ref) == "latest":
        link = root / "latest"
        if not link.exists():
            raise HarnessError(f"no complete run yet in {root}: run `python -m harness run ...` first")
        return Run(link.resolve())
    p = Path(ref)
    if p.is_dir():
        return Run(p)
    if (root / str(ref)).is_dir():
        return Run(root / str(ref))
    raise HarnessError(f"no run {str(ref)!r}: not a directory, nor a run id in {root}")


def list_runs(data_dir: Path | None = None) -> list[dict[str, Any]]:
    """Every stored run, oldest first, interrupted and incomplete ones included: run_id, status,
    has_failures, profile, path, and per experiment its status, cell counts and first reasons."""
    root = runs_dir(data_dir)
    out = []
    for d in sorted(root.iterdir()) if root.exists() else []:
        if d.is_symlink() or not d.is_dir() or not (d / "manifest.json").exists():
            continue
        try:
            m = json.loads((d / "manifest.json").read_text())
        except ValueError:
            out.append({"run_id": d.name, "status": "unreadable", "profile": None, "path": str(d),
                        "experiments": {}, "has_failures": None})
            continue
        status = m.get("status")
        if d.name.startswith(INCOMPLETE_PREFIX) and status in ("running", None):
            status = "incomplete"   # the process that wrote it is gone (or still running)
        out.append({"run_id": m.get("run_id"), "status": status, "profile": m.get("profile"),
                    "path": str(d), "has_failures": m.get("has_failures"),
                    "experiments": {n: {"status": e.get("status"), "cells": e.get("cells", {}),
                                        "reasons": e.get("reasons", [])}
                                    for n, e in m.get("experiments", {}).items()}})
    return out
