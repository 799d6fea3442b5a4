"""The network path through Toxiproxy, against the real servers the harness starts: the proxy's
lifecycle, the added delay as measured, the helpers the fault tests use, and loopback-only listeners."""

import re
import socket
import time
from contextlib import closing
from urllib.parse import urlsplit

import httpx
import psutil
import psycopg
import pymongo
import pytest
from conftest import REPO_ROOT
from pymongo.errors import PyMongoError

from harness.core import environment, network, servers
from harness.core.errors import HarnessError
from harness.core.servers import Server, ServerStack
from harness.experiments import registry

ROLES = ("mongodb", "postgres")


def _descendants() -> dict[int, str]:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            out[p.pid] = p.name()
        except psutil.NoSuchProcess:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _accepts(hostport: str) -> bool:
    host, _, port = hostport.rpartition(":")
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def _pinned_version() -> str:
    script = (REPO_ROOT / "scripts/install-toxiproxy").read_text()
    return re.search(r'TOXIPROXY_VERSION:-(v[0-9.]+)', script).group(1)


def _mongo_ping_ms(uri: str) -> float:
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as c:
        c.admin.command("ping")                        # connection set-up, not timed
        t0 = time.perf_counter()
        c.admin.command("ping")
        return (time.perf_counter() - t0) * 1000


def _pg_select_ms(dsn: str) -> float:
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        conn.execute("SELECT 1")
        t0 = time.perf_counter()
        conn.execute("SELECT 1").fetchone()
        return (time.perf_counter() - t0) * 1000


# ---------------------------------------------------------------------------------- lifecycle


def test_toxiproxy_up_identified_down_with_nothing_left_behind():
    before = set(_descendants())
    with servers.provision((servers.PROXY,)) as s:
        tp = s.toxiproxy
        started = set(_descendants()) - before
        assert tp is not None and tp.source == "local" and started == set(tp.pids)
        api = urlsplit(tp.uri)
        assert api.hostname == "127.0.0.1"
        assert httpx.get(f"{tp.uri}/proxies", timeout=5).json() == {}
        # The binary says "git"; the module version the install script built is what is recorded.
        ident = environment.identify_servers(s)["toxiproxy"]
        assert ident["version"] == tp.version == _pinned_version()
        assert ident["reported_version"] == "git"
        assert s.public()["toxiproxy"]["api"] == tp.uri
        state_dir = s.state_dir
    assert not any(_alive(p) for p in started), "Toxiproxy left running"
    assert not _accepts(api.netloc), "Toxiproxy's API port still open"
    assert not any(n.startswith("toxiproxy") for n in _descendants().values())
    assert state_dir and not (REPO_ROOT / state_dir).exists()


def test_route_adds_the_delay_and_reports_what_it_measured(stack):
    rtt = 20
    before = set(_descendants())
    with network.route(stack, ROLES, via_proxy=True, rtt_ms=rtt, jitter_ms=0) as r:
        rec = r.record
        assert rec["via_proxy"] is True and rec["rtt_ms"] == rtt and rec["jitter_ms"] == 0
        assert rec["toxiproxy"]["version"] == _pinned_version()
        for role in ROLES:
            m = rec[role]
            assert m["round_trips"] == network.ROUND_TRIPS
            assert rtt / 2 <= m["added_ms"] <= rtt * 2, m
            assert m["added_ms"] == pytest.approx(m["proxy_median_ms"] - m["direct_median_ms"], abs=1e-3)
            assert m["toxics"] == [{"type": "latency", "stream": "downstream",
                                    "attributes": {"latency": rtt, "jitter": 0}}]
            assert getattr(r.stack, role).uri != getattr(stack, role).uri
            assert r.listen[role].startswith("127.0.0.1:")
        # The route's URIs really go through the proxy: one round trip pays the delay, a direct one not.
        assert rtt / 2 <= _mongo_ping_ms(r.stack.mongodb_uri) <= rtt * 4
        assert rtt / 2 <= _pg_select_ms(r.stack.postgres_dsn) <= rtt * 4
        assert _pg_select_ms(stack.postgres_dsn) < rtt / 2
        listeners = dict(r.listen)
        # (PostgreSQL's backends for these connections are new descendants too: not counted.)
        started = {pid for pid, name in _descendants().items()
                   if pid not in before and name.startswith("toxiproxy")}
    assert started, "the route started no Toxiproxy although the stack had none"
    assert not any(_alive(p) for p in started), "the route's Toxiproxy was left running"
    assert not any(_accepts(hp) for hp in listeners.values()), "a proxy listener is still open"


def test_without_the_proxy_the_stack_is_unchanged(stack):
    with network.route(stack, ROLES, via_proxy=False, rtt_ms=0, jitter_ms=0) as r:
        assert r.stack is stack
        assert r.record == {"via_proxy": False, "rtt_ms": 0.0, "jitter_ms": 0.0}
        with pytest.raises(HarnessError, match="via_proxy is off"):
            r.disable("postgres")


def test_proxy_with_no_toxic_then_cut_and_restored(stack):
    with servers.provision((servers.PROXY,)) as proxied:
        shared = ServerStack(mongodb=stack.mongodb, postgres=stack.postgres, toxiproxy=proxied.toxiproxy)
        with network.route(shared, ROLES, via_proxy=True, rtt_ms=0) as r:
            for role in ROLES:
                assert r.toxics(role) == [] and r.record[role]["toxics"] == []
                assert abs(r.record[role]["added_ms"]) < 5   # the proxy's own cost, no delay
            dsn, uri = r.stack.postgres_dsn, r.stack.mongodb_uri
            with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn, \
                    pymongo.MongoClient(uri, serverSelectionTimeoutMS=1500) as client:
                conn.execute("SELECT 1")
                client.admin.command("ping")
                r.disable("postgres")
                r.disable("mongodb")
                with pytest.raises(psycopg.OperationalError):   # an open connection is cut
                    conn.execute("SELECT 1")
                with pytest.raises(psycopg.OperationalError):   # and no new one gets through
                    psycopg.connect(dsn, connect_timeout=2)
                t0 = time.monotonic()
                with pytest.raises(PyMongoError):
                    client.admin.command("ping")
                assert time.monotonic() - t0 < 10
                r.enable("postgres")
                r.enable("mongodb")
                with psycopg.connect(dsn, connect_timeout=5) as again:
                    assert again.execute("SELECT 1").fetchone() == (1,)
                with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as again:
                    assert again.admin.command("ping")["ok"] == 1
            names = set(r.proxies.values())
        # The route removes its proxies from a Toxiproxy it did not start, and leaves that one running.
        assert names and not names & set(network.Toxiproxy(proxied.toxiproxy.uri).proxies())
        assert all(_alive(p) for p in proxied.toxiproxy.pids)


def test_reset_peer_and_timeout_toxics_fail_operations(stack):
    with network.route(stack, ROLES, via_proxy=True, rtt_ms=0) as r:
        with psycopg.connect(r.stack.postgres_dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
            name = r.add_toxic("postgres", "reset_peer", {"timeout": 0})
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        r.remove_toxic("postgres", name)
        assert r.toxics("postgres") == []
        assert _pg_select_ms(r.stack.postgres_dsn) < 1000

        # A server that keeps its socket open and stops answering: the client's own time-out fires.
        with pymongo.MongoClient(r.stack.mongodb_uri, serverSelectionTimeoutMS=2000,
                                 socketTimeoutMS=500) as client:
            client.admin.command("ping")
            name = r.add_toxic("mongodb", "timeout", {"timeout": 0})
            t0 = time.monotonic()
            with pytest.raises(PyMongoError):
                client.admin.command("ping")
            assert 0.4 < time.monotonic() - t0 < 10
            r.remove_toxic("mongodb", name)
        with pytest.raises(HarnessError, match="no proxy for 'nosuch'"):
            r.add_toxic("nosuch", "timeout", {"timeout": 0})
        with pytest.raises(HarnessError, match="Toxiproxy POST"):
            r.add_toxic("postgres", "no_such_toxic", {})


# ------------------------------------------------------------------------------- exposure (row 10)


def test_every_listener_the_harness_starts_binds_loopback_only(monkeypatch):
    monkeypatch.delenv("STUDY_MONGODB_URI", raising=False)
    monkeypatch.delenv("STUDY_POSTGRES_DSN", raising=False)
    monkeypatch.setenv("STUDY_SERVER_SOURCE", "local")
    monkeypatch.setenv("STUDY_STATE_DIR", "/nonexistent-harness-state")  # never reuse `servers up`
    before = set(_descendants())
    with servers.provision(servers.SERVERS) as s, \
            network.route(s, ROLES, via_proxy=True, rtt_ms=1) as r:
        ours = {pid: name for pid, name in _descendants().items() if pid not in before}
        listening = [c for c in psutil.net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN and c.pid in ours]
        names = {ours[c.pid] for c in listening}
        ports = {c.laddr.port for c in listening}
        assert {"postgres", "toxiproxy-server"} <= names, names
        assert s.mongodb.implementation != "ferretdb" or "ferretdb" in names, names
        # Toxiproxy's API and each proxy listener are among the sockets checked.
        assert urlsplit(s.toxiproxy.uri).port in ports
        assert {int(hp.rpartition(":")[2]) for hp in r.listen.values()} <= ports
        exposed = [(ours[c.pid], c.laddr) for c in listening if c.laddr.ip not in ("127.0.0.1", "::1")]
        assert exposed == [], f"listening beyond loopback: {exposed}"


# ------------------------------------------------------------------------ settings (no servers)


@pytest.mark.parametrize("via_proxy, rtt, jitter, message", [
    (False, 5, 0, "rtt_ms=5 needs via_proxy=on"),
    (False, 0, 2, "jitter_ms=2 needs via_proxy=on"),
    (True, -1, 0, "rtt_ms must be zero or more"),
    (True, 5, -1, "jitter_ms must be zero or more"),
    (True, 2.5, 0, "rtt_ms must be a whole number"),
    (True, 5, 6, "jitter_ms .6. must not exceed rtt_ms"),
])
def test_bad_network_settings_are_refused_naming_the_parameter(via_proxy, rtt, jitter, message):
    with pytest.raises(HarnessError, match=message):
        network.check_setting(via_proxy, rtt, jitter)
    with pytest.raises(HarnessError, match=message):   # before anything starts
        with network.route(ServerStack(), ROLES, via_proxy=via_proxy, rtt_ms=rtt, jitter_ms=jitter):
            pass


def test_every_experiment_takes_the_network_parameters():
    for exp in registry.all_experiments().values():
        try:
            p = exp.params("smoke", {"via_proxy": "on", "rtt_ms": "25", "jitter_ms": "5"})
        except HarnessError as e:   # an experiment that sets the round trip itself may refuse, naming it
            assert "via_proxy" in str(e) or "rtt_ms" in str(e), (exp.name, str(e))
        else:
            assert (p.via_proxy, p.rtt_ms, p.jitter_ms) == (True, 25.0, 5.0)
        with pytest.raises(HarnessError, match="rtt_ms"):
            exp.params("smoke", {"via_proxy": "off", "rtt_ms": "25", "jitter_ms": "0"})
        with pytest.raises(HarnessError, match="rtt_ms"):
            exp.params("smoke", {"via_proxy": "on", "rtt_ms": "-1"})
    network.check_setting(True, 0, 0)    # the fault tests' setting: the proxy, no delay
    network.check_setting(False, 0, 0)


def test_uris_are_pointed_at_the_listener_with_credentials_kept():
    via = network.mongodb_via("mongodb://u:s3cret@db.example:27018/study?authSource=admin&replicaSet=rs0",
                              "127.0.0.1:4000")
    assert via == "mongodb://u:s3cret@127.0.0.1:4000/study?authSource=admin&directConnection=true"
    assert network.mongodb_endpoint("mongodb://u:p@db.example/") == ("db.example", 27017)
    assert network.postgres_via("postgresql://postgres:pw@10.0.0.5:5433/study?sslmode=disable",
                                "127.0.0.1:4001") == "postgresql://postgres:pw@127.0.0.1:4001/study?sslmode=disable"
    kv = network.postgres_via("host=10.0.0.5 port=5433 user=postgres password=pw dbname=study",
                              "127.0.0.1:4001")
    assert psycopg.conninfo.conninfo_to_dict(kv) == {"host": "127.0.0.1", "port": "4001", "user": "postgres",
                                                     "password": "pw", "dbname": "study"}
    assert network.postgres_endpoint("postgresql://u@[::1]:5434/x") == ("::1", 5434)
    for bad, fn in (("mongodb+srv://u:pw@cluster.example/", network.mongodb_endpoint),
                    ("mongodb://a:1,b:2/", network.mongodb_endpoint),
                    ("host=/var/run/postgresql dbname=x password=pw", network.postgres_endpoint)):
        with pytest.raises(HarnessError, match="via_proxy needs") as e:
            fn(bad)
        assert "pw" not in str(e.value)


def test_a_stack_with_a_proxy_round_trips_through_json():
    s = ServerStack(toxiproxy=Server("toxiproxy", "http://127.0.0.1:1", "local", "toxiproxy", pids=[1],
                                     version="v2.5.0"))
    assert ServerStack.from_json(s.to_json()).toxiproxy == s.toxiproxy
    assert ServerStack.from_json({"mongodb": None, "postgres": None}).toxiproxy is None  # older state files
