"""The run store: `data/runs/<run-id>/`, written aside and renamed into place only when complete.

Layout of one run:
    manifest.json                       format version, run id, profile, parameters, status, metadata
    <experiment>/r<k>/<table>.parquet   raw tables of repeat k (see experiments/base.py)
    <experiment>/r<k>/result.json       that repeat's status, error, timings and notes
    <experiment>/r<k>/artifacts/        raw files of external tools (Locust CSVs, pgbench logs)
    servers/                            server logs
    report/                             the HTML report and executed notebooks (`harness report`)

While a run is in progress it lives in `data/runs/.incomplete-<run-id>/`. Only a finished run is
renamed to its id, and `data/runs/latest` moves (atomically) only to a run whose status is
`complete`: an interrupted or failed run never replaces or corrupts an earlier one.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import HarnessError

FORMAT_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parent.parent
INCOMPLETE_PREFIX = ".incomplete-"


def default_data_dir() -> Path:
    return Path(os.environ.get("STUDY_DATA_DIR", REPO_ROOT / "data"))


def runs_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "runs"


def new_run_id(profile: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{profile}-{secrets.token_hex(2)}"


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


class RunWriter:
    def __init__(self, data_dir: Path | None, run_id: str, manifest: dict[str, Any]):
        self.root = runs_dir(data_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.final_path = self.root / run_id
        if self.final_path.exists():
            raise HarnessError(f"run {run_id} already exists at {self.final_path}; not overwriting it")
        self.path = self.root / f"{INCOMPLETE_PREFIX}{run_id}"
        self.path.mkdir()
        self.manifest = {"format_version": FORMAT_VERSION, "run_id": run_id, "status": "running",
                         **manifest}
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path / "manifest.json", self.manifest)

    def repeat_dir(self, experiment: str, repeat: int) -> Path:
        d = self.path / experiment / f"r{repeat}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def commit(self, status: str) -> Path:
        """Finish the run: rename it into place; move `latest` to it if it is complete."""
        self.manifest["status"] = status
        self.manifest["finished_at"] = _now()
        self.save()
        os.rename(self.path, self.final_path)
        self.path = self.final_path
        if status == "complete":
            link = self.root / "latest"
            tmp = self.root / f".latest-{self.run_id}"
            os.symlink(self.run_id, tmp)
            os.replace(tmp, link)
        return self.final_path

    def abandon(self, status: str, error: str | None = None) -> Path:
        """Leave an interrupted run where it is (`.incomplete-<id>`), marked as such."""
        self.manifest["status"] = status
        self.manifest["finished_at"] = _now()
        if error:
            self.manifest["error"] = error
        self.save()
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
        if version != FORMAT_VERSION:
            raise HarnessError(f"{self.path}: run format {version} is not the format this harness "
                               f"reads ({FORMAT_VERSION})")

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

    def table(self, experiment: str, table: str, ok_only: bool = True) -> pd.DataFrame:
        """All repeats of one raw table, with a `repeat` column. Failed repeats are left out unless
        `ok_only=False`. An empty frame if the experiment recorded no such table."""
        parts = []
        for k, d in self.repeat_dirs(experiment):
            f = d / f"{table}.parquet"
            if not f.exists():
                continue
            if ok_only and self.repeat_status(experiment, k) != "ok":
                continue
            df = pd.read_parquet(f)
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
    root = runs_dir(data_dir)
    out = []
    for d in sorted(root.iterdir()) if root.exists() else []:
        if d.is_symlink() or not d.is_dir() or not (d / "manifest.json").exists():
            continue
        m = json.loads((d / "manifest.json").read_text())
        out.append({"run_id": m.get("run_id"), "status": m.get("status"), "profile": m.get("profile"),
                    "path": str(d), "experiments": list(m.get("experiments", {}))})
    return out
