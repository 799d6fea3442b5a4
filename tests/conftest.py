"""Shared fixtures: real servers started once per session, and one smoke run of every experiment.

No database is mocked: `stack` is the local PostgreSQL + FerretDB (or whatever STUDY_* points at),
started by the harness's own provisioning code.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from harness import registry, report, study
from harness.core import config, servers, store
from harness.core.errors import HarnessError


@pytest.fixture(scope="session")
def stack():
    with servers.provision(("mongodb", "postgres")) as s:
        yield s


@pytest.fixture(scope="session")
def stack_env(stack):
    """Environment that makes `study.run` (and subprocesses) reuse the session's servers."""
    return {"STUDY_MONGODB_URI": stack.mongodb_uri, "STUDY_POSTGRES_DSN": stack.postgres_dsn}


# A password no file, page or console of the harness may ever show (tests/test_faults.py, class 9).
SECRET = "s3cr3t-Pa55-for-tests"


def with_password(uri: str, user: str = "postgres") -> str:
    """`uri` with `user:SECRET@` as its credentials: the local servers trust any password."""
    return re.sub(r"^(\w+://)(?:[^@/]*@)?", rf"\g<1>{user}:{SECRET}@", uri)


def password_env(stack) -> dict[str, str]:
    """STUDY_* for the session's servers, each URI carrying SECRET. FerretDB 1.x passes PLAIN
    credentials to PostgreSQL, whose local cluster trusts them."""
    return {"STUDY_MONGODB_URI": with_password(stack.mongodb_uri) + "?authMechanism=PLAIN",
            "STUDY_POSTGRES_DSN": with_password(stack.postgres_dsn)}


@pytest.fixture(scope="session")
def smoke_run(stack, tmp_path_factory) -> store.Run:
    """Every registered experiment at the smoke profile, through `study.run`, as users run it; given
    the session's servers by URIs that carry a password, so that the credentials test searches
    every experiment's files and the report's pages for it (one run instead of a second run and
    report of its own)."""
    data_dir = tmp_path_factory.mktemp("smoke-data")
    with pytest.MonkeyPatch.context() as mp:  # session-scoped, so not the `monkeypatch` fixture
        for k, v in password_env(stack).items():
            mp.setenv(k, v)
        path = study.run(list(registry.all_experiments()), "smoke", 1, None, data_dir)
    return store.Run(path)


def snapshot(d: Path) -> dict[str, float]:
    """Every file under `d` with its modification time: compared before and after, it shows that
    nothing there was written."""
    return {str(p.relative_to(d)): p.stat().st_mtime for p in d.rglob("*")} if d.exists() else {}


@pytest.fixture(scope="session")
def smoke_report(smoke_run, tmp_path_factory) -> SimpleNamespace:
    """`report.build` on the smoke run, figures into a temporary directory (never the repo's): every
    notebook executed once by papermill, read by the report's tests and by each family's."""
    figures = tmp_path_factory.mktemp("figures")
    committed = snapshot(report.FIGURES_DIR)
    error = None
    with pytest.MonkeyPatch.context() as mp:  # session-scoped, as in smoke_run
        mp.setenv(report.FIGURES_ENV, str(figures))
        try:
            index = report.build(smoke_run)
        except HarnessError as e:  # the report is still written; tests look at it
            error, index = e, smoke_run.path / "report" / "index.html"
    return SimpleNamespace(index=index, figures=figures, error=error, run=smoke_run,
                           committed_before=committed)


@pytest.fixture
def run_experiment(stack, tmp_path):
    """Run one repeat of one experiment in a worker, as the study does; returns (result, tables)."""

    def _run(name: str, profile: str = "smoke", **overrides) -> tuple[dict, dict[str, pd.DataFrame]]:
        planned = study.plan([name], profile, overrides)[0]
        for d in planned.experiment.datasets(planned.params):
            d.ensure(stack)
        out = tmp_path / name / "r0"
        result = study.run_repeat(planned, stack, out, 0)
        return result, repeat_tables(out)

    return _run


def repeat_tables(out: Path) -> dict[str, pd.DataFrame]:
    """Every table one repeat directory holds, raw (as the worker wrote it), keyed by table name."""
    return {f.stem: pd.read_parquet(f) for f in sorted(out.glob("*.parquet"))}


def experiment_tables(run: store.Run, name: str) -> dict[str, pd.DataFrame]:
    """All tables an experiment recorded in a run (repeat 0), keyed by table name."""
    out = {}
    for _, d in run.repeat_dirs(name):
        for f in sorted(d.glob("*.parquet")):
            out[f.stem] = run.table(name, f.stem)
    return out


REPO_ROOT = config.REPO_ROOT


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the item (`item.rep_call`): the fault table records the outcome."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def started_run(data: Path, proc: subprocess.Popen, timeout: float = 60) -> Path | None:
    """The `.incomplete-*` directory of the run `proc` (a `harness run` CLI) is writing, once its
    manifest names its servers; None if there is none by `timeout` or `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = sorted((data / "runs").glob(f"{store.INCOMPLETE_PREFIX}*"))
        manifest = found[0] / "manifest.json" if found else None
        # the directory comes first, its manifest (written atomically) a moment later
        if manifest is not None and manifest.is_file() and "servers" in json.loads(manifest.read_text()):
            return found[0]
        time.sleep(0.05)
    return None
