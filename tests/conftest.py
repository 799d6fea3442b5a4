"""Shared fixtures: real servers started once per session, and one smoke run of every experiment.

No database is mocked: `stack` is the local PostgreSQL + FerretDB (or whatever STUDY_* points at),
started by the harness's own provisioning code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pandas as pd
import pytest

from harness.core import config, datasets, servers, store
from harness.core.errors import HarnessError
from harness.core.tables import read_table
from harness.experiments import registry
from harness.running import study
from harness.writing import report

T = TypeVar("T")


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


def harness(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` from the repository, as a user types it (`env` None: this process's)."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=config.REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def two_at_a_time(fn: Callable[..., T], *cases: Iterable[Any]) -> list[T]:
    """`fn` over `cases` (as `map`), two calls at a time, results in order: for command-line calls
    that measure nothing (an interpreter's start-up and one error or refusal each), which the
    machine's two cores then finish in about half the wait. Never for a run whose figures a test reads."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(fn, *cases))


def finished_run(data: Path, console: str = "") -> store.Run:
    """The one run published in `data`/runs (not `latest`, not an `.incomplete-*` one); `console`
    (the command's stderr) goes into the failure when there is not exactly one."""
    runs = [d for d in (data / "runs").iterdir() if d.is_dir() and not d.is_symlink()
            and not d.name.startswith(".")] if (data / "runs").is_dir() else []
    assert len(runs) == 1, f"{len(runs)} runs in {data / 'runs'}: {runs}\n{console[-3000:]}"
    return store.Run(runs[0])


@pytest.fixture(scope="session")
def smoke_cli(stack, tmp_path_factory) -> SimpleNamespace:
    """`harness run all --profile smoke`: every registered experiment through the command line, as
    users run it, given the session's servers by URIs that carry a password, so that the
    credentials test searches every experiment's files, the report's pages and this console for it
    (one run instead of a second run and report of its own). Its run, stdout and stderr."""
    data_dir = tmp_path_factory.mktemp("smoke-data")
    done = harness("run", "all", "--profile", "smoke", "--repeat", "1", "--data-dir", str(data_dir),
                   env=dict(os.environ, PYTHONUNBUFFERED="1", **password_env(stack)), timeout=1200)
    # not exactly one run: every test that reads it fails with the command's stderr
    return SimpleNamespace(run=finished_run(data_dir, done.stderr), stdout=done.stdout, stderr=done.stderr,
                           returncode=done.returncode)


@pytest.fixture(scope="session")
def smoke_run(smoke_cli) -> store.Run:
    """The session's smoke run of every experiment (`smoke_cli`), read by every family's tests."""
    return smoke_cli.run


# The example's [load] at the suite's size: both PostgreSQL drivers (psycopg, asyncpg), two repeats.
VERIFY_SMALL_LOAD = ('clients = 8\npools = [4]\nduration_s = 0.5\nwarmup_s = 0.2\n'
                     'models = ["threads_psycopg", "uvloop_asyncpg"]\nrepeats = 2\np99_objective_ms = 250\n')


@pytest.fixture(scope="session")
def verify_cli(stack, tmp_path_factory) -> SimpleNamespace:
    """`harness verify` through the command line, once for the session: the PostgreSQL example's
    request (examples/workloads/postgres_accounts.toml) at VERIFY_SMALL_LOAD, its target the
    session's PostgreSQL given with SECRET as the password in the workload file itself. Read by the
    example's test (tests/test_verify.py) and the credentials test (tests/test_faults.py, class 9):
    its workload file, data directory, exit code, stdout and stderr."""
    tmp = tmp_path_factory.mktemp("verify-cli")
    # the example's `acct` table, at the size its local target loads (a target by URI loads nothing)
    datasets.Accounts(registry.get("verify_postgres").params("full").rows).ensure(stack)
    text = (config.REPO_ROOT / "examples" / "workloads" / "postgres_accounts.toml").read_text()
    request = text[text.index("[postgres]"): text.index("[load]")]
    workload = tmp / "workload.toml"
    workload.write_text(f'target = "{with_password(stack.postgres_dsn)}"\n\n{request}[load]\n{VERIFY_SMALL_LOAD}')
    data = tmp / "data"
    done = harness("verify", str(workload), "--data-dir", str(data),
                   env=dict(os.environ, PYTHONUNBUFFERED="1", **password_env(stack)), timeout=600)
    return SimpleNamespace(workload=workload, data=data, stdout=done.stdout, stderr=done.stderr,
                           returncode=done.returncode)


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
    return {f.stem: read_table(f) for f in sorted(out.glob("*.parquet"))}


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
