"""Seed 000: the same MongoDB-backed FastAPI endpoint, sync vs async, under Locust ramping to 500 users.

Variants (the `variant` column), each a fresh uvicorn process (one worker, loopback, free port):
    sync_1thread    `def` endpoint, sync MongoClient, AnyIO thread limiter = 1 token (the seed's)
    sync_40threads  the same with AnyIO's default 40 tokens
    async           `async def` endpoint, AsyncMongoClient (the seed's async side)
    mixed           `async def` endpoint calling the sync driver: blocks the event loop
The app is `harness.apps.listings_api` (see its docstring for the aggregation and for what FerretDB
does differently); the load is `harness/apps/locustfile.py` (FastHttpUser).

Per variant:
1. closed loop: Locust headless ramps to `users` at `spawn_rate` for `run_time_s` with full CSV
   history. Locust's own CPU and the server's CPU (and the database processes', when this harness
   started them) are sampled with psutil. If Locust warns that its CPU exceeded 90%, the variant
   is flagged `generator_saturated` and, if `saturation_rerun_processes` > `locust_processes`,
   run again with `--processes N` (attempt 1); both attempts are kept.
2. open loop: `harness.openloop` at a few fixed rates (`openloop_rates`, or fractions of the
   throughput Locust achieved on this variant), latency from each request's intended send time.

Tables (one repeat):
    runs             one row per Locust attempt: variant, attempt, locust_processes, status, error,
                     users, spawn_rate, run_time_s, returncode, generator_saturated, wall_s,
                     server_cpu_s, locust_cpu_s, db_cpu_s, requests, failures, app_variant,
                     thread_tokens, loop, port
    samples          one row per Locust request (raw, from the locustfile's hook): variant, attempt,
                     task (Locust user), pid, start_s (since Locust started), latency_s, ok
    locust_stats     Locust's `_stats.csv` (its aggregates; columns snake_cased, `50%` -> `p50`)
    locust_history   Locust's `_stats_history.csv` (one row per second per name, incl. Aggregated)
    locust_failures  Locust's `_failures.csv` (when any)
    cpu              psutil samples: variant, phase, attempt, rate, t_s, role (server | locust |
                     database), cpu_s (cumulative user+system of that role's processes), procs
    openloop         one row per open-loop request: variant, rate, rate_fraction, connections, seq,
                     connection, intended_s, actual_s, end_s, corrected_s, naive_s, status, ok,
                     sent, error
    openloop_runs    one row per (variant, rate): scheduled, sent, ok, unsent, wall_s, server_cpu_s,
                     db_cpu_s (generator CPU is the `windows` row of phase openloop)
    windows          ctx.window(): phase locust (ops = Locust requests) and phase openloop
Raw Locust CSVs, logs of uvicorn (one process per phase: uvicorn-locust.log, uvicorn-openloop.log)
and Locust, and raw samples are kept under artifacts/<variant>/.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from .. import datasets, openloop, processes
from ..errors import HarnessError
from .base import Experiment, Params, variant_id

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO_ROOT / "harness" / "apps" / "locustfile.py"
APP = "harness.apps.listings_api:app"
VARIANTS: dict[str, tuple[str, int]] = {   # label -> (app variant, AnyIO thread-limiter tokens)
    "sync_1thread": ("sync", 1),
    "sync_40threads": ("sync", 40),
    "async": ("async", 40),
    "mixed": ("mixed", 40),
}
CPU_WARNING = re.compile(r"CPU usage (above|was too high|threshold was exceeded)")


@dataclass(frozen=True)
class FastapiLocustParams(Params):
    documents: int = 5_555                 # sample_airbnb's listingsAndReviews size
    variants: tuple[str, ...] = tuple(VARIANTS)
    loop: str = "asyncio"                  # uvicorn --loop: asyncio | uvloop
    min_rating: int = 95                   # the query: rating >= min_rating, sorted by price...
    page_size: int = 20                    # ...first page_size listings
    users: int = 500                       # the seed's peak
    spawn_rate: float = 5.0                # users/s: 500 users after 100 s
    run_time_s: int = 110
    wait_min_s: float = 1.0                # Locust think time between a user's requests
    wait_max_s: float = 2.0
    request_timeout_s: float = 60.0        # FastHttpUser timeouts (Locust's default)
    locust_processes: int = 1
    saturation_rerun_processes: int = 2    # rerun a saturated variant with --processes N (0: never)
    openloop_variants: tuple[str, ...] = tuple(VARIANTS)
    openloop_rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.9)  # of the variant's Locust throughput
    openloop_rates: tuple[float, ...] = ()  # fixed rates (req/s); when set, used instead of fractions
    openloop_min_rate: float = 0.2
    openloop_duration_s: float = 25.0
    openloop_connections: int = 16
    openloop_drain_s: float = 15.0
    health_timeout_s: float = 60.0
    cpu_sample_s: float = 1.0
    timeout_s: float = 1500.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "page_size", "users", "spawn_rate", "run_time_s",
                              "request_timeout_s", "locust_processes", "openloop_duration_s",
                              "openloop_connections", "openloop_min_rate", "health_timeout_s",
                              "cpu_sample_s")
        self.require_non_negative("wait_min_s", "wait_max_s", "saturation_rerun_processes",
                                  "openloop_drain_s", "openloop_rate_fractions", "openloop_rates")
        self.require_choice("variants", tuple(VARIANTS))
        self.require_choice("openloop_variants", tuple(VARIANTS))
        self.require_choice("loop", ("asyncio", "uvloop"))
        if not 0 <= self.min_rating <= 100:
            raise HarnessError(f"parameter min_rating must be a review score from 0 to 100, got {self.min_rating}")
        if self.wait_max_s < self.wait_min_s:
            raise HarnessError("parameter wait_max_s must be at least wait_min_s")


class FastapiLocust(Experiment):
    name = "fastapi_locust"
    title = "Sync vs async FastAPI + PyMongo under Locust (closed loop) and at fixed rates (open loop)"
    needs = ("mongodb",)
    params_type = FastapiLocustParams
    profiles = {
        "full": {},
        "quick": {"users": 20, "spawn_rate": 2.0, "run_time_s": 60, "openloop_rate_fractions": (0.5, 0.9),
                  "openloop_duration_s": 10.0, "openloop_drain_s": 10.0, "timeout_s": 900.0},
        # smoke: 7 s, because Locust's "current RPS" (max_rps) trails by a few seconds and reads 0 before
        "smoke": {"documents": 300, "users": 4, "spawn_rate": 4.0, "run_time_s": 7, "wait_min_s": 0.1,
                  "wait_max_s": 0.3, "saturation_rerun_processes": 0, "openloop_rate_fractions": (0.5,),
                  "openloop_duration_s": 2.0, "openloop_drain_s": 5.0, "openloop_connections": 4,
                  "health_timeout_s": 30.0, "timeout_s": 300.0},
    }

    def datasets(self, p):
        return [datasets.Listings(p.documents)]

    def run(self, ctx) -> None:
        p: FastapiLocustParams = ctx.params
        from importlib.metadata import version

        # Never `import locust` here: it monkey-patches sockets and threads with gevent.
        ctx.note("locust_version", version("locust"))
        ctx.note("server_implementation", ctx.servers.mongodb.implementation if ctx.servers.mongodb else None)
        ctx.note("variants", {v: {"app_variant": VARIANTS[v][0], "thread_tokens": VARIANTS[v][1]}
                              for v in p.variants})
        failed = []
        for label in p.variants:
            try:
                _Variant(ctx, p, label).run()
            except Exception as e:  # recorded; the next variant still runs
                ctx.log.exception("variant %s failed", label)
                if not getattr(e, "recorded", False):
                    ctx.record("runs", [{"variant": label, "attempt": 0, "status": "failed",
                                         "error": f"{type(e).__name__}: {e}"[:2000]}])
                failed.append(label)
        ctx.note("failed_variants", failed)
        if failed and len(failed) == len(p.variants):
            raise HarnessError(f"every variant failed: {', '.join(failed)}")


class _CpuSampler:
    """Samples, in a thread, the cumulative CPU time (user + system) of each role's processes.

    A role is a list of root pids; their descendants are found at every sample. A process that
    exits keeps counting with the CPU it had used when last seen, so a role's total never drops.
    """

    def __init__(self, roles: dict[str, list[int]], interval: float):
        self.roles = roles
        self.interval = interval
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._last: dict[int, float] = {}
        self._members: dict[str, set[int]] = {}
        self.t0 = time.perf_counter()

    def sample(self) -> None:
        t = time.perf_counter() - self.t0
        for role, pids in self.roles.items():
            members = self._members.setdefault(role, set())
            for pid in pids:
                try:
                    root = self._procs.setdefault(pid, psutil.Process(pid))
                    for proc in (root, *root.children(recursive=True)):
                        members.add(proc.pid)
                        self._procs.setdefault(proc.pid, proc)
                except psutil.Error:
                    pass
            alive = 0
            for pid in members:
                try:
                    ct = self._procs[pid].cpu_times()
                    self._last[pid] = ct.user + ct.system
                    alive += 1
                except psutil.Error:
                    pass
            self.rows.append({"t_s": t, "role": role, "cpu_s": sum(self._last.get(m, 0.0) for m in members),
                              "procs": alive})

    def __enter__(self) -> "_CpuSampler":
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def used(self, role: str) -> float:
        """CPU seconds the role used between the first and the last sample."""
        vals = [r["cpu_s"] for r in self.rows if r["role"] == role]
        return vals[-1] - vals[0] if vals else float("nan")


def _db_pids(ctx) -> list[int]:
    """The database processes this harness started (FerretDB and its PostgreSQL), if any."""
    pids = []
    for server in (ctx.servers.mongodb, ctx.servers.postgres):
        if server is not None and server.source in ("local", "servers-up"):
            pids += list(server.pids)
    if ctx.servers.mongodb is not None and ctx.servers.mongodb.implementation == "ferretdb":
        # FerretDB's PostgreSQL cluster: its postmaster, found by the backend's port.
        port = (ctx.servers.mongodb.backend_uri or "").rsplit(":", 1)[-1].split("/", 1)[0]
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if port and cmd and cmd[0].endswith("/postgres") and "-p" in cmd and port in cmd:
                pids.append(proc.info["pid"])
    return sorted(set(pids))


def _snake(col: str) -> str:
    col = col.strip()
    if col.endswith("%"):
        return "p" + col[:-1].replace(".", "_")
    return re.sub(r"[^0-9a-z]+", "_", col.lower()).strip("_")


def _read_locust_csv(path: Path, **extra: Any) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    df = pd.read_csv(path, na_values=["N/A"])
    df.columns = [_snake(c) for c in df.columns]
    for c in df.columns:
        if c not in ("type", "name", "method", "error", "occurrences", "traceback", "nodes"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    for k, v in extra.items():
        df.insert(0, k, v)
    return df


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


class _Variant:
    def __init__(self, ctx, p: FastapiLocustParams, label: str):
        self.ctx, self.p, self.label = ctx, p, label
        self.app_variant, self.tokens = VARIANTS[label]
        self.dir = ctx.artifacts / label
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_pids = _db_pids(ctx)

    def _start_server(self, phase: str):
        """A fresh uvicorn process on a free loopback port, healthy and warmed up."""
        port = processes.free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, PYTHONUNBUFFERED="1", LISTINGS_API_MONGODB_URI=self.ctx.servers.mongodb_uri,
                   LISTINGS_API_VARIANT=self.app_variant, LISTINGS_API_THREAD_TOKENS=str(self.tokens))
        server = processes.start(f"uvicorn:{self.label}:{phase}", [
            sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port", str(port),
            "--loop", self.p.loop, "--no-access-log", "--log-level", "warning"],
            self.dir / f"uvicorn-{phase}.log", env=env, cwd=REPO_ROOT)
        self.base = {"app_variant": self.app_variant, "thread_tokens": self.tokens, "loop": self.p.loop,
                     "port": port}
        try:
            self._wait_healthy(server)
            self._warm_up()
        except BaseException:
            server.stop()
            raise
        return server

    def run(self) -> None:
        p = self.p
        # Each phase gets its own server: requests Locust left queued in the first (a sync
        # endpoint's thread-pool queue outlives the client's disconnect) must not delay the second.
        server = self._start_server("locust")
        try:
            attempt, procs = 0, p.locust_processes
            row = self._locust(server, attempt, procs)
            if row["generator_saturated"] and p.saturation_rerun_processes > procs:
                server.stop()
                server = self._start_server("locust-a1")
                row = self._locust(server, attempt + 1, p.saturation_rerun_processes)
        finally:
            server.stop()
        if self.label in p.openloop_variants:
            server = self._start_server("openloop")
            try:
                self._openloop(server, row)
            finally:
                server.stop()

    def _wait_healthy(self, server) -> None:
        deadline = time.monotonic() + self.p.health_timeout_s
        if not processes.wait_for_port(self.base["port"], self.p.health_timeout_s, server):
            raise HarnessError(f"uvicorn ({self.label}) did not listen: {server.log_tail(15)}")
        while time.monotonic() < deadline:
            try:
                status, body = _get(self.url + "/health", 5)
                health = json.loads(body)
                if status == 200 and health.get("variant") == self.app_variant \
                        and health.get("thread_tokens") == self.tokens:
                    self.ctx.note(f"health_{self.label}", health)
                    return
            except OSError:
                pass
            if server.poll() is not None:
                break
            time.sleep(0.2)
        raise HarnessError(f"uvicorn ({self.label}) did not become healthy: {server.log_tail(15)}")

    def _query(self) -> str:
        return f"/listings/top?min_rating={self.p.min_rating}&limit={self.p.page_size}"

    def _warm_up(self) -> None:
        """Outside every window: the driver's pool, FastAPI's first-request paths."""
        deadline = time.monotonic() + self.p.warmup_s
        while True:
            status, body = _get(self.url + self._query(), self.p.request_timeout_s)
            if status != 200 or not isinstance(json.loads(body), list):
                raise HarnessError(f"warm-up request failed: HTTP {status}")
            if time.monotonic() >= deadline:
                return

    def _locust(self, server, attempt: int, procs: int) -> dict[str, Any]:
        p, ctx = self.p, self.ctx
        prefix = self.dir / f"locust-a{attempt}"
        samples_dir = self.dir / f"samples-a{attempt}"
        argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
                "-u", str(p.users), "-r", str(p.spawn_rate), "-t", f"{p.run_time_s}s",
                "--host", self.url, "--csv", str(prefix), "--csv-full-history", "--only-summary",
                "--stop-timeout", "5", "--loglevel", "INFO"]
        if procs > 1:
            argv += ["--processes", str(procs)]
        env = dict(os.environ, PYTHONUNBUFFERED="1", LISTINGS_MIN_RATING=str(p.min_rating),
                   LISTINGS_LIMIT=str(p.page_size), LISTINGS_WAIT_MIN_S=str(p.wait_min_s),
                   LISTINGS_WAIT_MAX_S=str(p.wait_max_s), LISTINGS_TIMEOUT_S=str(p.request_timeout_s),
                   LISTINGS_SAMPLES_DIR=str(samples_dir))
        log = self.dir / f"locust-a{attempt}.log"
        row: dict[str, Any] = {"variant": self.label, "attempt": attempt, "locust_processes": procs,
                               "users": p.users, "spawn_rate": p.spawn_rate, "run_time_s": p.run_time_s,
                               **self.base}
        epoch0 = time.time()
        with ctx.window(self.label, phase="locust", attempt=attempt, locust_processes=procs) as w:
            gen = processes.start(f"locust:{self.label}", argv, log, env=env, cwd=REPO_ROOT)
            try:
                with _CpuSampler({"server": [server.pid], "locust": [gen.pid], "database": self.db_pids},
                                 p.cpu_sample_s) as cpu:
                    try:
                        gen.popen.wait(timeout=p.run_time_s + p.request_timeout_s + 60)
                        error = None
                    except Exception:
                        error = "locust did not stop in time"
            finally:
                gen.stop()
            row["wall_s"] = time.perf_counter() - w.t0
            samples = self._samples(samples_dir, epoch0, {"variant": self.label, "attempt": attempt})
            w.ops = len(samples)
        row["returncode"] = gen.poll()
        row["server_cpu_s"] = cpu.used("server")
        row["locust_cpu_s"] = cpu.used("locust")
        row["db_cpu_s"] = cpu.used("database") if self.db_pids else float("nan")
        text = log.read_text(errors="replace") if log.exists() else ""
        row["generator_saturated"] = bool(CPU_WARNING.search(text))
        ctx.record("cpu", [{"variant": self.label, "phase": "locust", "attempt": attempt, "rate": float("nan"),
                            **r} for r in cpu.rows])
        ids = {"variant": self.label, "attempt": attempt}
        for kind, table in (("stats", "locust_stats"), ("stats_history", "locust_history"),
                            ("failures", "locust_failures"), ("exceptions", "locust_exceptions")):
            df = _read_locust_csv(Path(f"{prefix}_{kind}.csv"), **ids)
            if not df.empty:
                ctx.record(table, df)
        row["requests"] = len(samples)
        row["failures"] = int((~samples["ok"]).sum()) if len(samples) else 0
        if row["returncode"] not in (0, 1):  # 1: some requests failed (recorded as failures)
            error = error or f"locust exited with code {row['returncode']}: {gen.log_tail(10)}"
        if not Path(f"{prefix}_stats.csv").exists():
            error = error or f"locust wrote no CSV: {gen.log_tail(10)}"
        row["status"] = "failed" if error else "ok"
        row["error"] = error or ""
        ctx.record("runs", [row])
        if error:
            err = HarnessError(error)
            err.recorded = True  # already in `runs`
            raise err
        return row

    def _samples(self, samples_dir: Path, epoch0: float, ids: dict[str, Any]) -> pd.DataFrame:
        parts = []
        for f in sorted(samples_dir.glob("samples-*.csv")):
            with open(f, newline="") as fh:
                rows = [r for r in csv.reader(fh) if len(r) == 5]
            if rows:
                parts.append(pd.DataFrame(rows, columns=["start", "ms", "ok", "task", "pid"]))
        if not parts:
            return pd.DataFrame({"ok": pd.Series(dtype=bool)})
        raw = pd.concat(parts, ignore_index=True)
        df = pd.DataFrame({
            "variant": ids["variant"], "attempt": ids["attempt"],
            "task": raw["task"].astype(int), "pid": raw["pid"].astype(int),
            "start_s": raw["start"].astype(float) - epoch0,
            "latency_s": raw["ms"].astype(float) / 1000.0,
            "ok": raw["ok"].astype(int).astype(bool),
        }).sort_values("start_s", ignore_index=True)
        self.ctx.record("samples", df)
        return df

    def _rates(self, locust_row: dict[str, Any]) -> list[tuple[float, float]]:
        p = self.p
        if p.openloop_rates:
            return [(r, float("nan")) for r in p.openloop_rates]
        ok = locust_row["requests"] - locust_row["failures"]
        achieved = ok / p.run_time_s
        rates: dict[float, float] = {}
        for f in p.openloop_rate_fractions:  # rates floored at openloop_min_rate may coincide: run once
            rates.setdefault(round(max(p.openloop_min_rate, f * achieved), 6), f)
        return list(rates.items())

    def _openloop(self, server, locust_row: dict[str, Any]) -> None:
        p, ctx = self.p, self.ctx
        for rate, fraction in self._rates(locust_row):
            with _CpuSampler({"server": [server.pid], "database": self.db_pids}, p.cpu_sample_s) as cpu:
                with ctx.window(self.label, phase="openloop", rate=rate, rate_fraction=fraction) as w:
                    res = openloop.run(self.url + self._query(), rate, p.openloop_duration_s,
                                       connections=p.openloop_connections, timeout_s=p.request_timeout_s,
                                       drain_s=p.openloop_drain_s, loop=p.loop)
                    df = res.frame()
                    w.ops = int(df["sent"].sum())
            df.insert(0, "connections", p.openloop_connections)
            df.insert(0, "rate_fraction", fraction)
            df.insert(0, "rate", rate)
            df.insert(0, "variant", self.label)
            ctx.record("openloop", df)
            ctx.record("cpu", [{"variant": self.label, "phase": "openloop", "attempt": 0, "rate": rate, **r}
                               for r in cpu.rows])
            ctx.record("openloop_runs", [{
                "variant": self.label, "rate": rate, "rate_fraction": fraction,
                "connections": p.openloop_connections, "duration_s": p.openloop_duration_s,
                "scheduled": len(df), "sent": int(df["sent"].sum()), "ok": int(df["ok"].sum()),
                "unsent": int((~df["sent"]).sum()), "wall_s": res.wall_s,
                "server_cpu_s": cpu.used("server"),
                "db_cpu_s": cpu.used("database") if self.db_pids else float("nan"),
                "id": variant_id(self.label, rate=round(rate, 3)), **self.base}])


EXPERIMENT = FastapiLocust()
