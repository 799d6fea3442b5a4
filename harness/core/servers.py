"""Database servers for the study: found, started, identified and stopped.

Sources, per server, in this order (`STUDY_SERVER_SOURCE` = auto | docker | local narrows it):
1. explicit targets: `STUDY_MONGODB_URI`, `STUDY_POSTGRES_DSN`;
2. a stack left running by `python -m harness servers up` (its state file);
3. a reachable Docker engine: testcontainers with the seeds' images, mongo:8.2 and postgres:17;
4. local binaries: a throw-away PostgreSQL cluster from the Debian binaries, and for MongoDB either
   `mongod` from PATH or FerretDB (built by scripts/install-ferretdb) on that PostgreSQL cluster.

A third, optional server, `toxiproxy` (Shopify's Toxiproxy, built by scripts/install-toxiproxy), is a
TCP proxy that `harness.core.network` puts between clients and the databases to add a network delay or a
fault. It is always local (its proxies must reach the servers from this machine), or reused from
`servers up`.

Every server listens on a free loopback port. `provision()` is a context manager: whatever it started
is stopped when the block exits, however it exits.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import config, processes
from .config import REPO_ROOT
from .errors import HarnessError
from .measure import LOOPBACK, find_postmaster
from .redact import redact

MONGO_IMAGE = "mongo:8.2"
POSTGRES_IMAGE = "postgres:17"
STUDY_DB = "study"            # MongoDB database and PostgreSQL database holding the datasets
FERRETDB_PG_DB = "ferretdb"   # PostgreSQL database FerretDB keeps its collections in
CLUSTER_MARKER = "HARNESS_STUDY_CLUSTER"   # a file in the data directory of every cluster local_postgres makes
FERRETDB_PG_POOL = 50         # FerretDB's own pool to PostgreSQL (its default, made explicit)
CONNECT_TIMEOUT_S = 5
START_TIMEOUT_S = 60

# Benchmark tuning for the throw-away cluster: durability off (nothing here must survive a crash),
# enough connections for 200 clients plus pools plus FerretDB, and buffers that hold the datasets.
POSTGRES_SETTINGS = {
    "max_connections": "500",
    "shared_buffers": "1GB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "dynamic_shared_memory_type": "mmap",
    "log_min_messages": "warning",
    "log_connections": "off",
}
ROLES = ("mongodb", "postgres")   # database roles an experiment can need
PROXY = "toxiproxy"
SERVERS = (*ROLES, PROXY)        # what `provision()` can start


@dataclass
class Server:
    role: str                   # "mongodb" | "postgres" | "toxiproxy"
    uri: str                    # connection string (may hold credentials: redact before printing);
                                # Toxiproxy: its HTTP API, http://127.0.0.1:PORT
    source: str                 # "env" | "servers-up" | "docker" | "local"
    implementation: str         # "mongod" | "ferretdb" | "postgres" | "toxiproxy" | "unknown"
    log_path: str | None = None
    pids: list[int] = field(default_factory=list)
    backend_uri: str | None = None  # FerretDB: the PostgreSQL cluster it stores its data in
    version: str | None = None      # Toxiproxy: the Go module version built (the binary says "git")

    def public(self) -> dict:
        d = asdict(self)
        d["uri"] = redact(self.uri)
        d["backend_uri"] = redact(self.backend_uri) if self.backend_uri else None
        return d


@dataclass
class ServerStack:
    mongodb: Server | None = None
    postgres: Server | None = None
    toxiproxy: Server | None = None   # the network path's proxy (harness.core.network), when provisioned
    state_dir: str | None = None
    # Every process this stack started, in start order: [name, pid]. A FerretDB stack also owns
    # the PostgreSQL cluster FerretDB stores its data in.
    owned: list[list] = field(default_factory=list)

    @property
    def mongodb_uri(self) -> str:
        if self.mongodb is None:
            raise HarnessError("this run has no MongoDB server (it was not requested)")
        return self.mongodb.uri

    @property
    def postgres_dsn(self) -> str:
        if self.postgres is None:
            raise HarnessError("this run has no PostgreSQL server (it was not requested)")
        return self.postgres.uri

    def to_json(self) -> dict:
        """Full form, with credentials: handed to worker processes, never written to a manifest."""
        return {
            "mongodb": asdict(self.mongodb) if self.mongodb else None,
            "postgres": asdict(self.postgres) if self.postgres else None,
            "toxiproxy": asdict(self.toxiproxy) if self.toxiproxy else None,
            "state_dir": self.state_dir,
            "owned": self.owned,
        }

    @classmethod
    def from_json(cls, d: dict) -> ServerStack:
        return cls(
            mongodb=Server(**d["mongodb"]) if d.get("mongodb") else None,
            postgres=Server(**d["postgres"]) if d.get("postgres") else None,
            toxiproxy=Server(**d["toxiproxy"]) if d.get("toxiproxy") else None,
            state_dir=d.get("state_dir"),
            owned=d.get("owned", []),
        )

    def public(self) -> dict:
        """Redacted summary for manifests and `servers status`."""
        return {
            "mongodb_uri": redact(self.mongodb.uri) if self.mongodb else None,
            "postgres_dsn": redact(self.postgres.uri) if self.postgres else None,
            "mongodb": self.mongodb.public() if self.mongodb else None,
            "postgres": self.postgres.public() if self.postgres else None,
            "toxiproxy": ({"api": self.toxiproxy.uri, "version": self.toxiproxy.version,
                           **self.toxiproxy.public()} if self.toxiproxy else None),
            "state_dir": self.state_dir,
        }


# ----------------------------------------------------------------------------------------------
# Checks: fail within seconds, naming what is wrong.


def check_mongodb(uri: str, label: str) -> None:
    import pymongo
    from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError

    try:
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=CONNECT_TIMEOUT_S * 1000,
                                     connectTimeoutMS=CONNECT_TIMEOUT_S * 1000)
    except (InvalidURI, ConfigurationError, ValueError, TypeError) as e:
        raise HarnessError(f"{label} is not a valid MongoDB URI ({redact(uri)}): {e}") from None
    try:
        client.admin.command("ping")
    except PyMongoError as e:
        raise HarnessError(
            f"{label}: no MongoDB server answered at {redact(uri)} within {CONNECT_TIMEOUT_S} s "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from None
    finally:
        client.close()


def not_answering(stack: ServerStack, needs: tuple[str, ...]) -> str | None:
    """Why one of the servers `needs` names does not answer (one line naming it and its address,
    as `check_mongodb`/`check_postgres` say it), or None when they all do."""
    try:
        if "mongodb" in needs:
            check_mongodb(stack.mongodb_uri, "MongoDB server")
        if "postgres" in needs:
            check_postgres(stack.postgres_dsn, "PostgreSQL server")
    except HarnessError as e:
        return str(e)
    return None


def check_targets() -> None:
    """Syntax of STUDY_MONGODB_URI and STUDY_POSTGRES_DSN, before a run is created (no network)."""
    from psycopg.conninfo import conninfo_to_dict
    from pymongo.uri_parser import parse_uri

    uri, dsn = config.mongodb_uri(), config.postgres_dsn()
    if uri and not uri.startswith("mongodb+srv://"):  # an SRV URI needs DNS: checked on connect
        try:
            parse_uri(uri)
        except Exception as e:  # InvalidURI, ValueError, ConfigurationError...
            raise HarnessError(f"STUDY_MONGODB_URI is not a valid MongoDB URI ({redact(uri)}): "
                               f"{str(e).splitlines()[0][:200]}") from None
    if dsn:
        try:
            port = conninfo_to_dict(dsn).get("port")
            if port and not all(p.isdigit() for p in str(port).split(",")):
                raise ValueError(f"port {port!r} is not a number")
        except Exception as e:  # psycopg.ProgrammingError, ValueError
            raise HarnessError(f"STUDY_POSTGRES_DSN is not a valid PostgreSQL DSN ({redact(dsn)}): "
                               f"{redact(str(e).splitlines()[0][:200])}") from None


def check_postgres(dsn: str, label: str) -> None:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.ProgrammingError as e:
        raise HarnessError(f"{label} is not a valid PostgreSQL DSN ({redact(dsn)}): {e}") from None
    except psycopg.Error as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise HarnessError(f"{label}: no PostgreSQL server answered at {redact(dsn)}: {first}") from None


# ----------------------------------------------------------------------------------------------
# Local binaries.


def postgres_bindir() -> Path:
    """The directory holding initdb and postgres: $STUDY_PG_BINDIR, Debian's newest, or PATH."""
    explicit = config.pg_bindir()
    candidates = [Path(explicit)] if explicit else []
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                    if Path(p).parent.name.isdigit() else 0)
    candidates += [Path(p) for p in reversed(debian)]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for c in candidates:
        if (c / "initdb").exists() and (c / "postgres").exists():
            return c
    raise HarnessError(
        "PostgreSQL server binaries (initdb, postgres) were not found. Install them with "
        "`apt-get install postgresql` (Debian/Ubuntu), set STUDY_PG_BINDIR to their directory, "
        "or point the study at a running server with STUDY_POSTGRES_DSN."
    )


def ferretdb_binary() -> Path | None:
    for c in (config.ferretdb_bin(), str(REPO_ROOT / ".tools/bin/ferretdb"),
              shutil.which("ferretdb")):
        if c and Path(c).exists():
            return Path(c)
    return None


def _run_as() -> str | None:
    """PostgreSQL refuses to run as root: use the `postgres` system user then."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise HarnessError(
            "running as root, PostgreSQL must run as another user, and there is no `postgres` "
            "user: install Debian's postgresql package (it creates one) or run as a normal user"
        ) from None
    return "postgres"


def _traversable_by_others(path: Path) -> bool:
    """True if every directory from / down to `path` lets other users through (o+x)."""
    for p in [path.resolve(), *path.resolve().parents]:
        if not p.stat().st_mode & 0o001:
            return False
    return True


def _chown_for(path: Path, user: str | None) -> None:
    if user:
        shutil.chown(path, user=user, group=None)
        path.chmod(0o700)


@dataclass
class _Local:
    """A local server this process started: how to start it again the same way (`restart_dead`)."""

    name: str
    argv: list[str]
    log: Path
    user: str | None
    uri: str                               # what to wait on after a restart
    proc: processes.ManagedProcess         # the current process (replaced by a restart)


_locals: dict[int, _Local] = {}            # by pid: every pid a local server has had


@contextmanager
def local_postgres(state_dir: Path, detach: bool = False) -> Iterator[Server]:
    bindir = postgres_bindir()
    user = _run_as()
    pg_dir = state_dir / "postgres"
    if user and not _traversable_by_others(state_dir):
        # The `postgres` user cannot reach a directory under a private one (pytest's tmp dirs,
        # a 0700 home): keep the cluster in a world-traversable temp dir and link it from here.
        private = Path(tempfile.mkdtemp(prefix="harness-postgres-"))
        os.chmod(private, 0o755)
        if pg_dir.is_symlink() or pg_dir.exists():
            pg_dir.unlink()
        pg_dir.symlink_to(private, target_is_directory=True)
        pg_dir = private
    data = pg_dir / "data"
    sock = pg_dir / "sock"
    pg_dir.mkdir(parents=True, exist_ok=True)
    sock.mkdir(exist_ok=True)
    for p in (pg_dir, sock):
        _chown_for(p, user)
    log = pg_dir / "postgres.log"
    log.touch()
    if user:
        shutil.chown(log, user=user)
    import subprocess

    init = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, text=True, user=user, timeout=120,
    )
    if init.returncode != 0:
        raise HarnessError(f"initdb failed ({bindir}/initdb):\n{init.stderr.strip()[-1500:]}")
    (data / CLUSTER_MARKER).write_text("a PostgreSQL cluster the harness made for the study (study_cluster)\n")
    port = processes.free_port()
    argv = [str(bindir / "postgres"), "-D", str(data), "-p", str(port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sock}"]
    for k, v in POSTGRES_SETTINGS.items():
        argv += ["-c", f"{k}={v}"]
    proc = processes.start("postgres", argv, log, user=user, detach=detach)
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    local = _locals[proc.pid] = _Local("postgres", argv, log, user, dsn, proc)
    try:
        _wait_postgres(dsn, proc)
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            for db in (STUDY_DB, FERRETDB_PG_DB):
                conn.execute(f'CREATE DATABASE "{db}"')
        yield Server("postgres", f"postgresql://postgres@127.0.0.1:{port}/{STUDY_DB}", "local",
                     "postgres", str(log), [proc.pid])
    finally:
        if not detach:
            local.proc.stop(sig=signal.SIGINT)  # SIGINT = PostgreSQL's "fast" shutdown
            if pg_dir != state_dir / "postgres":
                shutil.rmtree(pg_dir, ignore_errors=True)


def study_cluster(backend_pid: int) -> bool:
    """Whether the PostgreSQL backend with this pid runs on this machine in a cluster that
    `local_postgres` made (its working directory, the data directory, holds CLUSTER_MARKER). A
    backend of a remote server behind a tunnel has a pid of that machine: here it names another
    process, or none."""
    import psutil

    try:
        backend = psutil.Process(backend_pid)
        return backend.name() == "postgres" and (Path(backend.cwd()) / CLUSTER_MARKER).is_file()
    except (psutil.Error, OSError):
        return False


def _wait_postgres(dsn: str, proc: processes.ManagedProcess) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"PostgreSQL exited during start-up (code {proc.poll()}):\n"
                               f"{proc.log_tail()}")
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise HarnessError(f"PostgreSQL did not accept connections within {START_TIMEOUT_S} s:\n"
                       f"{proc.log_tail()}")


def _wait_mongodb(uri: str, proc: processes.ManagedProcess, what: str) -> None:
    import pymongo
    from pymongo.errors import PyMongoError

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"{what} exited during start-up (code {proc.poll()}):\n{proc.log_tail()}")
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=1000)
        try:
            client.admin.command("ping")
            return
        except PyMongoError:
            time.sleep(0.1)
        finally:
            client.close()
    raise HarnessError(f"{what} did not answer within {START_TIMEOUT_S} s:\n{proc.log_tail()}")


@contextmanager
def local_ferretdb(state_dir: Path, postgres: Server, detach: bool = False) -> Iterator[Server]:
    binary = ferretdb_binary()
    if binary is None:
        raise HarnessError(
            "no MongoDB-compatible server found: neither `mongod` on PATH nor FerretDB. Build FerretDB "
            "with `bash scripts/install-ferretdb` (needs Go; `make study` and `make test` do it), "
            "or point the study at a server with STUDY_MONGODB_URI."
        )
    fdir = state_dir / "ferretdb"
    fdir.mkdir(parents=True, exist_ok=True)
    port, debug_port = processes.free_port(), processes.free_port()
    pg_url = postgres.uri.rsplit("/", 1)[0] + f"/{FERRETDB_PG_DB}?pool_max_conns={FERRETDB_PG_POOL}"
    argv = [str(binary), "--handler=postgresql", f"--postgresql-url={pg_url}",
            f"--listen-addr=127.0.0.1:{port}", f"--debug-addr=127.0.0.1:{debug_port}",
            f"--state-dir={fdir}", "--telemetry=disable", "--log-level=warn"]
    proc = processes.start("ferretdb", argv, fdir / "ferretdb.log", detach=detach)
    uri = f"mongodb://127.0.0.1:{port}/"
    local = _locals[proc.pid] = _Local("ferretdb", argv, fdir / "ferretdb.log", None, uri, proc)
    try:
        _wait_mongodb(uri, proc, "FerretDB")
        yield Server("mongodb", uri, "local", "ferretdb", str(fdir / "ferretdb.log"), [proc.pid],
                     backend_uri=postgres.uri)
    finally:
        if not detach:
            local.proc.stop()


@contextmanager
def local_mongod(state_dir: Path, mongod: str, detach: bool = False) -> Iterator[Server]:
    mdir = state_dir / "mongod"
    (mdir / "db").mkdir(parents=True, exist_ok=True)
    port = processes.free_port()
    argv = [mongod, "--dbpath", str(mdir / "db"), "--port", str(port), "--bind_ip", "127.0.0.1"]
    proc = processes.start("mongod", argv, mdir / "mongod.log", detach=detach)
    uri = f"mongodb://127.0.0.1:{port}/"
    try:
        _wait_mongodb(uri, proc, "mongod")
        yield Server("mongodb", uri, "local", "mongod", str(mdir / "mongod.log"), [proc.pid])
    finally:
        if not detach:
            proc.stop()


def toxiproxy_binary() -> Path | None:
    for c in (config.toxiproxy_bin(), str(REPO_ROOT / ".tools/bin/toxiproxy-server"),
              shutil.which("toxiproxy-server")):
        if c and Path(c).exists():
            return Path(c)
    return None


def toxiproxy_version(binary: Path) -> str:
    """The Go module version scripts/install-toxiproxy built (written beside the binary), since a
    binary built from the module reports "git"; else what the binary itself says."""
    recorded = binary.with_name(binary.name + ".version")
    if recorded.exists():
        return recorded.read_text().strip()
    import subprocess

    out = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=10)
    return (out.stdout.strip().rsplit(" ", 1)[-1] or "unknown") + " (reported by the binary)"


@contextmanager
def local_toxiproxy(state_dir: Path, detach: bool = False) -> Iterator[Server]:
    binary = toxiproxy_binary()
    if binary is None:
        raise HarnessError(
            "Toxiproxy (the network-delay proxy) was not found. Build it with "
            "`bash scripts/install-toxiproxy` (needs Go; `make study` and `make test` do it), "
            "or set STUDY_TOXIPROXY_BIN to a toxiproxy-server binary."
        )
    tdir = state_dir / "toxiproxy"
    tdir.mkdir(parents=True, exist_ok=True)
    port = processes.free_port()
    # -host binds the API; each proxy's listener is chosen by harness.core.network (127.0.0.1:0).
    argv = [str(binary), "-host", "127.0.0.1", "-port", str(port)]
    proc = processes.start("toxiproxy", argv, tdir / "toxiproxy.log", detach=detach)
    api = f"http://127.0.0.1:{port}"
    try:
        _wait_toxiproxy(api, proc)
        yield Server(PROXY, api, "local", "toxiproxy", str(tdir / "toxiproxy.log"), [proc.pid],
                     version=toxiproxy_version(binary))
    finally:
        if not detach:
            proc.stop()


def _wait_toxiproxy(api: str, proc: processes.ManagedProcess) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"Toxiproxy exited during start-up (code {proc.poll()}):\n{proc.log_tail()}")
        try:
            if httpx.get(f"{api}/version", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise HarnessError(f"Toxiproxy did not answer at {api} within {START_TIMEOUT_S} s:\n{proc.log_tail()}")


# ----------------------------------------------------------------------------------------------
# Docker (testcontainers). Untested on machines without an engine; selected only when one answers.


def docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:  # any failure here just means "no engine": fall back to local binaries
        return False


@contextmanager
def docker_mongodb() -> Iterator[Server]:
    from testcontainers.mongodb import MongoDbContainer

    with MongoDbContainer(MONGO_IMAGE) as c:
        yield Server("mongodb", c.get_connection_url(), "docker", "mongod")


@contextmanager
def docker_postgres() -> Iterator[Server]:
    from testcontainers.postgres import PostgresContainer

    settings = " ".join(f"-c {k}={v}" for k, v in POSTGRES_SETTINGS.items()
                        if k not in ("dynamic_shared_memory_type",))
    c = PostgresContainer(POSTGRES_IMAGE, username="postgres", password="postgres", dbname=STUDY_DB,
                          driver=None).with_command(f"postgres {settings}")
    with c:
        yield Server("postgres", c.get_connection_url(), "docker", "postgres")


# ----------------------------------------------------------------------------------------------
# The stack.


def state_file() -> Path:
    return config.state_dir() / "servers.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def running_stack() -> ServerStack | None:
    """The stack `servers up` left running, if its processes are all still alive."""
    f = state_file()
    if not f.exists():
        return None
    try:
        stack = ServerStack.from_json(json.loads(f.read_text()))
    except (ValueError, TypeError, KeyError):
        return None
    if not stack.owned or not all(_pid_alive(pid) for _, pid in stack.owned):
        return None
    return stack


@contextmanager
def provision(needs: tuple[str, ...] | set[str] = ROLES, *, state_dir: Path | None = None,
              detach: bool = False) -> Iterator[ServerStack]:
    """Yield a ServerStack with the servers in `needs` (roles of SERVERS), stopping what it started
    on exit."""
    needs = set(needs)
    unknown = needs - set(SERVERS)
    if unknown:
        raise HarnessError(f"unknown server role(s) {sorted(unknown)}; known: {list(SERVERS)}")
    want_proxy = PROXY in needs
    needs -= {PROXY}
    source = config.server_source()
    if source not in config.SERVER_SOURCES:
        raise HarnessError(f"STUDY_SERVER_SOURCE must be auto, docker or local, not {source!r}")

    stack = ServerStack()
    explicit = {"mongodb": config.mongodb_uri(), "postgres": config.postgres_dsn()}
    for role, var in (("mongodb", "STUDY_MONGODB_URI"), ("postgres", "STUDY_POSTGRES_DSN")):
        target = explicit[role]
        if role in needs and target:
            (check_mongodb if role == "mongodb" else check_postgres)(target, var)
            setattr(stack, role, Server(role, target, "env", "unknown"))

    missing = {r for r in needs if getattr(stack, r) is None}
    if (missing or want_proxy) and not detach:
        up = running_stack()
        if up is not None:
            for role in missing:
                server = getattr(up, role)
                if server is not None:
                    server.source = "servers-up"
                    setattr(stack, role, server)
            missing = {r for r in needs if getattr(stack, r) is None}
            if want_proxy and up.toxiproxy is not None:
                stack.toxiproxy = up.toxiproxy
                stack.toxiproxy.source = "servers-up"

    with ExitStack() as cleanup:
        if missing and source != "local" and (source == "docker" or docker_available()):
            if source == "docker" and not docker_available():
                raise HarnessError("STUDY_SERVER_SOURCE=docker but no Docker engine answered")
            if "postgres" in missing:
                stack.postgres = cleanup.enter_context(docker_postgres())
            if "mongodb" in missing:
                stack.mongodb = cleanup.enter_context(docker_mongodb())
            missing = set()

        if missing:
            if state_dir is None:
                state_dir = Path(tempfile.mkdtemp(prefix="harness-servers-"))
                os.chmod(state_dir, 0o755)  # the postgres user must reach its data directory
                if not detach:
                    cleanup.callback(shutil.rmtree, state_dir, True)
            stack.state_dir = str(state_dir)
            mongod = shutil.which("mongod") if "mongodb" in missing else None
            # FerretDB stores its data in PostgreSQL, so it needs a local cluster even when the
            # study's PostgreSQL server is an external one.
            local_pg = None
            if "postgres" in missing or ("mongodb" in missing and not mongod):
                local_pg = cleanup.enter_context(local_postgres(state_dir, detach))
            if "postgres" in missing:
                stack.postgres = local_pg
            if "mongodb" in missing:
                if mongod:
                    stack.mongodb = cleanup.enter_context(local_mongod(state_dir, mongod, detach))
                else:
                    assert local_pg is not None  # FerretDB's PostgreSQL, started above when mongodb is missing
                    stack.mongodb = cleanup.enter_context(local_ferretdb(state_dir, local_pg, detach))
            if local_pg is not None:
                stack.owned.append(["postgres", local_pg.pids[0]])
            if "mongodb" in missing:
                stack.owned.append([stack.mongodb.implementation, stack.mongodb.pids[0]])

        if want_proxy and stack.toxiproxy is None:
            if state_dir is None:
                state_dir = Path(tempfile.mkdtemp(prefix="harness-servers-"))
                if not detach:
                    cleanup.callback(shutil.rmtree, state_dir, True)
            stack.state_dir = str(state_dir)
            stack.toxiproxy = cleanup.enter_context(local_toxiproxy(state_dir, detach))
            stack.owned.append([PROXY, stack.toxiproxy.pids[0]])
        yield stack


def restart_dead(stack: ServerStack, timeout_s: float = START_TIMEOUT_S) -> list[str]:
    """Start again every local server of `stack` whose process died, on the same port and data
    directory, PostgreSQL before the FerretDB that stores its data in it (restarted with it, since its
    connections to the old cluster are gone). Returns one line per server restarted (or that could
    not be). Servers given by URI, by `servers up` or by Docker are not this process's to restart.
    """
    done: list[str] = []
    backend_restarted = False
    for i, (name, pid) in enumerate(stack.owned):
        local = _locals.get(pid)
        if local is None:
            continue
        code = local.proc.poll()
        if code is None and not (name == "ferretdb" and backend_restarted):
            continue
        why = f"had exited with code {code}" if code is not None else "its PostgreSQL was restarted"
        local.proc.stop()  # a dead leader: whatever is left of its process group
        deadline = time.monotonic() + timeout_s
        while True:
            new = processes.start(local.name, local.argv, local.log, user=local.user)
            try:
                if name == "postgres":
                    _wait_postgres(local.uri, new)
                else:
                    _wait_mongodb(local.uri, new, name)
                error = None
                break
            except HarnessError as e:
                # PostgreSQL refuses to start while the killed postmaster's backends still hold its
                # shared memory; they exit on their own within moments of noticing its death.
                new.stop()
                error = str(e).splitlines()[0]
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        if error:
            done.append(f"{name} (pid {pid}) {why}; restart failed: {error}")
            continue
        local.proc = new
        _locals[new.pid] = local
        stack.owned[i] = [name, new.pid]
        for server in (stack.mongodb, stack.postgres):
            if server is not None and pid in server.pids:
                server.pids = [new.pid if p == pid else p for p in server.pids]
        backend_restarted = backend_restarted or name == "postgres"
        done.append(f"{name} (pid {pid}) {why}; restarted as pid {new.pid} on the same port and data "
                    f"directory")
    return done


# ----------------------------------------------------------------------------------------------
# `servers up | status | down`: a detached stack other commands reuse.


def servers_up() -> ServerStack:
    existing = running_stack()
    if existing is not None:
        return existing
    state_dir = state_file().parent / "servers"
    if state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    os.chmod(state_dir, 0o755)
    os.chmod(state_dir.parent, 0o755)
    with provision(SERVERS, state_dir=state_dir, detach=True) as stack:
        state_file().write_text(json.dumps(stack.to_json(), indent=2))
        return stack


def servers_down() -> list[int]:
    """Stop a `servers up` stack. Returns the pids signalled."""
    f = state_file()
    if not f.exists():
        return []
    stack = ServerStack.from_json(json.loads(f.read_text()))
    stopped = []
    # Reverse start order: Toxiproxy first, FerretDB before the PostgreSQL it stores data in.
    for name, pid in reversed(stack.owned):
        if _pid_alive(pid):
            # SIGINT is PostgreSQL's "fast" shutdown; SIGTERM would wait for clients to leave.
            processes.stop_pid(pid, sig=signal.SIGINT if name == "postgres" else signal.SIGTERM)
            stopped.append(pid)
    f.unlink()
    if stack.state_dir and Path(stack.state_dir).exists():
        linked = Path(stack.state_dir) / "postgres"
        if linked.is_symlink():
            shutil.rmtree(linked.resolve(), ignore_errors=True)
        shutil.rmtree(stack.state_dir, ignore_errors=True)
    return stopped


def libpq_env(dsn: str) -> dict[str, str]:
    """The environment for a libpq client program (pgbench, psql) to reach `dsn`."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    env = dict(os.environ)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"),
                     ("password", "PGPASSWORD"), ("dbname", "PGDATABASE")):
        if info.get(key):
            env[var] = str(info[key])   # credentials through the environment, not argv
    return env


def database_pids(stack: ServerStack) -> list[int]:
    """The database processes on this machine (FerretDB and its PostgreSQL, or a local server given
    by URI): the roots of the process trees whose CPU counts as the database's (backends and
    background workers too). Empty for servers elsewhere (Docker, a cloud): their CPU is not measured."""
    pids: list[int] = []
    backend = None
    m, pg = stack.mongodb, stack.postgres
    for server in (m, pg):
        if server is not None and server.source in ("local", "servers-up"):
            pids += list(server.pids)
    if m is not None and m.implementation == "ferretdb":
        backend = m.backend_uri
        if m.source not in ("local", "servers-up"):  # given by URI: found by its listening port
            pid, backend = _local_ferretdb(m.uri)
            pids += [pid] if pid else []
    if pg is not None and pg.source not in ("local", "servers-up"):
        postmaster, _how = find_postmaster(pg.uri)
        pids += [postmaster] if postmaster else []
    if backend:  # FerretDB's PostgreSQL cluster: its postmaster, found by the backend's port
        postmaster, _how = find_postmaster(backend)
        pids += [postmaster] if postmaster else []
    return sorted(set(pids))


def _local_ferretdb(uri: str) -> tuple[int | None, str | None]:
    """(pid, backend URL) of a FerretDB process on this machine listening on `uri`'s port."""
    from urllib.parse import urlsplit

    import psutil

    try:
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or 27017
    except ValueError:
        return None, None
    if host not in LOOPBACK:
        return None, None
    listen = {f"--listen-addr={h}:{port}" for h in LOOPBACK}
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["name"] != "ferretdb" or listen.isdisjoint(cmd):
                continue
            url = next((a.split("=", 1)[1] for a in cmd if a.startswith("--postgresql-url=")), None)
            return p.pid, url
        except psutil.Error:
            continue
    return None, None
