"""Placement: the CPU affinity recorded is the affinity set, read back from the kernel (/proc), on
the real servers the harness starts, including PostgreSQL backends forked after the pinning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from harness.core import placement, servers
from harness.core.config import REPO_ROOT
from harness.core.errors import HarnessError

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="split needs two cores")


@pytest.fixture(scope="module")
def pg_stack():
    with servers.provision(("postgres",)) as s:
        yield s


def _backend_pid(dsn: str) -> tuple[psycopg.Connection, int]:
    conn = psycopg.connect(dsn, autocommit=True)
    return conn, conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_split_pins_every_server_process_and_later_backends(pg_stack):
    cpus = placement.allowed_cpus()
    server_cpus, client_cpus = placement.split_cpus(cpus)
    assert server_cpus and client_cpus and not set(server_cpus) & set(client_cpus)
    try:
        rec = placement.apply(pg_stack, "split", cpus)
        assert rec["server_cpus"] == server_cpus and rec["client_cpus"] == client_cpus
        assert rec["server_affinity"], "no server process was pinned"
        assert str(pg_stack.postgres.pids[0]) in rec["server_affinity"]
        for pid, recorded in rec["server_affinity"].items():
            assert recorded == server_cpus
            # the kernel's own account agrees with what was recorded
            if os.path.exists(f"/proc/{pid}"):
                assert placement.proc_status_affinity(int(pid)) == recorded
        conn, backend = _backend_pid(pg_stack.postgres_dsn)  # forked after the pinning: inherits it
        with conn:
            assert placement.proc_status_affinity(backend) == server_cpus
    finally:
        rec = placement.apply(pg_stack, "shared", cpus)
    assert all(a == cpus for a in rec["server_affinity"].values())
    conn, backend = _backend_pid(pg_stack.postgres_dsn)
    with conn:
        assert placement.proc_status_affinity(backend) == cpus


def test_a_client_pins_itself_before_its_threads_start():
    cpus = placement.allowed_cpus()
    _, client_cpus = placement.split_cpus(cpus)
    code = ("import json, os, threading; from harness.core import placement; "
            f"got = placement.set_client({client_cpus!r}); "
            "t = threading.Thread(target=lambda: None); t.start(); t.join(); "
            "print(json.dumps([got, placement.proc_status_affinity(os.getpid())]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT)
    got, proc = json.loads(out.stdout)
    assert got == client_cpus and proc == client_cpus


def test_shared_for_a_run_changes_nothing_and_records_it(pg_stack):
    before = placement.servers_affinity(pg_stack)
    with placement.applied(pg_stack, "shared") as rec:
        assert rec["placement"] == "shared"
        assert rec["server_affinity"] == before
        assert placement.allowed_cpus() == rec["cpus"]


def test_split_for_a_run_pins_this_process_and_restores_it(pg_stack):
    cpus = placement.allowed_cpus()
    with placement.applied(pg_stack, "split") as rec:
        assert placement.allowed_cpus() == rec["client_cpus"] == rec["study_process_affinity"]
        assert placement.proc_status_affinity(os.getpid()) == rec["client_cpus"]
        assert placement.proc_status_affinity(pg_stack.postgres.pids[0]) == rec["server_cpus"]
    assert placement.allowed_cpus() == cpus
    assert placement.proc_status_affinity(pg_stack.postgres.pids[0]) == cpus


def test_a_part_of_a_run_gives_the_client_cores_of_its_own_and_restores_both(pg_stack):
    """pg_models' split cells: inside, this process (and what it starts) and the servers (and the
    backends forked meanwhile) on disjoint halves; after, both as they were, that backend too."""
    cpus = placement.allowed_cpus()
    postmaster = pg_stack.postgres.pids[0]
    before = placement.proc_status_affinity(postmaster)
    with placement.client_alone(pg_stack) as rec:
        assert placement.proc_status_affinity(os.getpid()) == rec["client_cpus"] == rec["client_affinity"]
        assert placement.proc_status_affinity(postmaster) == rec["server_cpus"]
        assert not set(rec["client_cpus"]) & set(rec["server_cpus"])
        conn, backend = _backend_pid(pg_stack.postgres_dsn)
        assert placement.proc_status_affinity(backend) == rec["server_cpus"]
    with conn:
        assert placement.proc_status_affinity(backend) == before
    assert placement.allowed_cpus() == cpus and placement.proc_status_affinity(postmaster) == before
    remote = servers.ServerStack(postgres=servers.Server("postgres", "postgresql://u@10.255.0.1:5432/x", "env",
                                                         "unknown"))
    with pytest.raises(HarnessError, match="not processes on this machine"):
        with placement.client_alone(remote):
            pass
    assert placement.allowed_cpus() == cpus


def test_a_server_given_by_uri_is_found_by_its_port(pg_stack):
    external = servers.ServerStack(postgres=servers.Server("postgres", pg_stack.postgres_dsn, "env", "unknown"))
    assert placement.server_pids(external) == [pg_stack.postgres.pids[0]]


def test_bad_placement_and_remote_servers_are_clear_errors():
    with pytest.raises(HarnessError, match="--placement sideways"):
        placement.check("sideways")
    remote = servers.ServerStack(postgres=servers.Server("postgres", "postgresql://u@10.255.0.1:5432/x", "env",
                                                         "unknown"))
    with pytest.raises(HarnessError, match="not processes on this machine"):
        placement.apply(remote, "split")
