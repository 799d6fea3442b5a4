"""Provisioning against the real local servers: up, identity, down with nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pymongo
import pytest
from conftest import REPO_ROOT, harness, started_run

from harness.core import environment, servers
from harness.core.errors import HarnessError


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_provision_starts_real_servers_and_stops_everything():
    before = _descendants()
    with servers.provision(("mongodb", "postgres")) as stack:
        started = _descendants() - before
        assert started, "provisioning started no process"
        with pymongo.MongoClient(stack.mongodb_uri, serverSelectionTimeoutMS=5000) as c:
            assert c.admin.command("ping")["ok"] == 1
        with psycopg.connect(stack.postgres_dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert "127.0.0.1" in stack.mongodb_uri and "127.0.0.1" in stack.postgres_dsn
        state_dir = stack.state_dir
    alive = [pid for pid in started if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"processes left behind: {alive}"
    assert state_dir is None or not os.path.exists(state_dir)


def test_servers_stop_when_the_block_raises():
    before = _descendants()
    with pytest.raises(RuntimeError):
        with servers.provision(("postgres",)):
            started = _descendants() - before
            raise RuntimeError("boom")
    assert started and not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                               for p in started)


def test_server_identity_names_ferretdb_as_ferretdb(stack):
    ident = environment.identify_servers(stack)
    mongo, pg = ident["mongodb"], ident["postgres"]
    assert pg["product"] == "PostgreSQL" and pg["version"]
    assert int(pg["settings"]["max_connections"]) >= 250
    if stack.mongodb.implementation == "ferretdb":
        assert mongo["product"] == "FerretDB"
        assert mongo["label"].startswith("FerretDB ") and "MongoDB " not in mongo["label"]
    else:
        assert mongo["product"] == "MongoDB"


def test_bad_uri_fails_fast_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("STUDY_MONGODB_URI", "not-a-uri://x")
    t0 = time.monotonic()
    with pytest.raises(HarnessError, match="STUDY_MONGODB_URI is not a valid MongoDB URI"):
        with servers.provision(("mongodb",)):
            pass
    monkeypatch.setenv("STUDY_MONGODB_URI", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500")
    with pytest.raises(HarnessError, match="no MongoDB server answered"):
        with servers.provision(("mongodb",)):
            pass
    monkeypatch.delenv("STUDY_MONGODB_URI")
    monkeypatch.setenv("STUDY_POSTGRES_DSN", "postgresql://postgres:hunter2@127.0.0.1:1/x")
    with pytest.raises(HarnessError, match="no PostgreSQL server answered") as e:
        with servers.provision(("postgres",)):
            pass
    assert "hunter2" not in str(e.value)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("var,value", [("STUDY_MONGODB_URI", "mongodb://127.0.0.1:notaport/"),
                                       ("STUDY_POSTGRES_DSN", "nonsense")])
def test_study_in_process_refuses_a_bad_uri_before_the_run_exists(var, value, monkeypatch, tmp_path):
    """`study.run` called as a library (not through the CLI) checks the URIs before it creates a run."""
    from harness.running import study

    monkeypatch.setenv(var, value)
    with pytest.raises(HarnessError, match=var):
        study.run(["mongo_pool", "pg_models"], "smoke", None, None, tmp_path)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_external_uri_is_used_as_given(stack, monkeypatch):
    monkeypatch.setenv("STUDY_POSTGRES_DSN", stack.postgres_dsn)
    before = {p.pid for p in psutil.Process().children()}
    with servers.provision(("postgres",)) as s:
        assert s.postgres.source == "env" and s.postgres.uri == stack.postgres_dsn
        assert {p.pid for p in psutil.Process().children()} - before == set()  # started nothing


def _sigterm_run_on_the_stack(env: dict, data: Path) -> None:
    """A run on a `servers up` stack starts no child for a while: SIGTERM there must still leave
    it `interrupted` (its handler used to come with the first child, so the run died `running`)."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "pg_models", "--profile", "quick"],
                            cwd=REPO_ROOT, env=dict(env, STUDY_DATA_DIR=str(data)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    incomplete = started_run(data, proc)
    assert incomplete, "the run never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert json.loads((incomplete / "manifest.json").read_text())["status"] == "interrupted", err


def test_servers_up_status_down_cli(tmp_path):
    env = dict(os.environ, STUDY_STATE_DIR=str(tmp_path / "state"), STUDY_SERVER_SOURCE="local")
    env.pop("STUDY_MONGODB_URI", None)
    env.pop("STUDY_POSTGRES_DSN", None)

    up = harness("servers", "up", env=env)
    assert up.returncode == 0, up.stderr
    try:
        status = harness("servers", "status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["running"] and info["mongodb_uri"].startswith("mongodb://127.0.0.1:")
        assert info["postgres_dsn"].startswith("postgresql://")
        with pymongo.MongoClient(info["mongodb_uri"], serverSelectionTimeoutMS=5000) as c:
            assert c.admin.command("ping")["ok"] == 1
        # Toxiproxy is the third server: its API address and the module version built.
        proxy = info["toxiproxy"]
        assert proxy["api"].startswith("http://127.0.0.1:") and proxy["version"].startswith("v2.")
        assert httpx.get(f"{proxy['api']}/version", timeout=5).status_code == 200
        owned = json.loads((tmp_path / "state" / "servers.json").read_text())["owned"]
        pids = [pid for _, pid in owned]
        assert {name for name, _ in owned} >= {"postgres", "toxiproxy"}
        assert pids and all(psutil.pid_exists(p) for p in pids)
        _sigterm_run_on_the_stack(env, tmp_path / "data")
        assert all(psutil.pid_exists(p) for p in pids), "a run stopped the servers `servers up` owns"
    finally:
        down = harness("servers", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert not any(psutil.pid_exists(p) for p in pids)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{proxy['api']}/version", timeout=5)
    assert harness("servers", "status", "--json", env=env).returncode == 1


def test_missing_binaries_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("STUDY_PG_BINDIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(servers.glob, "glob", lambda pattern: [])
    with pytest.raises(HarnessError, match="apt-get install postgresql"):
        servers.postgres_bindir()


def test_the_environment_is_locked_and_its_lock_recorded():
    import hashlib
    import re
    import tomllib

    lock = (REPO_ROOT / "requirements.lock").read_text()
    pinned = {re.split(r"[=;\s]", line, maxsplit=1)[0].lower().replace("_", "-")
              for line in lock.splitlines() if "==" in line and not line.startswith((" ", "#"))}
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    names = {re.match(r"[A-Za-z0-9_.\-]+", d).group(0).lower().replace("_", "-") for d in wanted}
    assert names - pinned == set(), "pyproject.toml requirements missing from requirements.lock: run `make lock`"
    assert "make lock" in lock.splitlines()[1]          # the one command, in the header
    assert "-r requirements.lock" in (REPO_ROOT / "environment.yml").read_text()
    assert environment.collect()["lock_sha256"] == hashlib.sha256(lock.encode()).hexdigest()


def test_database_pids_finds_local_servers_given_by_uri(stack):
    """The database's CPU is measured for local servers however they were given: the harness's own
    stack and the same servers passed by URI name the same process trees."""
    import copy

    own = servers.database_pids(stack)
    assert own and all(psutil.pid_exists(p) for p in own)
    by_uri = copy.deepcopy(stack)
    for s in (by_uri.mongodb, by_uri.postgres):
        s.source, s.pids = "env", []
    by_uri.mongodb.backend_uri = None
    assert servers.database_pids(by_uri) == own
    elsewhere = copy.deepcopy(by_uri)
    elsewhere.mongodb.uri = "mongodb://db.example.invalid:27017/"
    elsewhere.postgres.uri = "postgresql://u@db.example.invalid:5432/x"
    assert servers.database_pids(elsewhere) == []
