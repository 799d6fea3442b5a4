"""Seed 000: the same MongoDB-backed FastAPI endpoint, sync vs async, under Locust ramping to 500 users.

Variants (the `variant` column), each a fresh uvicorn process (one worker, loopback, free port):
    sync_1thread    `def` endpoint, sync MongoClient, AnyIO thread limiter = 1 token (the seed's)
    sync_40threads  the same with AnyIO's default 40 tokens
    async           `async def` endpoint, AsyncMongoClient (the seed's async side)
    mixed           `async def` endpoint calling the sync driver: blocks the event loop
The app is `harness.experiments.fastapi.apps.listings_api`; `query` picks its query:
    page   (default) one equality on `page_key` in `listings_page`, the dataset's companion
           collection of the top-rated listings' projected fields, 5 to a key (MongoDB's subset
           pattern): the database reads one page of small documents; page 0 is the seed's answer
    fast   one equality on the listings' precomputed `search_key` (about 30 full documents decoded
           per request by FerretDB)
    seed   seed 000's aggregation, which FerretDB answers by scanning the whole collection

Settings (fixed; the seed gives only "scaled up to 500 concurrent users"):
    ramp      `users` at `spawn_rate` users/s (seed: 500 at 10/s, 50 s; full: 500 at 50/s, 10 s)
    hold      `hold_s` at `users` after the ramp (seed: 30 s; full: 15 s); Locust runs ramp + hold
    think     uniform between `wait_min_s` and `wait_max_s` (0.5-1.5 s, mean 1 s) after each response
    max_rps   successful requests completed during the hold / the hold's length (req/s): the
              sustained throughput at 500 users; Locust's own peak "current RPS" (a ~10 s sliding
              window, the seed's "Max RPS") is kept beside it as `locust_peak_rps`
Network: `via_proxy=True`, `rtt_ms=2.0` by default (an app and its cloud database in different
availability zones of one region; see docs/LOAD_TESTING.md for the source). The study routes the
traffic (harness.core.network, contract C4); this experiment uses `ctx.servers` as given and measures
the round trip it actually sees (`db_ping`, median of 50 pings) at the start of each repeat.

Per variant, one Locust run (closed loop). When Locust warns that its CPU exceeded 90%
(`generator_saturated`), the variant runs again (attempt 1) with Locust's master and
`saturation_workers` worker processes bound to loopback; both attempts are kept, the last one is used.
An optional open-loop phase (`openloop_variants`, off by default: latency claims need it, and it
belongs in an experiment of its own) sends requests at fixed rates with `harness.core.openloop`.

Measured for the bottleneck (harness.experiments.fastapi.analysis names it): CPU of the app, of Locust, of the
database (FerretDB + its PostgreSQL postmaster and all its children, so background processes such
as the checkpointer and autovacuum count) and of the whole machine over the hold; the app's own
samples (every 0.25 s, from a thread: thread-limiter busy tokens, requests in flight, event-loop lag).

Tables (one repeat):
    runs             one row per Locust attempt (see `_locust` for the columns)
    samples          one row per Locust request: variant, attempt, task, pid, start_s (since launch),
                     latency_s, ok, infrastructure (connection refused: the app is gone)
    locust_stats / locust_history / locust_failures / locust_exceptions   Locust's CSVs
    cpu              psutil samples: variant, phase, attempt, rate, t_s, epoch_s, role
                     (server | locust | database | machine), cpu_s (cumulative), procs
    app_stats        the app's samples: variant, attempt, epoch_s, borrowed_tokens, total_tokens,
                     in_flight, loop_lag_s
    openloop / openloop_runs   the optional open-loop phase (see harness.core.openloop)
    windows          ctx.window(): phase locust (ops = Locust requests) and phase openloop
"""

from __future__ import annotations

import psutil

from ...core import datasets
from ...core.errors import HarnessError
from ...core.measure import error_text
from ..base import OTHER_COLUMNS, Experiment, Metric, window_columns
from .analysis import SUMMARY_METRICS, available, openloop_table, put_summary_rows, summary_table
from .params import RESHAPING, FastapiLocustParams
from .workload import (
    APP,
    CLOUD_RTT_MS,
    CPU_WARNING,
    LOCUSTFILE,
    QUERIES,
    REPO_ROOT,
    VARIANTS,
    Variant,
    ping,
    search_index,
)

__all__ = ["APP", "CLOUD_RTT_MS", "CPU_WARNING", "LOCUSTFILE", "QUERIES", "REPO_ROOT", "VARIANTS", "FastapiLocust",
           "FastapiLocustParams"]
_ANY = {OTHER_COLUMNS: "any"}


class FastapiLocust(Experiment):
    name = "fastapi_locust"
    title = "Sync vs async FastAPI + PyMongo under Locust (closed loop, the seed's 500 users)"
    needs = ("mongodb",)
    params_type = FastapiLocustParams
    analysis = "harness.experiments.fastapi.analysis"
    family = "fastapi"
    ceiling = "python_cpu"
    drivers = ("uvloop", "fastapi", "starlette", "uvicorn", "anyio", "locust")
    notebook = "04_fastapi_locust.ipynb"
    failure_tolerance = 0.01               # overload is the subject: a cell fails above 1% failures
    repeats = {"smoke": 1, "quick": 1, "full": 5, "seed": 3}   # full: docs/POWER.md (000 needs 4-5)
    headline = (Metric("max_rps", "req/s", "higher"), Metric("median_ms", "ms", "lower"),
                Metric("p95_ms", "ms", "lower"), Metric("failure_rate", "ratio", "lower"),
                # neither better: it grows with throughput; per request, lower is better
                Metric("db_cpu_pct", "% of a core", ""), Metric("db_cpu_ms_per_request", "ms", "lower"))
    tables = {
        "runs": {"variant": "str", "attempt": "int", "status": "str", **_ANY},
        "samples": {"variant": "str", "attempt": "int", "task": "int", "start_s": "float",
                    "latency_s": "float", "ok": "bool", "infrastructure": "bool", **_ANY},
        "locust_stats": {"variant": "str", "attempt": "int", **_ANY},
        "locust_history": {"variant": "str", "attempt": "int", **_ANY},
        "locust_failures": {"variant": "str", "attempt": "int", **_ANY},
        "locust_exceptions": {"variant": "str", "attempt": "int", **_ANY},
        "cpu": {"variant": "str", "phase": "str", "role": "str", "cpu_s": "float", **_ANY},
        "app_stats": {"variant": "str", "attempt": "int", "epoch_s": "float", "borrowed_tokens": "int",
                      "total_tokens": "int", "in_flight": "int", "loop_lag_s": "float"},
        "openloop": {"variant": "str", "rate": "float", **_ANY},
        "openloop_runs": {"variant": "str", "rate": "float", **_ANY},
        "windows": window_columns(**_ANY),
    }
    profiles = {
        "seed": {},
        # full: the seed's 500 users and think time, a 10 s ramp and a 15 s hold
        "full": {"spawn_rate": 50.0, "hold_s": 15.0, "timeout_s": 400.0},
        # quick: the same 500 users and think time (so the one-thread app is offered several times
        # its capacity), a 2 s ramp and a 5 s hold (a one-repeat look)
        "quick": {"spawn_rate": 250.0, "hold_s": 5.0, "timeout_s": 400.0},
        "smoke": {"documents": 300, "users": 4, "spawn_rate": 4.0, "hold_s": 3.0, "wait_min_s": 0.1,
                  "wait_max_s": 0.3, "saturation_workers": 0, "openloop_variants": tuple(VARIANTS),
                  "openloop_rate_fractions": (0.5,), "openloop_duration_s": 1.0, "openloop_drain_s": 5.0,
                  "warmup_s": 0.3, "openloop_connections": 4, "health_timeout_s": 30.0, "ping_count": 10,
                  "timeout_s": 300.0},
    }

    metrics = (*SUMMARY_METRICS, Metric("openloop_r{k}_corrected_p50_ms", "ms", "lower"),
               Metric("openloop_r{k}_corrected_p99_ms", "ms", "lower"))

    def compute_metrics(self, run, rows) -> None:
        put_summary_rows(rows, summary_table(run))
        ol = openloop_table(run) if available(run) else None
        if ol is None or ol.empty:
            return
        for (rep, v), g in ol.groupby(["repeat", "variant"]):
            for k, (_, r) in enumerate(g.sort_values("rate").iterrows()):
                if r["invalid"]:
                    continue  # a rate the generator fell behind on is kept raw, never a figure
                for q in ("corrected_p50_ms", "corrected_p99_ms"):
                    rows.put(v, f"openloop_r{k}_{q}", rep, r[q])

    def datasets(self, p):
        return [datasets.Listings(p.documents)]

    def run(self, ctx) -> None:
        p: FastapiLocustParams = ctx.params
        from importlib.metadata import version

        # Never `import locust` here: it monkey-patches sockets and threads with gevent.
        ctx.note("locust_version", version("locust"))
        ctx.note("server_implementation", ctx.servers.mongodb.implementation if ctx.servers.mongodb else None)
        ctx.note("settings", {"users": p.users, "spawn_rate": p.spawn_rate, "ramp_s": p.ramp_s, "hold_s": p.hold_s,
                              "think_s": [p.wait_min_s, p.wait_max_s], "run_time_s": p.run_time_s,
                              "query": p.query, "path": p.path, "via_proxy": p.via_proxy, "rtt_ms": p.rtt_ms,
                              "max_rps": "successful requests completed in the hold / hold length",
                              "cores": psutil.cpu_count()})
        ctx.note("variants", {v: {"app_variant": VARIANTS[v][0], "thread_tokens": VARIANTS[v][1]}
                              for v in p.variants})
        ctx.note("db_ping", ping(ctx.servers.mongodb_uri, p.ping_count))
        ctx.note("data_reshaping", RESHAPING.get(p.query, "none: the seed's aggregation on the full collection"))
        with search_index(ctx, p.query, p.index_probe):
            failed = []
            for label in ctx.order(p.variants):
                try:
                    Variant(ctx, p, label).run()
                except Exception as e:  # recorded; the next variant still runs
                    ctx.log.exception("variant %s failed", label)
                    if not getattr(e, "recorded", False):
                        ctx.record("runs", [{"variant": label, "attempt": 0, "status": "failed",
                                             "error": error_text(e, 2000)}])
                    failed.append(label)
        ctx.note("failed_variants", failed)
        if failed and len(failed) == len(p.variants):
            raise HarnessError(f"every variant failed: {', '.join(failed)}")


EXPERIMENT = FastapiLocust()
