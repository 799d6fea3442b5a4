"""What produced a run: the machine, the software, the code version and the servers' identity."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from . import host
from .config import REPO_ROOT
from .interpreters import installed_versions
from .measure import reader_priority_here
from .redact import redact
from .servers import ServerStack

LOCK_FILE = REPO_ROOT / "requirements.lock"   # every Python package pinned (`make lock`)
PACKAGES = ("pymongo", "motor", "asyncpg", "psycopg", "psycopg-binary", "psycopg-pool", "uvloop",
            "fastapi", "starlette", "anyio", "uvicorn", "locust", "numpy", "pandas", "pyarrow",
            "matplotlib", "papermill", "nbconvert", "testcontainers", "hdrhistogram", "psutil")
POSTGRES_SETTINGS_SHOWN = ("max_connections", "shared_buffers", "fsync", "synchronous_commit",
                           "full_page_writes", "work_mem", "effective_cache_size", "max_wal_size")


def package_versions() -> dict[str, str | None]:
    return installed_versions(PACKAGES)


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None,
            "describe": git("describe", "--always", "--dirty")}


def machine() -> dict[str, Any]:
    uname = platform.uname()
    vm = psutil.virtual_memory()
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "hostname": uname.node,
        "cpu_model": host.cpu_model(),
        "cpu_count_logical": psutil.cpu_count(logical=True),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": affinity,
        "kernel": f"{uname.system} {uname.release}",
        "platform": platform.platform(),
        "memory_total_bytes": vm.total,
        "load_average": list(os.getloadavg()),
        "in_container": Path("/.dockerenv").exists() or Path("/run/.containerenv").exists(),
        # Which machine and which boot. machine_id comes with the machine image:
        # every machine of this kind has the same one (and the hostname is `vm` on all), so it never
        # identifies a machine alone. `harness compare` uses the boot id, the CPU (model, a hash of
        # its flags, MHz) and the run's own calibration ceilings.
        "machine_id": host.read_first_line("/etc/machine-id"),
        "boot_id": host.read_first_line("/proc/sys/kernel/random/boot_id"),
        "booted_at": psutil.boot_time(),
        **host.cpu_identity(),
        # The kernel's speculative-execution mitigations: they set what a system call and a context
        # switch cost, and they differ between the processors of this kind (docs/RESULTS.md, 002-cpu).
        "cpu_vulnerabilities": host.cpu_vulnerabilities(),
    }


def python_info() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "build": list(platform.python_build()),
        "compiler": platform.python_compiler(),
        "executable": sys.executable,
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
    }


def lock_sha256(path: Path = LOCK_FILE) -> str | None:
    """sha256 of the lock file the environment was installed from (None if there is none)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def collect() -> dict[str, Any]:
    return {"python": python_info(), "packages": package_versions(), "machine": machine(),
            "git": git_state(), "lock_sha256": lock_sha256(), "cpu_reader": reader_priority_here()}


def identify_mongodb(uri: str) -> dict[str, Any]:
    """buildInfo of the server behind `uri`. FerretDB answers with `ferretdbVersion`: say so."""
    import pymongo

    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        info = client.admin.command("buildInfo")
    ident: dict[str, Any] = {
        "uri": redact(uri),
        "reported_version": info.get("version"),
        "git_version": info.get("gitVersion"),
        "modules": info.get("modules"),
    }
    if "ferretdbVersion" in info:
        ident.update(product="FerretDB", version=info["ferretdbVersion"],
                     backend=(info.get("ferretdbFeatures") or {}).get("backend", "postgresql"),
                     label=f"FerretDB {info['ferretdbVersion']} on PostgreSQL "
                           f"(reports server version {info.get('version')})")
    else:
        ident.update(product="MongoDB", version=info.get("version"),
                     label=f"MongoDB {info.get('version')}")
    return ident


def identify_postgres(dsn: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        version = (conn.execute("SELECT version()").fetchone() or ("",))[0]
        short = (conn.execute("SHOW server_version").fetchone() or ("",))[0]
        settings = dict(conn.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            (list(POSTGRES_SETTINGS_SHOWN),)).fetchall())
    return {"uri": redact(dsn), "product": "PostgreSQL", "version": short, "version_string": version,
            "settings": settings, "label": f"PostgreSQL {short.split()[0]}"}


def identify_servers(stack: ServerStack) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if stack.mongodb is not None:
        out["mongodb"] = {**identify_mongodb(stack.mongodb.uri), "source": stack.mongodb.source,
                          "implementation": stack.mongodb.implementation}
        if out["mongodb"]["product"] == "FerretDB" and stack.mongodb.backend_uri:
            # FerretDB's storage is a PostgreSQL cluster: name its version in the label too.
            pg = identify_postgres(stack.mongodb.backend_uri)
            out["mongodb"]["backend_server"] = pg
            out["mongodb"]["label"] = out["mongodb"]["label"].replace("on PostgreSQL ", f"on {pg['label']} ")
    if stack.postgres is not None:
        out["postgres"] = {**identify_postgres(stack.postgres.uri), "source": stack.postgres.source}
    if stack.toxiproxy is not None:
        out["toxiproxy"] = identify_toxiproxy(stack.toxiproxy)
    return out


def identify_toxiproxy(server) -> dict[str, Any]:
    """Toxiproxy's version: the module version built (recorded at build time; the binary reports
    "git" when built from the module), beside what its API reports."""
    import httpx

    reported = httpx.get(f"{server.uri}/version", timeout=5).text.strip()
    return {"uri": server.uri, "product": "Toxiproxy", "version": server.version,
            "reported_version": reported, "source": server.source,
            "label": f"Toxiproxy {server.version}"}
