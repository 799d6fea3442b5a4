"""The FastAPI study's workload, shared by its experiments (fastapi_locust, fastapi_crossover):
start the listings app (harness.experiments.fastapi.apps.listings_api) per variant, drive it with Locust (one process,
or a master and workers on loopback) and optionally with the open-loop generator, and record the
raw tables and the hold-window figures the bottleneck rules need (harness.experiments.fastapi.analysis).

See harness/experiments/fastapi/locust.py for the tables and the settings. The settings object `p`
this module reads is the FastAPI experiments' parameters (`experiments.fastapi_params`), taken by
attribute so that this floor does not import the experiments' one.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from ...core import datasets, openloop, processes
from ...core.config import REPO_ROOT
from ...core.errors import HarnessError
from ...core.interpreters import study_python
from ...core.measure import CPUSampler, completions_in_window, machine_busy_s
from ...core.servers import database_pids

LOCUSTFILE = Path(__file__).with_name("apps") / "locustfile.py"
APP = "harness.experiments.fastapi.apps.listings_api:app"
VARIANTS: dict[str, tuple[str, int]] = {   # label -> (app variant, AnyIO thread-limiter tokens)
    "sync_1thread": ("sync", 1),
    "sync_40threads": ("sync", 40),
    "async": ("async", 40),
    "mixed": ("mixed", 40),
}
QUERIES = ("page", "fast", "seed")
# Microsoft: "Availability zones are connected by a high-performance network with a round-trip
# latency of less than approximately 2 ms" (learn.microsoft.com, "What are availability zones?").
# Fixed before the first run; never tuned to results.
CLOUD_RTT_MS = 2.0


class RecordedError(HarnessError):
    """A variant's failure already recorded in its `runs` row."""

    recorded = True


def request_path(query: str, *, page: int, market: str, band: int, min_rating: int, limit: int) -> str:
    """The one request every Locust user repeats (path and query string) for `query`."""
    if query == "page":
        q: dict[str, Any] = {"page": page, "limit": limit}
    elif query == "fast":
        q = {"market": market, "band": band, "limit": limit}
    else:
        q = {"min_rating": min_rating, "limit": limit}
    return "/listings/top?" + urllib.parse.urlencode(q)


def index_key(query: str, *, page: int, market: str, band: int) -> str:
    """The key value `request_path`'s request looks up (for the index's recorded plan): the
    companion collection's page key for `query=page`, else the listings' `search_key`."""
    return datasets.listing_page_key(page) if query == "page" else f"{market}|{band}"


CPU_WARNING = re.compile(r"CPU usage (above|was too high|threshold was exceeded)")


def ping(uri: str, n: int) -> dict[str, Any]:
    """Median round trip of `n` `ping` commands over one connection, as this repeat's traffic sees it."""
    import pymongo

    with pymongo.MongoClient(uri) as client:
        client.admin.command("ping")
        rtts = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.admin.command("ping")
            rtts.append((time.perf_counter() - t0) * 1000.0)
    return {"n": n, "median_ms": statistics.median(rtts), "min_ms": min(rtts), "max_ms": max(rtts)}


# query -> (collection, top-level key) that wants a GIN index in FerretDB's PostgreSQL table
INDEXED_KEYS: dict[str, tuple[str, str]] = {
    "page": (datasets.PAGE_COLLECTION, "page_key"),
    "fast": (datasets.Listings.name, "search_key"),
}


class search_index:
    """FerretDB only: a GIN index on `_jsonb -> '<key>'` in the PostgreSQL table of the query's
    collection (INDEXED_KEYS), for the run.

    FerretDB 1.24 turns `{key: k}` into `_jsonb->$1 @> $2`, which the btree index FerretDB itself
    creates for `create_index(key)` cannot serve; the GIN index can, but only in a custom plan: the
    key is a parameter, so the generic plan PostgreSQL switches to after five executions of
    FerretDB's cached statement cannot match the index expression and scans (and decompresses)
    the whole table, about 5 ms of backend CPU per request here. So the cluster also gets
    `plan_cache_mode = force_custom_plan` (ALTER SYSTEM and a reload, which reaches FerretDB's open
    connections), reset on exit. Both are dropped afterwards; what was done (and the plan for one
    key value) is noted as `ferretdb_search_index`."""

    def __init__(self, ctx, query: str, probe: str = ""):
        self.ctx, self.query, self.probe = ctx, query, probe
        self.wanted = query in INDEXED_KEYS
        self.conn: Any = None
        self.index: str | None = None
        self.custom_plans = False

    def __enter__(self):
        info: dict[str, Any] = {"requested": self.wanted, "created": False, "query": self.query}
        m = self.ctx.servers.mongodb
        backend = m.backend_uri if m is not None else None
        if self.wanted and (m is None or m.implementation != "ferretdb"):
            info["skipped"] = f"the server is {m.implementation if m else 'unknown'}, not FerretDB"
        elif self.wanted:
            if not backend:
                info["skipped"] = "FerretDB's PostgreSQL backend is not known to the harness"
            else:
                import psycopg
                from psycopg import sql
                from psycopg.types.json import Jsonb

                from ...core.servers import FERRETDB_PG_DB

                collection, key = INDEXED_KEYS[self.query]
                self.conn = psycopg.connect(backend.rsplit("/", 1)[0] + f"/{FERRETDB_PG_DB}", autocommit=True)
                row = self.conn.execute(
                    f'SELECT _jsonb->>\'table\' FROM "{datasets.STUDY_DB}"._ferretdb_database_metadata '
                    "WHERE _jsonb->>'_id' = %s", (collection,)).fetchone()
                if row is None:
                    info["skipped"] = f"no backing table found for {collection}"
                else:
                    self.index = f"{row[0]}_{key}_gin_harness"
                    table = f'"{datasets.STUDY_DB}"."{row[0]}"'
                    self.conn.execute(f'CREATE INDEX IF NOT EXISTS "{self.index}" ON {table} '
                                      f"USING gin ((_jsonb -> '{key}'))")
                    self.conn.execute(f"ANALYZE {table}")
                    plan = self.conn.execute(sql.SQL("EXPLAIN SELECT _jsonb FROM {} WHERE _jsonb -> {} @> {}").format(
                        sql.Identifier(datasets.STUDY_DB, row[0]), sql.Literal(key),
                        sql.Literal(Jsonb(self.probe)))).fetchall()
                    self.conn.execute("ALTER SYSTEM SET plan_cache_mode = force_custom_plan")
                    self.conn.execute("SELECT pg_reload_conf()")
                    self.custom_plans = True
                    info.update(created=True, collection=collection, key=key, index=self.index,
                                plan=[r[0] for r in plan], plan_cache_mode="force_custom_plan")
        self.ctx.note("ferretdb_search_index", info)
        return info

    def __exit__(self, *exc):
        if self.conn is not None:
            with self.conn:
                if self.custom_plans:
                    self.conn.execute("ALTER SYSTEM RESET plan_cache_mode")
                    self.conn.execute("SELECT pg_reload_conf()")
                if self.index:
                    self.conn.execute(f'DROP INDEX IF EXISTS "{datasets.STUDY_DB}"."{self.index}"')


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


class _MachineSampler:
    """Busy CPU seconds of the whole machine (all cores), sampled in a thread: rows like CPUSampler's."""

    def __init__(self, interval: float):
        self.interval, self.rows = interval, []
        self._stop = threading.Event()

    def _sample(self) -> None:
        self.rows.append({"t_s": float("nan"), "epoch_s": time.time(), "role": "machine",
                          "cpu_s": machine_busy_s(), "procs": -1})

    def __enter__(self) -> _MachineSampler:
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _read_app_stats(path: Path, ids: dict[str, Any]) -> pd.DataFrame:
    cols = ["epoch_s", "borrowed_tokens", "total_tokens", "in_flight", "loop_lag_s"]
    if not path.exists():
        return pd.DataFrame()
    df = pd.read_csv(path, names=cols, header=None, on_bad_lines="skip")
    df = df.astype({"epoch_s": float, "borrowed_tokens": int, "total_tokens": int, "in_flight": int,
                    "loop_lag_s": float})
    for k, v in reversed(ids.items()):
        df.insert(0, k, v)
    return df


def _cpu_between(cpu: pd.DataFrame, role: str, t0: float, t1: float, column: str = "cpu_s") -> float:
    """CPU seconds `role` used between epochs t0 and t1 (linear between samples); with
    column="wait_s", the seconds its threads waited for a core."""
    import numpy as np

    r = cpu[cpu["role"] == role].sort_values("epoch_s")
    if len(r) < 2 or column not in r:
        return float("nan")
    x, y = r["epoch_s"].to_numpy(float), r[column].to_numpy(float)
    return float(np.interp(t1, x, y) - np.interp(t0, x, y))


def _hold_figures(history: pd.DataFrame, samples: pd.DataFrame, cpu: pd.DataFrame, app: pd.DataFrame,
                  epoch0: float, p) -> dict[str, Any]:
    """The hold (all users running): its bounds, requests completed in it and the resources used."""
    out: dict[str, Any] = {}
    h = history[history.get("name", pd.Series(dtype=str)) == "Aggregated"] if not history.empty else history
    full = h[h["user_count"] >= p.users] if len(h) else h
    if full.empty:
        return {"hold_ok": 0, "hold_failed": 0}
    t0 = float(full["timestamp"].min())
    t1 = min(float(full["timestamp"].max()) + 1.0, t0 + p.hold_s)
    out["hold_start_s"], out["hold_end_s"] = t0 - epoch0, t1 - epoch0
    span = t1 - t0
    out["hold_wall_s"] = span
    if len(samples):
        end = samples["start_s"] + samples["latency_s"]
        inside = samples[(end >= out["hold_start_s"]) & (end < out["hold_end_s"])]
        out["hold_ok"] = completions_in_window(end, samples["ok"], out["hold_start_s"], out["hold_end_s"])
        out["hold_failed"] = int((~inside["ok"]).sum())
        out["hold_infrastructure"] = int(inside["infrastructure"].sum())
        ok = inside[inside["ok"]]
        out["hold_mean_latency_s"] = float(ok["latency_s"].mean()) if len(ok) else float("nan")
    for role in ("server", "locust", "database", "proxy", "machine"):
        out[f"hold_{role}_cpu_s"] = _cpu_between(cpu, role, t0, t1) if not cpu.empty else float("nan")
    for role in ("server", "database"):
        out[f"hold_{role}_wait_s"] = _cpu_between(cpu, role, t0, t1, "wait_s") if not cpu.empty else float("nan")
    if not app.empty:
        a = app[(app["epoch_s"] >= t0) & (app["epoch_s"] < t1)]
        if len(a):
            out["hold_busy_tokens_mean"] = float(a["borrowed_tokens"].mean())
            out["hold_total_tokens"] = int(a["total_tokens"].max())
            out["hold_in_flight_mean"] = float(a["in_flight"].mean())
            out["hold_loop_lag_p50_s"] = float(a["loop_lag_s"].median())
    return out


class Variant:
    def __init__(self, ctx, p, label: str, kind: str | None = None, extra: dict[str, Any] | None = None,
                 mongodb_uri: str | None = None):
        """`kind` is a key of VARIANTS (default: `label`); `label` is the recorded variant id;
        `extra` columns go into the `runs` row (e.g. the round trip of a crossover point);
        `mongodb_uri` replaces the stack's (a crossover's direct point)."""
        self.ctx, self.p, self.label = ctx, p, label
        self.mongodb_uri = mongodb_uri or ctx.servers.mongodb_uri
        self.kind = kind or label
        self.extra = dict(extra or {})
        self.app_variant, self.tokens = VARIANTS[self.kind]
        self.dir = ctx.artifacts / label.replace("[", "_").replace("]", "").replace("=", "").replace(",", "_")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_pids = database_pids(ctx.servers)

    def start_app(self, phase: str):
        """A fresh uvicorn process on a free loopback port, healthy and warmed up."""
        port = processes.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.stats_file = self.dir / f"app-stats-{phase}.csv"
        self.stats_file.unlink(missing_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", LISTINGS_API_MONGODB_URI=self.mongodb_uri,
                   LISTINGS_API_VARIANT=self.app_variant, LISTINGS_API_THREAD_TOKENS=str(self.tokens),
                   LISTINGS_API_QUERY=self.p.query, LISTINGS_API_STATS_FILE=str(self.stats_file))
        server = processes.start(f"uvicorn:{self.label}:{phase}", [
            sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port", str(port),
            "--loop", self.p.loop, "--no-access-log", "--log-level", "warning"],
            self.dir / f"uvicorn-{phase}.log", env=env, cwd=REPO_ROOT)
        self.base = {"app_variant": self.app_variant, "thread_tokens": self.tokens, "loop": self.p.loop,
                     "query": self.p.query, "port": port}
        try:
            self._wait_healthy(server)
            self._warm_up()
        except BaseException:
            server.stop()
            raise
        return server

    def run(self) -> None:
        p = self.p
        # Each attempt gets its own server: requests Locust left queued in the first (a sync
        # endpoint's thread-pool queue outlives the client's disconnect) must not delay the second.
        server = self.start_app("locust")
        try:
            row = self._locust(server, 0, p.locust_workers)
            if row["generator_saturated"] and p.saturation_workers > p.locust_workers:
                server.stop()
                server = self.start_app("locust-a1")
                row = self._locust(server, 1, p.saturation_workers)
        finally:
            server.stop()
        if self.label in p.openloop_variants:
            self.run_openloop(self._rates(row))

    def run_openloop(self, rates: list[tuple[float, float]], duration_s: float | None = None,
                     drain_s: float | None = None) -> list[dict[str, Any]]:
        """The open-loop phase alone on a fresh server: `rates` ((req/s, fraction) pairs) in turn,
        each for `duration_s` (default openloop_duration_s); returns the `openloop_runs` rows."""
        server = self.start_app("openloop")
        try:
            return self._openloop(server, rates, duration_s, drain_s)
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
                        and health.get("thread_tokens") == self.tokens and health.get("query") == self.p.query:
                    self.ctx.note(f"health_{self.label}", health)
                    return
            except OSError:
                pass
            if server.poll() is not None:
                break
            time.sleep(0.2)
        raise HarnessError(f"uvicorn ({self.label}) did not become healthy: {server.log_tail(15)}")

    def _warm_up(self) -> None:
        """Outside every window: the driver's pool, FastAPI's first-request paths. The requests are
        sequential (one client, no load): the median of the second half is the unloaded latency R0."""
        deadline = time.monotonic() + self.p.warmup_s
        lat = []
        while True:
            t0 = time.perf_counter()
            status, body = _get(self.url + self.p.path, self.p.request_timeout_s)
            lat.append(time.perf_counter() - t0)
            if status != 200 or not isinstance(json.loads(body), list):
                raise HarnessError(f"warm-up request failed: HTTP {status}")
            if time.monotonic() >= deadline and len(lat) >= 4:
                self.base["unloaded_latency_s"] = statistics.median(lat[len(lat) // 2:])
                return

    def _generator(self, prefix: Path, attempt: int, workers: int, env: dict[str, str]) -> list:
        """Locust: one process, or a master and `workers` workers talking over loopback only."""
        p = self.p
        # Locust stays on the study's interpreter when the app runs on another (`--python`).
        common = [study_python(), "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "INFO"]
        run_args = ["--headless", "-u", str(p.users), "-r", str(p.spawn_rate), "-t", f"{p.run_time_s}s",
                    "--host", self.url, "--csv", str(prefix), "--csv-full-history", "--only-summary",
                    "--stop-timeout", "1"]  # past the hold: no figure uses the stop
        if workers == 0:
            return [processes.start(f"locust:{self.label}", common + run_args,
                                    self.dir / f"locust-a{attempt}.log", env=env, cwd=REPO_ROOT)]
        port = processes.free_port()
        master = processes.start(f"locust-master:{self.label}", common + run_args + [
            "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--expect-workers", str(workers), "--expect-workers-max-wait", "60"],
            self.dir / f"locust-a{attempt}.log", env=env, cwd=REPO_ROOT)
        procs = [master]
        for k in range(workers):
            procs.append(processes.start(f"locust-worker{k}:{self.label}", common + [
                "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                self.dir / f"locust-a{attempt}-worker{k}.log", env=env, cwd=REPO_ROOT))
        return procs

    def _locust(self, server, attempt: int, workers: int) -> dict[str, Any]:
        p, ctx = self.p, self.ctx
        prefix = self.dir / f"locust-a{attempt}"
        samples_dir = self.dir / f"samples-a{attempt}"
        env = dict(os.environ, PYTHONUNBUFFERED="1", LISTINGS_PATH=p.path,
                   LISTINGS_WAIT_MIN_S=str(p.wait_min_s), LISTINGS_WAIT_MAX_S=str(p.wait_max_s),
                   LISTINGS_TIMEOUT_S=str(p.request_timeout_s), LISTINGS_SAMPLES_DIR=str(samples_dir))
        row: dict[str, Any] = {"variant": self.label, "attempt": attempt, "locust_workers": workers,
                               "kind": self.kind, **self.extra,
                               "users": p.users, "spawn_rate": p.spawn_rate, "ramp_s": p.ramp_s,
                               "hold_s": p.hold_s, "run_time_s": p.run_time_s, "think_mean_s":
                               (p.wait_min_s + p.wait_max_s) / 2, "request_timeout_s": p.request_timeout_s,
                               "cores": psutil.cpu_count(), **self.base}
        epoch0 = time.time()
        error = None
        with ctx.window(self.label, phase="locust", attempt=attempt, locust_workers=workers) as w:
            gens = self._generator(prefix, attempt, workers, env)
            try:
                tp = getattr(self.ctx.servers, "toxiproxy", None)
                with CPUSampler({"server": [server.pid], "locust": [g.pid for g in gens],
                                 "database": self.db_pids, "proxy": list(tp.pids) if tp else []},
                                p.cpu_sample_s) as cpu, \
                        _MachineSampler(p.cpu_sample_s) as machine:
                    cpu_epoch0 = time.time() - (time.perf_counter() - cpu.t0)
                    if gens[0].wait(p.run_time_s + p.request_timeout_s + 90) is None:
                        error = "locust did not stop in time"
            finally:
                for g in gens:
                    g.stop()
            row["wall_s"] = time.perf_counter() - w.t0
            samples = self._samples(samples_dir, epoch0, {"variant": self.label, "attempt": attempt})
            w.ops = len(samples)
        row["returncode"] = gens[0].poll()
        row["server_cpu_s"] = cpu.used("server")
        row["locust_cpu_s"] = cpu.used("locust")
        row["db_cpu_s"] = cpu.used("database")
        text = "".join((self.dir / f"locust-a{attempt}{sfx}.log").read_text(errors="replace")
                       for sfx in ["", *[f"-worker{k}" for k in range(workers)]]
                       if (self.dir / f"locust-a{attempt}{sfx}.log").exists())
        row["generator_saturated"] = bool(CPU_WARNING.search(text))
        cpu_rows = [{"variant": self.label, "phase": "locust", "attempt": attempt, "rate": float("nan"),
                     "epoch_s": cpu_epoch0 + r["t_s"], **r} for r in cpu.rows]
        cpu_rows += [{"variant": self.label, "phase": "locust", "attempt": attempt, "rate": float("nan"), **r}
                     for r in machine.rows]
        ctx.record("cpu", cpu_rows)
        ids = {"variant": self.label, "attempt": attempt}
        tables = {}
        for kind, table in (("stats", "locust_stats"), ("stats_history", "locust_history"),
                            ("failures", "locust_failures"), ("exceptions", "locust_exceptions")):
            df = _read_locust_csv(Path(f"{prefix}_{kind}.csv"), **ids)
            tables[table] = df
            if not df.empty:
                ctx.record(table, df)
        app = _read_app_stats(self.stats_file, ids)
        if not app.empty:
            ctx.record("app_stats", app)
        row.update(_hold_figures(tables["locust_history"], samples, pd.DataFrame(cpu_rows), app, epoch0, p))
        row["requests"] = len(samples)
        row["failures"] = int((~samples["ok"]).sum()) if len(samples) else 0
        if row["returncode"] not in (0, 1):  # 1: some requests failed (recorded as failures)
            error = error or f"locust exited with code {row['returncode']}: {gens[0].log_tail(10)}"
        if not Path(f"{prefix}_stats.csv").exists():
            error = error or f"locust wrote no CSV: {gens[0].log_tail(10)}"
        row["status"] = "failed" if error else "ok"
        row["error"] = error or ""
        ctx.record("runs", [row])
        if error:
            raise RecordedError(error)  # already in `runs`
        return row

    def _samples(self, samples_dir: Path, epoch0: float, ids: dict[str, Any]) -> pd.DataFrame:
        parts = []
        for f in sorted(samples_dir.glob("samples-*.csv")):
            with open(f, newline="") as fh:
                rows = [r for r in csv.reader(fh) if len(r) == 6]
            if rows:
                parts.append(pd.DataFrame(rows, columns=["start", "ms", "ok", "task", "pid", "infra"]))
        if not parts:
            return pd.DataFrame({"ok": pd.Series(dtype=bool)})
        raw = pd.concat(parts, ignore_index=True)
        df = pd.DataFrame({
            "variant": ids["variant"], "attempt": ids["attempt"],
            "task": raw["task"].astype(int), "pid": raw["pid"].astype(int),
            "start_s": raw["start"].astype(float) - epoch0,
            "latency_s": raw["ms"].astype(float) / 1000.0,
            "ok": raw["ok"].astype(int).astype(bool),
            "infrastructure": raw["infra"].astype(int).astype(bool),
        }).sort_values("start_s", ignore_index=True)
        self.ctx.record("samples", df)
        shutil.rmtree(samples_dir, ignore_errors=True)   # the samples table holds every row: kept once
        return df

    def _rates(self, locust_row: dict[str, Any]) -> list[tuple[float, float]]:
        p = self.p
        if p.openloop_rates:
            return [(r, float("nan")) for r in p.openloop_rates]
        achieved = locust_row.get("hold_ok", 0) / locust_row.get("hold_wall_s", float("inf"))
        rates: dict[float, float] = {}
        for f in p.openloop_rate_fractions:  # rates floored at openloop_min_rate may coincide: run once
            rates.setdefault(round(max(p.openloop_min_rate, f * achieved), 6), f)
        return list(rates.items())

    def _openloop(self, server, rates: list[tuple[float, float]], duration_s: float | None = None,
                  drain_s: float | None = None) -> list[dict[str, Any]]:
        p, ctx = self.p, self.ctx
        duration_s = p.openloop_duration_s if duration_s is None else duration_s
        drain_s = p.openloop_drain_s if drain_s is None else drain_s
        out = []
        for rate, fraction in rates:
            with CPUSampler({"server": [server.pid], "database": self.db_pids}, p.cpu_sample_s) as cpu:
                with ctx.window(self.label, phase="openloop", rate=rate, rate_fraction=fraction) as w:
                    res = openloop.run(self.url + self.p.path, rate, duration_s,
                                       connections=p.openloop_connections, timeout_s=p.request_timeout_s,
                                       drain_s=drain_s, loop=p.loop)
                    df = res.frame()
                    w.ops = int(df["sent"].sum())
            df.insert(0, "connections", p.openloop_connections)
            df.insert(0, "rate_fraction", fraction)
            df.insert(0, "rate", rate)
            df.insert(0, "variant", self.label)
            ctx.record("openloop", df)
            ctx.record("cpu", [{"variant": self.label, "phase": "openloop", "attempt": 0, "rate": rate, **r}
                               for r in cpu.rows])
            row = {"variant": self.label, "rate": rate, "rate_fraction": fraction,
                   "connections": p.openloop_connections, "duration_s": duration_s,
                   "scheduled": len(df), "sent": int(df["sent"].sum()), "ok": int(df["ok"].sum()),
                   "unsent": int((~df["sent"]).sum()), "wall_s": res.wall_s,
                   "server_cpu_s": cpu.used("server"),
                   "db_cpu_s": cpu.used("database"), **self.base, **self.extra}
            ctx.record("openloop_runs", [row])
            out.append(row)
        return out


