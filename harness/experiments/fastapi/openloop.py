"""Seed 000's latency claims, open loop: every variant offered the same arrival rates.

Why its own experiment. In fastapi_locust's closed loop (500 users, 1 s mean think time) the
latency follows from the throughput (R = N/X - Z): its medians restate its max RPS and add no
evidence. Here requests come on a fixed schedule (`harness.core.openloop`: each request's latency runs
from its intended send time, so a stall or a queue cannot hide), and every variant gets the same
rates, so a latency difference is the app's.

The rates. Fractions (`rate_fractions`) of the reference variant's capacity (`reference`: the
seed's one-thread sync app), measured in the same repeat by a probe: the reference app offered
`probe_rate` req/s for `probe_s` (far above its capacity), its completions per second of the
probe's wall time. At 0.5 the one-thread app is half busy; at 0.9 it is near saturation, where a
single-server queue's waiting time grows fastest, while an app with more capacity is not. Rates
above 1 are not run: there the one-thread app's queue grows without bound and its latency is set
by the window's length, not by the app.

Per variant (in `ctx.order()`): one fresh uvicorn app, then each rate in increasing order, each
`openloop_duration_s` long with `openloop_drain_s` to finish. Network and query: as fastapi_locust
(through the proxy, `rtt_ms` added; `query=page`), and the same FerretDB index for the run.

Variant ids: `<variant>` for the measured rates (the rate and its fraction are columns),
`<reference>[probe]` for the probe. Tables: `openloop` (one row per scheduled request: intended,
actual and end times, ok, sent), `openloop_runs` (one row per variant and rate: counts, wall,
app and database CPU), `cpu` (role samples), `probe` (the capacity each repeat measured), `windows`.
harness.experiments.fastapi.analysis.openloop_table() and metrics() turn them into figures: per variant and
load, corrected p50/p95/p99 (unsent requests censored at the window's end, failures at their time),
achieved rate and the generator's send lag; a rate the generator fell behind on is `invalid` and
never a figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...core import datasets
from ...core.errors import HarnessError
from ..base import OTHER_COLUMNS, Experiment, Metric, variant_id, window_columns
from .analysis import OPENLOOP_LATENCY_FIGURES, openloop_rates, openloop_table
from .params import RESHAPING, FastapiLocustParams
from .workload import VARIANTS, Variant, ping, search_index

_ANY = {OTHER_COLUMNS: "any"}


@dataclass(frozen=True)
class OpenloopParams(FastapiLocustParams):
    variants: tuple[str, ...] = ("sync_1thread", "async")
    reference: str = "sync_1thread"            # rates are fractions of this variant's capacity
    rate_fractions: tuple[float, ...] = (0.5, 0.9)
    probe_rate: float = 1000.0                 # offered by the probe: far above any variant's capacity here
    probe_s: float = 5.0
    probe_drain_s: float = 2.0
    openloop_duration_s: float = 20.0
    openloop_drain_s: float = 10.0
    openloop_connections: int = 64             # enough that the generator never waits for one below capacity
    timeout_s: float = 600.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("rate_fractions", "probe_rate", "probe_s")
        self.require_non_negative("probe_drain_s")
        self.require_choice("reference", tuple(VARIANTS))
        if any(f >= 1.0 for f in self.rate_fractions):
            raise HarnessError("parameter rate_fractions must be below 1 (of the reference's capacity): "
                               f"got {self.rate_fractions}")


# full: 10 s windows; quick: 5 s windows (a one-repeat look)
FULL_SIZES = {"openloop_duration_s": 10.0, "openloop_drain_s": 5.0, "probe_s": 3.0}
QUICK_SIZES = {"openloop_duration_s": 5.0, "openloop_drain_s": 3.0, "probe_s": 2.0}


class FastapiOpenloop(Experiment):
    name = "fastapi_openloop"
    title = "Sync vs async FastAPI latency at the same arrival rates (open loop)"
    needs = ("mongodb",)
    params_type = OpenloopParams
    analysis = "harness.experiments.fastapi.analysis"
    family = "fastapi"
    ceiling = "python_cpu"
    drivers = ("uvloop", "fastapi", "starlette", "uvicorn", "anyio", "locust")
    notebook = "04_fastapi_locust.ipynb"
    failure_tolerance = 0.01
    repeats = {"smoke": 1, "quick": 1, "full": 3, "seed": 3}
    headline = (Metric("p50_ms", "ms", "lower"), Metric("p95_ms", "ms", "lower"))
    tables = {
        "openloop": {"variant": "str", "rate": "float", **_ANY},
        "openloop_runs": {"variant": "str", "rate": "float", **_ANY},
        "cpu": {"variant": "str", "phase": "str", "role": "str", "cpu_s": "float", **_ANY},
        "probe": {"variant": "str", "capacity_rps": "float", **_ANY},
        "windows": window_columns(**_ANY),
    }
    profiles = {
        "seed": {},
        "full": FULL_SIZES, "quick": QUICK_SIZES,
        "smoke": {"documents": 300, "openloop_duration_s": 1.0, "openloop_drain_s": 3.0, "probe_s": 1.5,
                  "warmup_s": 0.3, "probe_rate": 300.0, "openloop_connections": 16, "health_timeout_s": 30.0,
                  "ping_count": 5, "timeout_s": 300.0},
    }

    metrics = (Metric("failure_rate", "ratio", "lower"), Metric("lag_p99_ms", "ms", "lower"),
               *(Metric(name, "ms", "lower") for _, name in OPENLOOP_LATENCY_FIGURES),
               Metric("achieved_rps", "req/s", "higher"), Metric("capacity_rps", "req/s", "higher"))

    def compute_metrics(self, run, rows) -> None:
        """Per clean rate `load<pct>.<variant>`: p50_ms, p95_ms, p99_ms (corrected latency),
        achieved_rps, lag_p99_ms, failure_rate; `reference.capacity_rps` (the probe)."""
        t = openloop_table(run, self.name)
        if t.empty:
            return
        for v, r in openloop_rates(t):
            rows.put(v, "failure_rate", r["repeat"], r["failure_rate"])
            rows.put(v, "lag_p99_ms", r["repeat"], r["lag_p99_ms"])
            if not r["clean"]:
                continue  # kept raw (openloop_table shows why), never a figure
            for q, name in OPENLOOP_LATENCY_FIGURES:
                rows.put(v, name, r["repeat"], r[q])
            rows.put(v, "achieved_rps", r["repeat"], r["achieved_rps"])
        for _, r in run.table(self.name, "probe").iterrows():
            rows.put("reference", "capacity_rps", r["repeat"], r["capacity_rps"])

    def datasets(self, p):
        return [datasets.Listings(p.documents)]

    def run(self, ctx) -> None:
        p: OpenloopParams = ctx.params
        ctx.note("settings", {"query": p.query, "path": p.path, "via_proxy": p.via_proxy, "rtt_ms": p.rtt_ms,
                              "reference": p.reference, "rate_fractions": list(p.rate_fractions),
                              "probe": {"rate": p.probe_rate, "s": p.probe_s, "drain_s": p.probe_drain_s},
                              "duration_s": p.openloop_duration_s, "connections": p.openloop_connections})
        ctx.note("db_ping", ping(ctx.servers.mongodb_uri, p.ping_count))
        ctx.note("data_reshaping", RESHAPING.get(p.query, "none: the seed's aggregation on the full collection"))
        with search_index(ctx, p.query, p.index_probe):
            probe = Variant(ctx, p, variant_id(p.reference, probe=True), kind=p.reference).run_openloop(
                [(p.probe_rate, math.nan)], duration_s=p.probe_s, drain_s=p.probe_drain_s)[0]
            capacity = probe["ok"] / probe["wall_s"] if probe["wall_s"] > 0 else math.nan
            ctx.record("probe", [{"variant": p.reference, "capacity_rps": capacity, "ok": probe["ok"],
                                  "wall_s": probe["wall_s"], "offered_rps": p.probe_rate}])
            if not capacity > 0:
                raise HarnessError(f"the {p.reference} probe completed no request: no capacity to scale rates by")
            rates = [(round(f * capacity, 3), f) for f in sorted(p.rate_fractions)]
            for label in ctx.order(p.variants):
                Variant(ctx, p, label).run_openloop(rates)


EXPERIMENT = FastapiOpenloop()
