"""Faults injected for real into real runs (issue 11), each asserting what the run recorded and left.

Every test runs the harness as users do (the CLI in a subprocess where exit codes, signals or
processes matter), at smoke sizes, with a temporary STUDY_DATA_DIR, and bounds every wait. Runs that
must have their servers killed start their own (never the session's); the others reuse the
session's servers. Each test writes its measured outcome to the fault table (`fault_suite.json`,
see `FAULTS_JSON`), which docs/FAULTS.md describes.

| # | class                                   | test                                               |
|---|-----------------------------------------|----------------------------------------------------|
| 1 | MongoDB-role server killed              | test_ferretdb_killed_*                             |
| 2 | PostgreSQL killed                       | test_postmaster_killed_mid_experiment              |
| 3 | network path cut, then restored         | test_network_path_cut_then_restored                |
| 4 | server stops answering, sockets open    | test_server_stops_answering*                       |
| 5 | run interrupted (SIGINT, SIGTERM)       | test_interrupted_run                               |
| 6 | disk full while writing                 | test_disk_full_while_writing                       |
| 7 | data directory unusable                 | test_unusable_data_directory                       |
| 8 | bad input                               | test_bad_input_*, test_set_parser_*                |
| 9 | credentials                             | test_password_never_written                        |
| 10 | exposure                               | test_every_listener_is_on_loopback                 |
| 11 | a workload that would write             | test_verify_*                                      |
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pandas as pd
import psutil
import pytest
from conftest import REPO_ROOT, SECRET, finished_run, harness, two_at_a_time
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.core import config, servers, store
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.experiments.mongo import workload as mongo_workload
from harness.running import study

pytestmark = pytest.mark.faults

FAULTS_JSON = config.faults_json()
LOOPBACK = {"127.0.0.1", "::1"}
CLASSES = {1: "MongoDB-role server killed mid-experiment", 2: "PostgreSQL killed mid-experiment",
           3: "network path cut, then restored", 4: "server stops answering, sockets kept open",
           5: "run interrupted (SIGINT, SIGTERM)", 6: "disk full while writing a run",
           7: "data directory cannot be created or written", 8: "bad input", 9: "credentials",
           10: "exposure: listeners on loopback only", 11: "a verify workload that would write"}


# ----------------------------------------------------------------------------------------------
# The fault table: each test's measured outcome, written after every test (a partial suite still
# leaves a table).

_table: dict[str, dict[str, Any]] = {}


@pytest.fixture
def fault(request):
    """`fault(cls, measured=...)`: record this test's class and what it measured."""
    row: dict[str, Any] = {}

    def note(cls: int, **measured: Any) -> None:
        row.update({"class": cls, "fault": CLASSES[cls]})
        row.setdefault("measured", {}).update(measured)

    yield note
    rep = getattr(request.node, "rep_call", None)
    if not row or rep is None:
        return
    outcome = "xfailed" if hasattr(rep, "wasxfail") else rep.outcome
    _table[request.node.nodeid.split("::", 1)[1]] = {**row, "outcome": outcome,
                                                     "duration_s": round(rep.duration, 1)}
    FAULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(FAULTS_JSON.read_text()) if FAULTS_JSON.exists() else {}
    tests = {**previous.get("tests", {}), **_table}
    tmp = FAULTS_JSON.with_name(FAULTS_JSON.name + ".tmp")
    tmp.write_text(json.dumps({"updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "classes": CLASSES, "tests": dict(sorted(tests.items()))},
                              indent=2, default=str) + "\n")
    os.replace(tmp, FAULTS_JSON)


def test_the_fault_table_is_written_where_git_ignores_it():
    """A test run's table is a working file: `scripts/fault-table` publishes it, a `commit -a` never
    takes it in (it did twice, half-written)."""
    if config.faults_json() != config.REPO_ROOT / ".harness" / "fault_suite.json":
        pytest.skip("STUDY_FAULTS_JSON points elsewhere")
    out = subprocess.run(["git", "check-ignore", "-q", str(FAULTS_JSON)], cwd=REPO_ROOT, timeout=30)
    assert out.returncode == 0, f"{FAULTS_JSON} is not ignored by git"
    assert FAULTS_JSON != config.COMMITTED_FAULTS_JSON


# ----------------------------------------------------------------------------------------------
# Running the CLI and watching its processes.


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def base_env(data: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, STUDY_DATA_DIR=str(data), PYTHONUNBUFFERED="1", **extra)
    for k in ("STUDY_MONGODB_URI", "STUDY_POSTGRES_DSN"):
        if k not in extra:
            env.pop(k, None)  # the run starts its own servers (so that the test may kill them)
    return env


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Cli:
    """`python -m harness ARGS` in the background; every process under it is remembered."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str]):
        self.out, self.err = tmp / "cli.stdout", tmp / "cli.stderr"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            # SIGINT back to its default: a suite started as a background job (`cmd &` without job
            # control) inherits it ignored, and the CLI would then never see the Ctrl-C under test
            self.popen = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO_ROOT,
                                          env=env, stdout=out, stderr=err, text=True,
                                          preexec_fn=_default_sigint)
        self.root = psutil.Process(self.popen.pid)
        self.seen: dict[int, tuple[str, float]] = {}
        self.started = time.monotonic()

    def scan(self) -> list[psutil.Process]:
        try:
            kids = self.root.children(recursive=True)
        except psutil.Error:
            return []
        for k in kids:
            try:
                self.seen.setdefault(k.pid, (k.name(), k.create_time()))
            except psutil.Error:
                pass
        return kids

    def find(self, pred: Callable[[psutil.Process], bool]) -> psutil.Process | None:
        for p in self.scan():
            try:
                if pred(p):
                    return p
            except psutil.Error:
                continue
        return None

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            self.scan()
            if time.monotonic() > deadline:
                self.popen.kill()
                raise AssertionError(f"the CLI did not exit within {timeout:g} s\n{self.stderr[-3000:]}")
            time.sleep(0.1)
        return self.popen.returncode

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def left_behind(self, grace: float = 10.0) -> list[str]:
        """Processes seen under the CLI that still run (same pid and start time) after `grace` s."""
        def alive() -> list[str]:
            out = []
            for pid, (name, created) in self.seen.items():
                try:
                    p = psutil.Process(pid)
                    if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                        out.append(f"{name}[{pid}]")
                except psutil.Error:
                    pass
            return out
        deadline = time.monotonic() + grace
        while (left := alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill_on_exit(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


@contextmanager
def cli(tmp: Path, *args: str, env: dict[str, str]):
    c = Cli(tmp, *args, env=env)
    try:
        yield c
    finally:
        c.kill_on_exit()


def is_worker(p: psutil.Process) -> bool:
    return "harness.running.worker" in " ".join(p.cmdline())


def named(name: str) -> Callable[[psutil.Process], bool]:
    return lambda p: p.name() == name


def postmaster_of(c: Cli) -> Callable[[psutil.Process], bool]:
    return lambda p: p.name() == "postgres" and p.ppid() == c.root.pid


def incomplete_run(data: Path) -> Path | None:
    found = sorted((data / "runs").glob(f"{store.INCOMPLETE_PREFIX}*"))
    return found[0] if found else None


def wait_for_worker(c: Cli, data: Path, experiment: str, timeout: float = 150) -> psutil.Process:
    """The worker of `experiment`'s first repeat, once it runs."""
    def ready():
        run = incomplete_run(data)
        if c.popen.poll() is not None:
            raise AssertionError(f"the CLI exited early ({c.popen.returncode}):\n{c.stderr[-3000:]}")
        return run and (run / experiment).is_dir() and c.find(is_worker)
    return wait_for(ready, timeout, f"{experiment}'s worker")


def errors_of(entry: dict) -> list[str]:
    """Every error text an experiment's manifest entry holds (its own, its repeats', its cells')."""
    out = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("error", "reason", "reasons", "operation_errors") and v:
                    out.extend(v if isinstance(v, list) else [str(v)])
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(entry)
    return [str(e) for e in out]


def cells(run: store.Run, experiment: str):
    return run.cells(experiment)


def restarts_before(run: store.Run, experiment: str) -> list[str]:
    """What the study restarted before a repeat of `experiment` (manifest `server_restarts`)."""
    return [line for r in run.manifest.get("server_restarts", [])
            if r["before"].split()[0] == experiment for line in r["what"]]


def assert_no_clean_figure(run: store.Run, experiment: str) -> dict[str, Any]:
    """The failed window left raw failures on disk, but nothing of it enters a table as clean."""
    raw = run.table(experiment, "samples", ok_only=False)
    assert len(raw) and (~raw["ok"].astype(bool)).sum() > 0, \
        "the fault did not land inside the measured window (no failed operation recorded)"
    cs = cells(run, experiment)
    assert len(cs) and (cs["status"] == "failed").any(), cs
    clean = run.table(experiment, "samples")
    failed_variants = set(cs.loc[cs["status"] == "failed", "variant"])
    assert clean.empty or not set(clean["variant"]) & failed_variants
    return {"operations": int(len(raw)), "failed_operations": int((~raw["ok"].astype(bool)).sum()),
            "cells": cs[["variant", "status"]].to_dict("records")}


# ----------------------------------------------------------------------------------------------
# 1, 2: a server killed mid-experiment.

# One variant: the fault lands in its window (a second one only timed its warm-up against the dead server)
POOL_ARGS = ("--profile", "smoke", "--set", "mongo_pool.duration_s=6", "--set", "mongo_pool.modes=bare",
             "--set", "mongo_pool.loops=asyncio")


def pool_connected(c: Cli, server: psutil.Process, at_least: int = 4) -> bool:
    """The worker holds `at_least` connections to `server`: more than the set-up's one-off
    synchronous clients open (one operation socket and its monitors), so a variant's pool is up."""
    worker = c.find(is_worker)
    if worker is None:
        return False
    ports = {s.laddr.port for s in server.net_connections(kind="inet") if s.status == psutil.CONN_LISTEN}
    return sum(bool(s.raddr) and s.raddr.port in ports and s.status == psutil.CONN_ESTABLISHED
               for s in worker.net_connections(kind="inet")) >= at_least


def kill_ferretdb_in_mongo_pool(tmp_path: Path, *args: str) -> tuple[Cli, psutil.Process, int, list]:
    """`harness run *args` with its own servers; kills its FerretDB 1 s into mongo_pool's first
    window (6 s). Returns the CLI, the killed process, the exit code and what was left behind."""
    data = tmp_path / "data"
    with cli(tmp_path, "run", *args, env=base_env(data)) as c:
        wait_for_worker(c, data, "mongo_pool")
        ferretdb = c.find(named("ferretdb"))
        assert ferretdb is not None, "no FerretDB under the CLI"
        # a fixed sleep after the worker started missed the window on a loaded machine (the kill
        # landed in the experiment's set-up): wait for the variant's pool to be connected
        wait_for(lambda: pool_connected(c, ferretdb), 120, "mongo_pool's client pool")
        time.sleep(1.0)  # inside the 6 s window (0.1 s warm-up before it)
        ferretdb.kill()
        code = c.wait(240)
        left = c.left_behind()
    assert "Traceback" not in c.stderr, c.stderr[-3000:]
    return c, ferretdb, code, left


@pytest.fixture(scope="module")
def ferretdb_killed(tmp_path_factory, stall_started) -> SimpleNamespace:
    """One run of every smoke cell of mongo_pool, then mongo_client, with its own servers; FerretDB
    killed 1 s into mongo_pool's first window (6 s). Shared by the two class 1 tests below, which
    judge different things of the same run: the cells after the kill, and the restart before
    mongo_client. (Two runs took 30 s; one takes 19 s.) It runs while the class 4 run waits out its
    clients' time-outs (`stall_started`)."""
    tmp_path = tmp_path_factory.mktemp("ferretdb-killed")
    c, ferretdb, code, left = kill_ferretdb_in_mongo_pool(tmp_path, "mongo_pool", "mongo_client", "--profile",
                                                          "smoke", "--set", "mongo_pool.duration_s=6")
    return SimpleNamespace(run=finished_run(tmp_path / "data"), cli=c, ferretdb=ferretdb, code=code, left=left)


def test_ferretdb_killed_mid_experiment_is_restarted_for_the_next(ferretdb_killed, fault):
    k = ferretdb_killed
    run = k.run
    pool, client = run.experiments["mongo_pool"], run.experiments["mongo_client"]
    assert pool["status"] in ("failed", "partial"), pool
    errors = errors_of(pool)
    assert errors, f"mongo_pool's error is not in the manifest: {pool}"
    facts = assert_no_clean_figure(run, "mongo_pool")
    restarted = restarts_before(run, "mongo_client")
    assert any(line.startswith("ferretdb") and "restarted as pid" in line for line in restarted), client
    assert client["status"] == "ok", client
    assert not psutil.pid_exists(k.ferretdb.pid) or k.ferretdb.pid not in [p.pid for p in k.cli.scan()]
    assert not k.left, f"processes left behind: {k.left}"
    fault(1, exit_code=k.code, mongo_pool=pool["status"], first_error=errors[0][:200], **facts,
          restarted=restarted, mongo_client=client["status"], left_behind=k.left)


def test_ferretdb_killed_remaining_cells_fail_at_once(ferretdb_killed, fault):
    """The worker checks the servers between cells (`experiments.base.CellOrder`): once FerretDB is
    dead, the cells of the repeat not yet run fail at once, all with one line naming the server and
    its address, instead of each waiting out its own time-outs (~40 s a cell before)."""
    planned = registry.get("mongo_pool").params("smoke")
    n_cells = len(planned.modes) * len(planned.loops) * len(planned.drivers)
    code, left = ferretdb_killed.code, ferretdb_killed.left
    run = ferretdb_killed.run
    repeat = run.experiments["mongo_pool"]["repeats"][0]
    cs = pd.DataFrame(repeat["cells"])
    assert n_cells > 2 and (cs["status"] == "failed").all(), cs
    ran = cs[cs["ops"] > 0]
    assert len(ran) <= 2, f"cells ran against the dead server: {ran.to_dict('records')}"
    down = cs[cs["ops"] == 0]
    assert len(down), cs
    reasons = set(down["reason"])
    assert len(reasons) == 1, reasons
    reason = reasons.pop()
    address = run.manifest["servers"]["mongodb"]["uri"]   # redacted, as the reason gives it
    assert reason.startswith(f"MongoDB server: no MongoDB server answered at {address} "), reason
    # the cell the kill landed in (6 s window, its in-flight operations' stated time-outs), one
    # check (CONNECT_TIMEOUT_S) and the worker's start: far under the old ~40 s per remaining cell
    assert repeat["seconds"] < 40 * (n_cells - 1), repeat["seconds"]
    assert not left, f"processes left behind: {left}"
    fault(1, remaining_cells_fail_at_once=True, exit_code=code, cells=cs[["variant", "status"]].to_dict("records"),
          reason=reason[:200], address=address, repeat_seconds=repeat["seconds"], left_behind=left)


@pytest.fixture(scope="module")
def uri_kill_started(tmp_path_factory):
    """Class 1 with FerretDB given by URI, its fault injected here: `run mongo_pool mongo_client` on
    a FerretDB of the test's own, killed 2 s into mongo_pool's window (6 s). What is left is waiting
    (the window, the in-flight operations' server selection, the check before mongo_client: about
    15 s) for the CLI to exit: that wait goes on in a thread while the class 2 run (servers of its
    own) uses the time; `uri_killed` collects it. Only the wait overlaps another run: the fault
    itself lands on a machine no other run is measuring on."""
    tmp_path = tmp_path_factory.mktemp("uri-killed")
    data = tmp_path / "data"
    with ExitStack() as held:   # the server and the CLI outlive this fixture's setup: until teardown
        own = held.enter_context(servers.provision(("mongodb",)))   # given to the run by URI
        env = base_env(data, STUDY_MONGODB_URI=own.mongodb_uri)
        c = held.enter_context(cli(tmp_path, "run", "mongo_pool", "mongo_client", *POOL_ARGS, env=env))
        wait_for_worker(c, data, "mongo_pool")
        time.sleep(2.0)
        psutil.Process(own.mongodb.pids[0]).kill()
        killed = time.monotonic()

        def wait_out() -> SimpleNamespace:
            code = c.wait(240)
            after_kill_s = time.monotonic() - killed
            return SimpleNamespace(run=finished_run(data), code=code, after_kill_s=after_kill_s,
                                   left=c.left_behind())

        with ThreadPoolExecutor(max_workers=1) as waiting:
            yield waiting.submit(wait_out)


@pytest.fixture(scope="module")
def uri_killed(uri_kill_started) -> SimpleNamespace:
    """The class 1 run by URI once it has ended: its run, exit code, seconds from the kill to the
    CLI's exit, and what it left behind."""
    return uri_kill_started.result(timeout=300)


def test_postmaster_killed_mid_experiment(tmp_path, fault, uri_kill_started):
    # uri_kill_started: the class 1 run by URI waits out its time-outs while this run goes on
    data = tmp_path / "data"
    args = ("run", "pg_models", "mongo_client", "--profile", "smoke",
            "--set", "pg_models.models=asyncio_asyncpg,threads_psycopg", "--set", "pg_models.slow_ms=0",
            "--set", "pg_models.duration_s=4")
    with cli(tmp_path, *args, env=base_env(data)) as c:
        wait_for_worker(c, data, "pg_models")
        time.sleep(3.0)
        postmaster = c.find(postmaster_of(c))
        assert postmaster is not None, "no postmaster under the CLI"
        postmaster.kill()
        code = c.wait(240)
        left = c.left_behind()
    assert "Traceback" not in c.stderr, c.stderr[-3000:]
    run = finished_run(data)
    pg, client = run.experiments["pg_models"], run.experiments["mongo_client"]
    assert pg["status"] in ("failed", "partial"), pg
    errors = errors_of(pg)
    assert errors, f"pg_models' error is not in the manifest: {pg}"
    cs = cells(run, "pg_models")
    assert (cs["status"] == "failed").any(), cs
    clean = run.table("pg_models", "samples")
    assert clean.empty or not set(clean["variant"]) & set(cs.loc[cs["status"] == "failed", "variant"])
    restarted = restarts_before(run, "mongo_client")
    assert any(line.startswith("postgres") and "restarted as pid" in line for line in restarted), client
    assert any(line.startswith("ferretdb") for line in restarted), client
    assert client["status"] == "ok", client
    assert not left, f"processes left behind: {left}"
    fault(2, exit_code=code, pg_models=pg["status"], first_error=errors[0][:200],
          cells=cs[["variant", "status"]].to_dict("records"), restarted=restarted,
          mongo_client=client["status"], left_behind=left)


def test_ferretdb_given_by_uri_killed_later_experiments_fail_fast(uri_killed, fault):
    run, code, after_kill_s, left = uri_killed.run, uri_killed.code, uri_killed.after_kill_s, uri_killed.left
    pool, client = run.experiments["mongo_pool"], run.experiments["mongo_client"]
    assert pool["status"] in ("failed", "partial"), pool
    assert client["status"] == "failed", client
    assert not run.manifest.get("server_restarts"), "a server given by URI is not the harness's to restart"
    message = " ".join(errors_of(client))
    timeout_s = servers.CONNECT_TIMEOUT_S
    assert "no MongoDB server answered" in message and f"within {timeout_s} s" in message, message
    # the window (6 s) + in-flight operations (server selection 5 s) + the check (5 s) + margin
    assert after_kill_s < 6 + 5 + timeout_s + 20, after_kill_s
    assert code != 0 or run.manifest.get("has_failures"), (code, run.manifest.get("status"))
    assert not left, f"processes left behind: {left}"
    fault(1, given_by_uri=True, exit_code=code, mongo_pool=pool["status"], mongo_client=client["status"],
          mongo_client_error=message[:200], seconds_from_kill_to_exit=round(after_kill_s, 1), left_behind=left)


# ----------------------------------------------------------------------------------------------
# 3, 4: the network path (Toxiproxy, via_proxy=on).


def toxiproxy_of(c: Cli):
    from harness.core.network import Toxiproxy

    proc = wait_for(lambda: c.find(named("toxiproxy-server")), 60, "Toxiproxy under the CLI")
    argv = proc.cmdline()
    api = Toxiproxy(f"http://127.0.0.1:{argv[argv.index('-port') + 1]}")
    name = wait_for(lambda: next((n for n in api.proxies() if n.startswith("harness-mongodb")), None),
                    60, "the MongoDB proxy")
    port = int(api.proxies()[name]["listen"].rsplit(":", 1)[1])

    def worker_connected() -> bool:  # the fault must land in the window, not during imports
        worker = c.find(is_worker)
        return worker is not None and any(s.raddr and s.raddr.port == port and s.status == psutil.CONN_ESTABLISHED
                                           for s in worker.net_connections(kind="inet"))
    wait_for(worker_connected, 60, "the worker's connections through the proxy")
    return api, name


# Longer than PyMongo can wait for the server in its one read retry (server selection): a shorter cut is
# masked, each operation succeeding late (a 1.5 s cut left every operation ok). One variant with a window
# long enough to see operations succeed after the path is restored.
CUT_S = mongo_workload.SERVER_SELECTION_TIMEOUT_MS / 1000 + 2
CUT_ARGS = ("--profile", "smoke", "--set", "mongo_pool.duration_s=14", "--set", "mongo_pool.modes=bare",
            "--set", "mongo_pool.loops=asyncio", "--set", "mongo_pool.via_proxy=on")


def test_network_path_cut_then_restored(tmp_path, fault, stack_env):
    data = tmp_path / "data"
    env = base_env(data, **stack_env)
    with cli(tmp_path, "run", "mongo_pool", *CUT_ARGS, env=env) as c:
        wait_for_worker(c, data, "mongo_pool")
        api, proxy = toxiproxy_of(c)
        time.sleep(1.0)
        api.update_proxy(proxy, enabled=False)
        time.sleep(CUT_S)
        api.update_proxy(proxy, enabled=True)
        api.close()
        code = c.wait(180)
        left = c.left_behind()
    run = finished_run(data)
    pool = run.experiments["mongo_pool"]
    assert pool["status"] in ("failed", "partial"), pool
    facts = assert_no_clean_figure(run, "mongo_pool")
    raw = run.table("mongo_pool", "samples", ok_only=False)
    last_failure = raw.loc[~raw["ok"].astype(bool), "start_s"].max()
    restored = raw[raw["ok"].astype(bool) & (raw["start_s"] > last_failure)]
    assert len(restored), "no operation succeeded after the path was restored"
    assert not left, f"processes left behind: {left}"
    fault(3, exit_code=code, mongo_pool=pool["status"], cut_s=CUT_S, **facts,
          ok_after_restore=int(len(restored)), first_error=errors_of(pool)[0][:200], left_behind=left)


SOCKET_TIMEOUT_S = mongo_workload.SOCKET_TIMEOUT_MS / 1000
# The repeat's time-out: above the clients' stated read time-out, so an operation can time out by itself
# first; one variant (one loop), so the repeat ends soon after its operations do.
STALL_REPEAT_TIMEOUT_S = round(SOCKET_TIMEOUT_S + 30)
TIMEOUT_ARGS = ("--profile", "smoke", "--set", "mongo_pool.duration_s=4", "--set", "mongo_pool.modes=bare",
                "--set", "mongo_pool.loops=asyncio", "--set", "mongo_pool.via_proxy=on",
                "--set", f"mongo_pool.timeout_s={STALL_REPEAT_TIMEOUT_S}")


@pytest.fixture(scope="module")
def stall_started(tmp_path_factory, stack_env):
    """The class 4 run, its fault injected here: its MongoDB path stops answering (Toxiproxy `timeout`
    toxic, sockets kept open) 1 s into mongo_pool's window. What is left is waiting, about 35 s, for
    the clients' time-outs to end the stalled operations and the CLI to exit: that wait goes on in a
    thread while the class 1 runs (servers of their own) use the time; `stalled` collects it. Only
    the wait overlaps another run: the fault itself lands on an otherwise idle machine."""
    tmp_path = tmp_path_factory.mktemp("stall")
    data = tmp_path / "data"
    c = Cli(tmp_path, "run", "mongo_pool", *TIMEOUT_ARGS, env=base_env(data, **stack_env))
    try:
        wait_for_worker(c, data, "mongo_pool")
        api, proxy = toxiproxy_of(c)
        time.sleep(1.0)
        api.add_toxic(proxy, "timeout", {"timeout": 0}, stream="downstream", name="stall")
        stalled_at = time.monotonic()
        api.close()
    except BaseException:
        c.kill_on_exit()
        raise

    def wait_out() -> tuple[store.Run, int, float, list[str]]:
        try:
            code = c.wait(STALL_REPEAT_TIMEOUT_S + 90)
            after_s = time.monotonic() - stalled_at
            return finished_run(data), code, after_s, c.left_behind()
        finally:
            c.kill_on_exit()

    with ThreadPoolExecutor(max_workers=1) as waiting:
        yield waiting.submit(wait_out)


@pytest.fixture(scope="module")
def stalled(stall_started):
    """The class 4 run once it has ended: (run, exit code, seconds from the stall to the CLI's exit,
    left behind). Shared by the class 4 tests, which judge different things of the same run."""
    return stall_started.result(timeout=STALL_REPEAT_TIMEOUT_S + 120)


def test_server_stops_answering_no_hang_past_the_repeat_timeout(stalled, fault):
    run, code, after_s, left = stalled
    pool = run.experiments["mongo_pool"]
    assert pool["status"] == "failed", pool
    cs = cells(run, "mongo_pool")
    assert (cs["status"] == "failed").all(), cs
    assert run.table("mongo_pool", "samples").empty
    assert after_s < STALL_REPEAT_TIMEOUT_S + 20, f"the run went on {after_s:.0f} s after the server stopped answering"
    assert not left, f"processes left behind: {left}"
    fault(4, exit_code=code, mongo_pool=pool["status"], error=errors_of(pool)[0][:200],
          seconds_from_stall_to_exit=round(after_s, 1), repeat_timeout_s=STALL_REPEAT_TIMEOUT_S, left_behind=left)


# What ends an operation on a stalled path, all of them the client's stated time-outs: its read time-out
# (socketTimeoutMS, then PyMongo's one read retry), or the monitor's heartbeat time-out
# (connectTimeoutMS), after which PyMongo interrupts the operations in use and pauses the pool.
CLIENT_TIMEOUT_ERRORS = r"NetworkTimeout|\btimed out\b|_OperationCancelled|connection pool paused"


def test_server_stops_answering_operations_time_out_by_themselves(stalled, fault):
    """The clients' stated time-outs (mongo_workload) end every stalled operation, so the worker
    finishes by itself before the repeat's time-out would stop it; the run records the errors."""
    run, code, after_s, left = stalled
    raw = run.table("mongo_pool", "samples", ok_only=False)
    failed = raw[~raw["ok"].astype(bool)] if len(raw) else raw
    stated = run.result("mongo_pool", 0).get("notes", {}).get("mongodb_client_timeouts_ms", {})
    errors = failed["error"].fillna("") if len(failed) else pd.Series([], dtype=str)
    fault(4, operations_failed_by_time_out=int(len(failed)), stated_timeouts_ms=stated,
          slowest_failed_operation_s=round(float(failed["latency_s"].max()), 1) if len(failed) else None,
          errors=sorted({e.split(":")[0] for e in errors}), seconds_from_stall_to_exit=round(after_s, 1))
    assert stated.get("socketTimeoutMS") == mongo_workload.SOCKET_TIMEOUT_MS, stated
    assert len(failed), "no operation failed: the stall did not land in the window"
    assert errors.str.contains(CLIENT_TIMEOUT_ERRORS).all(), \
        f"an operation ended otherwise than by a client time-out: {sorted(set(errors))[:3]}"
    # a read time-out, the one retry's, and the retry's server selection at most
    bound_s = 2 * SOCKET_TIMEOUT_S + mongo_workload.SERVER_SELECTION_TIMEOUT_MS / 1000 + 5
    assert failed["latency_s"].max() < bound_s, "an operation outlived the stated time-outs"
    assert after_s < STALL_REPEAT_TIMEOUT_S, "the repeat's time-out, not the operations', ended the run"


# ----------------------------------------------------------------------------------------------
# 5, 6, 7: what the run leaves on disk.


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def earlier_runs(data: Path) -> dict[str, str]:
    """An earlier complete run (`latest`) and an earlier failed one, which must survive untouched."""
    good = store.RunWriter(data, "20000101T000000Z-smoke-good", {"profile": "smoke", "experiments": {}})
    (good.path / "mongo_pool" / "r0").mkdir(parents=True)
    (good.path / "mongo_pool" / "r0" / "result.json").write_text('{"status": "ok"}\n')
    good.commit("complete")
    store.RunWriter(data, "20000101T000001Z-smoke-bad", {"profile": "smoke", "experiments": {}}).commit("failed")
    return snapshot(data / "runs")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run(tmp_path, fault, sig):
    data = tmp_path / "data"
    before = earlier_runs(data)
    with cli(tmp_path, "run", "mongo_pool", *POOL_ARGS, env=base_env(data)) as c:
        wait_for_worker(c, data, "mongo_pool")
        time.sleep(1.0)
        c.popen.send_signal(sig)
        code = c.wait(60)
        left = c.left_behind()
    assert code != 0
    assert "Traceback" not in c.stderr, c.stderr[-3000:]
    after = snapshot(data / "runs")
    assert {k: v for k, v in after.items() if k in before} == before, "an earlier run changed"
    assert os.readlink(data / "runs" / "latest") == "20000101T000000Z-smoke-good"
    new = [k for k in after if k not in before]
    assert new and all(k.startswith(store.INCOMPLETE_PREFIX) for k in new), new
    run_dir = incomplete_run(data)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    listed = harness("runs", env=base_env(data))
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if run_dir.name.removeprefix(store.INCOMPLETE_PREFIX) in ln)
    assert "interrupted" in line, listed.stdout
    assert not left, f"processes left behind: {left}"
    fault(5, signal=sig.name, exit_code=code, stderr_last=c.stderr.strip().splitlines()[-1][:200],
          runs_line=" ".join(line.split()), earlier_runs_unchanged=True, left_behind=left)


@contextmanager
def tmpfs(path: Path, size: str, *options: str):
    path.mkdir(parents=True, exist_ok=True)
    opts = ",".join((f"size={size}", *options))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> int:
    """Fill the file system holding `path`; returns the bytes written."""
    written = 0
    with open(path / ".filler", "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                written += f.write(chunk)
            except OSError:
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_while_writing(tmp_path, fault, stack_env):
    with tmpfs(tmp_path / "data", "8m") as data:
        before = earlier_runs(data)
        with cli(tmp_path, "run", "mongo_pool", *POOL_ARGS, env=base_env(data, **stack_env)) as c:
            wait_for_worker(c, data, "mongo_pool")
            filled = fill(data)
            code = c.wait(120)
            left = c.left_behind()
        after = snapshot(data / "runs")
        new = [k for k in after if k not in before]
        latest = os.readlink(data / "runs" / "latest")
        stderr = c.stderr
    assert code != 0, "a run that could not be written must not exit 0"
    assert "Traceback" not in stderr, stderr[-3000:]
    error_lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(error_lines) == 1 and re.search(r"no space|disk", error_lines[0], re.I), stderr[-2000:]
    assert {k: v for k, v in after.items() if k in before} == before, "an earlier run changed"
    assert latest == "20000101T000000Z-smoke-good"
    assert new and all(k.startswith(store.INCOMPLETE_PREFIX) for k in new), f"a run was published: {new}"
    assert not left, f"processes left behind: {left}"
    fault(6, exit_code=code, error=error_lines[0][:300], filler_bytes=filled, left_behind=left,
          earlier_runs_unchanged=True, published=False)


def test_unusable_data_directory(tmp_path, fault):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    cases = {"under a regular file": a_file / "data"}
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True).returncode == 0
    if mounted:
        cases["read-only mount"] = ro / "data"
    outcomes = {}
    try:
        for label, path in cases.items():
            # a server that never answers: had the run started servers first, that would be the error
            env = base_env(path, STUDY_MONGODB_URI="mongodb://127.0.0.1:9/")
            t0 = time.monotonic()
            out = harness("run", "mongo_pool", "--profile", "smoke", env=env, timeout=60)
            elapsed = time.monotonic() - t0
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2, (label, out.returncode, out.stderr[-2000:])
            assert len(lines) == 1 and lines[0].startswith("error:"), (label, out.stderr[-2000:])
            assert str(path) in lines[0] or str(path.parent) in lines[0], (label, lines)
            assert "MongoDB" not in lines[0], "servers were contacted before the data directory was checked"
            outcomes[label] = {"error": lines[0][:300], "seconds": round(elapsed, 1)}
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    assert mounted or os.geteuid() != 0, "as root the read-only tmpfs case must run"
    fault(7, **outcomes)


# ----------------------------------------------------------------------------------------------
# 8: bad input.

BAD_INPUT = [
    (["run", "no_such_experiment"], "no_such_experiment", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.tasks=many"], "tasks", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.duration_s=fast"], "duration_s", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.via_proxy=maybe"], "via_proxy", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.tasks=0"], "tasks", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.duration_s=-1"], "duration_s", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.modes=bare,nosuchmode"], "modes", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.modes=bare,bare"], "modes", {}),   # a variant twice
    (["run", "mongo_pool", "--set", "mongo_pool.rtt_ms=5"], "rtt_ms", {}),
    (["run", "mongo_pool", "--set", "mongo_pool.no_such_param=1"], "no_such_param", {}),
    (["run", "mongo_pool", "--set", "pg_models.clients=1"], "pg_models", {}),
    (["run", "mongo_pool", "--set", "=1"], "--set", {}),
    (["run", "mongo_pool", "--profile", "huge"], "--profile", {}),
    (["run", "mongo_pool", "--repeat", "-1"], "--repeat", {}),
    (["run", "mongo_pool"], "STUDY_MONGODB_URI", {"STUDY_MONGODB_URI": "mangodb://127.0.0.1:27017/"}),
    (["run", "mongo_pool"], "STUDY_MONGODB_URI", {"STUDY_MONGODB_URI": "mongodb://127.0.0.1:notaport/"}),
    (["run", "pg_models"], "STUDY_POSTGRES_DSN", {"STUDY_POSTGRES_DSN": "nonsense"}),
    (["report", "/no/such/run"], "/no/such/run", {}),
]


@pytest.fixture(scope="module")
def bad_input_outcomes(tmp_path_factory) -> list[tuple[subprocess.CompletedProcess, Path, float]]:
    """Each BAD_INPUT case through the command line, with a data directory of its own, two at a
    time (conftest `two_at_a_time`; 18 cases, about 19 s one after another). Each: its outcome, its
    data directory and the seconds the command took (the fault table's figure: the test itself
    waits for nothing)."""
    root = tmp_path_factory.mktemp("bad-input")

    def one(i: int) -> tuple[subprocess.CompletedProcess, Path, float]:
        args, _, env = BAD_INPUT[i]
        data = root / str(i) / "data"
        t0 = time.monotonic()
        out = harness(*args, env=base_env(data, **env), timeout=60)
        return out, data, round(time.monotonic() - t0, 1)

    return two_at_a_time(one, range(len(BAD_INPUT)))


@pytest.mark.parametrize("case", range(len(BAD_INPUT)), ids=[" ".join(a[0][1:]) + (" env" if a[2] else "")
                                                             for a in BAD_INPUT])
def test_bad_input_one_line_error_nothing_written(case, bad_input_outcomes, fault):
    args, names, env = BAD_INPUT[case]
    out, data, seconds = bad_input_outcomes[case]
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert len(lines) <= 3 and any(names in ln for ln in lines), out.stderr  # click adds usage lines
    assert not data.exists() or not any(data.rglob("*")), f"bad input wrote {list(data.rglob('*'))}"
    fault(8, **{" ".join(args) + (f" [{', '.join(f'{k}={v}' for k, v in env.items())}]" if env else ""):
                lines[-1][:200]}, seconds=seconds)


def test_bad_notebook_parameters_name_the_input(tmp_path, fault):
    import papermill
    from papermill.exceptions import PapermillExecutionError

    bad = tmp_path / "no-such-run"
    with pytest.raises(PapermillExecutionError) as e:
        papermill.execute_notebook(str(REPO_ROOT / "notebooks" / "00_summary.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"run_dir": str(bad), "figures_dir": str(tmp_path / "figs")},
                                   kernel_name="python3", cwd=str(REPO_ROOT / "notebooks"), progress_bar=False)
    assert e.value.ename == "HarnessError" and str(bad) in e.value.evalue, (e.value.ename, e.value.evalue)
    assert not (tmp_path / "figs").exists()
    fault(8, notebook_run_dir=f"{e.value.ename}: {e.value.evalue}"[:200])


def _plan(overrides: dict[str, str]):
    return study.plan(["mongo_pool"], "smoke", overrides)


POOL_FIELDS = {f.name: f for f in registry.get("mongo_pool").params_type.__dataclass_fields__.values()}
# printable input (a newline in a command-line argument is not a case worth a message of its own)
text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text, max_size=4))
def test_set_parser_never_crashes_and_names_the_input(values):
    from harness.__main__ import _parse_sets

    try:
        overrides = _parse_sets(tuple(values))
    except click.BadParameter as e:
        assert any(v in str(e) or repr(v) in str(e) for v in values)
        return
    try:
        _plan(overrides)
    except HarnessError as e:
        msg = str(e)
        assert "\n" not in msg
        assert any(k in msg or repr(k.split(".", 1)[-1]) in msg for k in overrides), (overrides, msg)


@settings(max_examples=200, deadline=None)
@example(name="documents", value="9007199254740993")  # 2**53 + 1: found by a CI run, kept
@given(st.sampled_from(sorted(n for n, f in POOL_FIELDS.items() if f.type in ("int", "float", "bool"))),
       st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
                 st.booleans(), text))
def test_set_parser_scalar_values_are_typed_or_refused_by_name(name, value):
    raw = str(value)
    try:
        p = _plan({f"mongo_pool.{name}": raw})[0].params
    except HarnessError as e:
        assert name in str(e), str(e)
        return
    got = getattr(p, name)
    kind = POOL_FIELDS[name].type
    assert type(got).__name__ == kind, (name, raw, got)
    if kind in ("int", "float"):
        # compared as floats: an int past 2**53 is parsed exactly, and float(raw) rounds it
        assert float(got) == float(raw.replace("_", ""))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["nan", "inf", "-nan", "Infinity"]),
       st.sampled_from(["warmup_s", "duration_s", "timeout_s"]))
def test_set_parser_refuses_non_finite_numbers(raw, name):
    with pytest.raises(HarnessError, match=name):
        _plan({f"mongo_pool.{name}": raw})


# ----------------------------------------------------------------------------------------------
# 9: credentials.


def test_password_never_written(tmp_path, fault, stack, smoke_cli, smoke_report, verify_cli):
    """The session's smoke run (every experiment, both PostgreSQL drivers, through the command line)
    and its report were given URIs with SECRET (conftest.password_env), and so was the session's
    `harness verify` (conftest `verify_cli`: SECRET in the workload file's target, psycopg and
    asyncpg): none of their files, figures, pages or consoles holds it. Nor do those of a run
    given a server that cannot be reached, or its error."""
    smoke_run = smoke_cli.run
    assert smoke_run.experiments["mongo_client"]["status"] == "ok", smoke_run.experiments["mongo_client"]
    models = set(smoke_run.experiments["pg_models"]["params"]["models"])
    assert {"threads_psycopg", "asyncio_asyncpg"} <= models, "each PostgreSQL driver meets the password"
    assert verify_cli.returncode == 0, verify_cli.stderr[-3000:]
    assert SECRET in verify_cli.workload.read_text(), "verify's target carries no password"
    data = verify_cli.data
    unreachable = harness("run", "mongo_client", "--profile", "smoke", timeout=60,
                          env=base_env(tmp_path / "data2", STUDY_MONGODB_URI=f"mongodb://u:{SECRET}@127.0.0.1:9/"))
    assert unreachable.returncode != 0
    assert smoke_run.manifest["servers"]["mongodb"]["source"] == "env"   # the URIs with SECRET were used
    searched = [smoke_run.path, smoke_report.figures, data, tmp_path / "data2"]
    files = [p for d in searched for p in d.rglob("*") if p.is_file() and p != verify_cli.workload]
    pages = [p for p in files if p.suffix == ".html"]
    assert smoke_report.index in pages and any(p.is_relative_to(data) for p in pages), "no report page searched"
    leaks = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    postgres_at = stack.postgres_dsn.split("@")[-1].split("/")[0]   # host:port, no credentials
    assert postgres_at in smoke_cli.stdout + smoke_cli.stderr, "the smoke run's console names no server"
    for name, text_ in (("run", smoke_cli), ("verify", verify_cli), ("unreachable", unreachable)):
        if SECRET in text_.stdout + text_.stderr:
            leaks.append(f"{name} console")
    assert not leaks, f"the password appears in: {leaks}"
    fault(9, files_searched=len(files), pages_searched=len(pages), experiments=len(smoke_run.experiments),
          unreachable_error=unreachable.stderr.strip().splitlines()[-1][:200], leaks=leaks)


# ----------------------------------------------------------------------------------------------
# 10: exposure.


def listeners(c: Cli) -> set[tuple[str, str, str, int]]:
    found = set()
    for p in c.scan():
        try:
            conns = p.net_connections(kind="inet")
            what = " ".join(p.cmdline()[:6])
        except psutil.Error:
            continue
        for s in conns:
            if s.status == psutil.CONN_LISTEN:
                found.add((p.name(), what[:120], s.laddr.ip, s.laddr.port))
    return found


@pytest.fixture(scope="module")
def locust_cluster(tmp_path_factory) -> SimpleNamespace:
    """`harness run fastapi_locust` through the command line on servers of its own, through the
    proxy, with a Locust master and two workers: every listener its processes opened while it ran,
    what it left behind, its exit code, stderr and run. Read by the listener test and the
    master-and-workers test (runs of their own took 21 and 11 s)."""
    tmp = tmp_path_factory.mktemp("locust-cluster")
    data = tmp / "data"
    args = ("run", "fastapi_locust", "--profile", "smoke", "--set", "fastapi_locust.via_proxy=on",
            "--set", "fastapi_locust.locust_workers=2", "--set", "fastapi_locust.variants=async",
            "--set", "fastapi_locust.openloop_variants=")   # the open loop is a client: no listener of its own
    seen: set[tuple[str, str, str, int]] = set()
    with cli(tmp, *args, env=base_env(data)) as c:
        deadline = time.monotonic() + 420
        while c.popen.poll() is None and time.monotonic() < deadline:
            seen |= listeners(c)
            time.sleep(0.3)
        code = c.wait(30)
        left = c.left_behind()
    return SimpleNamespace(code=code, seen=seen, left=left, stderr=c.stderr, data=data)


def test_every_listener_is_on_loopback(locust_cluster, fault):
    seen, c = locust_cluster.seen, locust_cluster
    kinds = {"postgres": lambda n, w: n == "postgres", "ferretdb": lambda n, w: n == "ferretdb",
             "toxiproxy": lambda n, w: n == "toxiproxy-server",
             "app (uvicorn)": lambda n, w: "uvicorn" in w, "locust master": lambda n, w: "locust" in w}
    found = {k: sorted({f"{ip}:{port}" for n, w, ip, port in seen if pred(n, w)}) for k, pred in kinds.items()}
    exposed = sorted(f"{n} {ip}:{port} ({w})" for n, w, ip, port in seen if ip not in LOOPBACK)
    assert not exposed, f"listening beyond loopback: {exposed}"
    missing = [k for k, v in found.items() if not v]
    assert not missing, f"never saw a listener of {missing} (seen: {sorted(seen)})\n{c.stderr[-2000:]}"
    assert len(found["toxiproxy"]) >= 2, "Toxiproxy's API and at least one proxy listener"
    assert not c.left, f"processes left behind: {c.left}"
    fault(10, exit_code=c.code, listeners=found, exposed=exposed)


def test_locust_master_and_two_workers_on_loopback(locust_cluster):
    """The path a user takes when one Locust process is not enough: a master and two workers,
    bound to loopback (the listener test above), drive the app and the master's CSVs aggregate
    both workers."""
    assert locust_cluster.code == 0, locust_cluster.stderr[-3000:]
    run = finished_run(locust_cluster.data, locust_cluster.stderr)
    assert run.experiments["fastapi_locust"]["status"] == "ok", run.experiments["fastapi_locust"]
    runs = run.table("fastapi_locust", "runs", ok_only=False)
    assert list(runs["locust_workers"]) == [2] and (runs["status"] == "ok").all(), runs["error"].tolist()
    samples = run.table("fastapi_locust", "samples", ok_only=False)
    assert samples["pid"].nunique() == 2          # each worker process wrote its own requests
    stats_ = run.table("fastapi_locust", "locust_stats", ok_only=False)
    agg = stats_[stats_["name"] == "Aggregated"]
    assert int(agg["request_count"].iloc[0]) == len(samples)
    assert run.table("fastapi_locust", "locust_history", ok_only=False)["user_count"].max() == 4


# ----------------------------------------------------------------------------------------------
# 11: a `harness verify` workload that would write to the user's server (issue 31). A scratch
# database of the test's own, on the session's PostgreSQL, stands for the user's: a table of
# customers and an ordinary SQL function with a side effect (an UPDATE), as real schemas have.

SHOP_CUSTOMERS = 200


@contextmanager
def shop_database(stack, suffix: str = ""):
    """A scratch database `shop_<pid><suffix>` with `customers(cid, tier)` and `bump(c)`, which
    writes; yields its DSN, dropped after."""
    import psycopg

    name = f"shop_{os.getpid()}{suffix}"
    admin = stack.postgres_dsn
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name}")
    dsn = admin.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE customers (cid integer PRIMARY KEY, tier integer NOT NULL)")
        c.execute("INSERT INTO customers SELECT g, 2 FROM generate_series(1, %s) g", (SHOP_CUSTOMERS,))
        c.execute("CREATE FUNCTION bump(c integer) RETURNS integer LANGUAGE sql AS "
                  "'UPDATE customers SET tier = tier + 100 WHERE cid = c RETURNING tier'")
    try:
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def shop(stack):
    with shop_database(stack) as dsn:
        yield dsn


def shop_state(dsn: str) -> tuple[int, int]:
    """(rows, sum of tiers): what any write of the tests below would change."""
    import psycopg

    with psycopg.connect(dsn) as c:
        return c.execute("SELECT count(*), sum(tier) FROM customers").fetchone()


WRITING_WORKLOADS = {
    # the bypass issue 31 found: the first turns the pooled session read-write, the second writes
    "session setting, then a writing function": (
        ["SELECT set_config('default_transaction_read_only', 'off', false)", "SELECT bump(:cid)"],
        "postgres.request[0]: calls set_config(), which changes a setting of the session"),
    "ends other sessions": (["SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> :cid"],
                            "postgres.request[0]: calls pg_terminate_backend(), which ends another session"),
    "a writing function": (["SELECT tier FROM customers WHERE cid = :cid", "SELECT bump(:cid)"],
                           "postgres.request[1] 'SELECT bump(:cid)': refused in the read-only pre-flight "
                           "(psycopg): ReadOnlySqlTransaction: cannot execute UPDATE in a read-only transaction"),
    "a write hidden in a CTE": (
        ["WITH d AS (DELETE FROM customers WHERE cid = :cid RETURNING cid) SELECT count(*) FROM d"],
        "refused in the read-only pre-flight (psycopg): ReadOnlySqlTransaction: cannot execute SELECT in a "
        "read-only transaction"),
    "a missing table": (["SELECT tier FROM no_such_table WHERE cid = :cid"],
                        "refused in the read-only pre-flight (psycopg): UndefinedTable"),
}


@pytest.fixture(scope="module")
def refused_workloads(stack, tmp_path_factory) -> dict[str, SimpleNamespace]:
    """`harness verify` of each WRITING_WORKLOADS case through the command line, each on a shop
    database of its own, two at a time (conftest `two_at_a_time`: each is refused before any repeat
    starts; about 15 s one after another). Per case: the command's outcome, its data
    directory, the shop's state before and after, and the seconds the command took."""
    root = tmp_path_factory.mktemp("refused")

    def one(k: int, case: str, dsn: str) -> SimpleNamespace:
        request, _ = WRITING_WORKLOADS[case]
        statements = ", ".join(json.dumps(sql) for sql in request)
        path = root / f"w{k}.toml"
        path.write_text(f'target = "{dsn}"\n[postgres]\nrequest = [{statements}]\n'
                        f'params.cid = {{ int = [1, {SHOP_CUSTOMERS}] }}\n[load]\nclients = 4\npools = [2]\n'
                        'duration_s = 0.5\nwarmup_s = 0.1\nrepeats = 2\n')
        data = root / f"data{k}"
        before = shop_state(dsn)
        t0 = time.monotonic()
        out = harness("verify", str(path), "--data-dir", str(data), "--no-report", env=base_env(data), timeout=120)
        return SimpleNamespace(out=out, data=data, before=before, after=shop_state(dsn),
                               seconds=round(time.monotonic() - t0, 1))

    cases = sorted(WRITING_WORKLOADS)
    with ExitStack() as shops:
        dsns = [shops.enter_context(shop_database(stack, f"_{k}")) for k in range(len(cases))]
        return dict(zip(cases, two_at_a_time(one, range(len(cases)), cases, dsns)))


@pytest.mark.parametrize("case", sorted(WRITING_WORKLOADS))
def test_verify_stops_a_workload_that_would_write_in_one_line(case, refused_workloads, fault):
    """Each is refused before any repeat starts, by name (guard 1) or by the server in the pre-flight
    (guard 3): one line, exit 2, no run written, not one row of the shop changed."""
    _, expected = WRITING_WORKLOADS[case]
    got = refused_workloads[case]
    out = got.out
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in out.stderr, out.stderr
    runs = got.data / "runs"
    assert not runs.exists() or not any(runs.iterdir()), f"a refused workload wrote {list(runs.iterdir())}"
    assert got.after == got.before
    fault(11, **{case: lines[0][:300], "rows_and_tier_sum_before_after": [got.before, got.after],
                 "seconds": got.seconds})


@pytest.mark.parametrize("model", ["threads_psycopg", "asyncio_psycopg", "uvloop_asyncpg"])
def test_verify_requests_stay_read_only_when_the_session_default_is_turned_off(model, shop, fault):
    """Guard 2 alone, with guards 1 and 3 stepped around (the client called directly): the request
    turns its session's default read-write, and calls the writing function only in a transaction
    that is not read-only, so that a request commits (a failed one would roll its set_config back).
    With only the session default, as before issue 31, every request after the first on a pooled
    connection was read-write and wrote (33,202 updates in the issue's run). Every transaction now
    starts READ ONLY, whatever the session's default: the requests succeed and no row changes."""
    from harness.experiments.postgres import workload as pg_workload
    from harness.experiments.verify.postgres import statements

    request = ["SELECT set_config('default_transaction_read_only', 'off', false)",
               "SELECT CASE WHEN current_setting('transaction_read_only') = 'on' THEN 0 ELSE bump(:cid) END"]
    spec = pg_workload.VariantSpec(
        variant=model, model=model, dsn=shop, pool=2, clients=4, slow_ms=0.0, warmup_s=0.1, duration_s=0.3,
        rows=SHOP_CUSTOMERS, seed=1, calibration_requests=2, postmaster_pid=None,
        statements=statements(request), params={"cid": {"int": [1, SHOP_CUSTOMERS]}}, read_only=True,
        regime="workload")
    before = shop_state(shop)
    samples = pg_workload.run_variant(spec)["samples"]
    ok = sum(bool(x) for x in samples["ok"])
    assert ok > 0, samples.get("error", [])[:3]
    assert shop_state(shop) == before
    fault(11, **{f"{model}: set_config then bump() when read-write, called directly": f"{ok} requests ok",
                 "rows_and_tier_sum_before_after": [before, shop_state(shop)]})


def test_verify_refuses_a_user_request_outside_a_read_only_transaction():
    from harness.experiments.postgres import workload as pg_workload

    with pytest.raises(ValueError, match="read-only transactions"):
        pg_workload.VariantSpec(variant="v", model="threads_psycopg", dsn="", pool=1, clients=1, slow_ms=0.0,
                                warmup_s=0.0, duration_s=1.0, rows=1, seed=1, calibration_requests=1,
                                postmaster_pid=None, statements=({"psycopg": "SELECT 1", "asyncpg": "SELECT 1",
                                                                  "names": []},), params={})
