"""Where things live and every `STUDY_*` environment variable, read in one place (ground floor).

Variables are read when asked for, not at import, so tests and the CLI can set them per run.

| variable | meaning | default |
|---|---|---|
| `STUDY_DATA_DIR` | where runs are stored (`<dir>/runs/<run-id>/`) | `<repo>/data` |
| `STUDY_FIGURES_DIR` | where a report saves its figures | reference: `<repo>/figures`; else `<run>/report/figures` |
| `STUDY_STATE_DIR` | state of `harness servers up` | `<repo>/.harness` |
| `STUDY_SERVER_SOURCE` | `auto`, `docker` or `local` | `auto` |
| `STUDY_MONGODB_URI` | use this MongoDB-role server | start one |
| `STUDY_POSTGRES_DSN` | use this PostgreSQL server | start one |
| `STUDY_PG_BINDIR` | directory of `initdb`/`postgres` | Debian's newest, or PATH |
| `STUDY_FERRETDB_BIN` | FerretDB binary | `<repo>/.tools/bin/ferretdb`, or PATH |
| `STUDY_TOXIPROXY_BIN` | Toxiproxy server binary | `<repo>/.tools/bin/toxiproxy-server`, or PATH |
| `STUDY_FAULTS_JSON` | where the fault suite writes its outcome table | `<repo>/.harness/fault_suite.json` |
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]   # harness/core/config.py
PROFILES = ("smoke", "quick", "full", "seed")
# smoke: tiny sizes for the tests; quick: one repeat at small sizes; full: the reference profile
# (the seeds' concurrency with shorter windows, repeated); seed: the seeds' own sizes
SERVER_SOURCES = ("auto", "docker", "local")


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def data_dir() -> Path:
    return Path(_env("STUDY_DATA_DIR") or REPO_ROOT / "data")


CITABLE_FIGURES = REPO_ROOT / "figures"   # the reference run's figures, committed and cited


def figures_override() -> Path | None:
    """$STUDY_FIGURES_DIR when set: every report's figures go there."""
    raw = _env("STUDY_FIGURES_DIR")
    return Path(raw) if raw else None


def state_dir() -> Path:
    return Path(_env("STUDY_STATE_DIR") or REPO_ROOT / ".harness")


def server_source() -> str:
    return _env("STUDY_SERVER_SOURCE") or "auto"


def mongodb_uri() -> str | None:
    return _env("STUDY_MONGODB_URI")


def postgres_dsn() -> str | None:
    return _env("STUDY_POSTGRES_DSN")


def pg_bindir() -> str | None:
    return _env("STUDY_PG_BINDIR")


def ferretdb_bin() -> str | None:
    return _env("STUDY_FERRETDB_BIN")


def toxiproxy_bin() -> str | None:
    return _env("STUDY_TOXIPROXY_BIN")


COMMITTED_FAULTS_JSON = REPO_ROOT / "data" / "fault_suite.json"   # published by scripts/fault-table


def faults_json() -> Path:
    """Where a test run writes the fault table: an ignored file, so a `commit -a` after the tests never
    takes in a partial record; `scripts/fault-table` publishes it to COMMITTED_FAULTS_JSON."""
    return Path(_env("STUDY_FAULTS_JSON") or REPO_ROOT / ".harness" / "fault_suite.json")
