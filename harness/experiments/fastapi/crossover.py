"""Beyond seed 000: the four FastAPI variants at several database round-trip times.

The question a reader with their own database has: above which round trip does the async app beat
the 40-thread sync one? Each point runs every variant (`harness.experiments.fastapi.workload.Variant`, Locust
closed loop, the same 500 users and think time as fastapi_locust, a short ramp and hold) with the
Toxiproxy latency toxic set to `rtt_ms` on the database path, plus one `direct` point that bypasses
the proxy (the proxy's own cost). The study routes this experiment through the proxy with no toxic
(`via_proxy=True`, `rtt_ms=0`); the experiment sets the toxic per point through Toxiproxy's API and
measures the round trip each point actually had (`points` table: median of `ping_count` pings).

harness.experiments.fastapi.analysis.crossover() puts max RPS and p95 against the round trip, the measured
crossover (async over sync_40threads), and a queueing model's prediction beside it:
sync with T threads serves at most T / (rtt + s) requests/s, s its own service time per request.

Tables: those of fastapi_locust (variant ids `<variant>[rtt=<ms>]` or `<variant>[direct]`, the
`runs` rows carry `rtt_ms` and `path`), plus `points` (path, rtt_ms, measured ping).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core import datasets, network
from ...core.errors import HarnessError
from ...core.measure import error_text
from ..base import OTHER_COLUMNS, Experiment, Metric, variant_id, window_columns
from .analysis import SUMMARY_METRICS, put_summary_rows, summary_table
from .params import RESHAPING, FastapiLocustParams
from .workload import VARIANTS, Variant, ping, search_index

_ANY = {OTHER_COLUMNS: "any"}


@dataclass(frozen=True)
class CrossoverParams(FastapiLocustParams):
    rtt_ms: float = 0.0                    # the study's route: through the proxy, no toxic
    rtts_ms: tuple[float, ...] = (0, 1, 5, 25, 100, 200)
    direct: bool = True                    # one point bypassing the proxy
    spawn_rate: float = 250.0              # 500 users in 2 s: the ramp is not the subject here
    hold_s: float = 8.0
    saturation_workers: int = 0
    ping_count: int = 20
    timeout_s: float = 1500.0

    def validate(self) -> None:
        super().validate()
        self.require_non_negative("rtts_ms")
        for r in self.rtts_ms:
            network.check_setting(True, r, 0.0)
        if not self.via_proxy:
            raise HarnessError("parameter via_proxy must be true: the crossover sets the proxy's delay")


# full: three round trips; quick: the two ends of them, shorter holds and no direct point (a
# one-repeat look)
FULL_SIZES = {"variants": ("sync_40threads", "async"), "rtts_ms": (0, 25, 100), "timeout_s": 600.0}
QUICK_SIZES = {**FULL_SIZES, "rtts_ms": (0, 100), "hold_s": 4.0, "direct": False}


class FastapiCrossover(Experiment):
    name = "fastapi_crossover"
    title = "Sync vs async FastAPI by database round-trip time (Toxiproxy), with a queueing model"
    needs = ("mongodb",)
    params_type = CrossoverParams
    analysis = "harness.experiments.fastapi.analysis"
    family = "fastapi"
    ceiling = "python_cpu"
    drivers = ("uvloop", "fastapi", "starlette", "uvicorn", "anyio", "locust")
    notebook = "04_fastapi_locust.ipynb"
    failure_tolerance = 0.01
    repeats = {"smoke": 1, "quick": 1, "full": 3, "seed": 3}
    headline = (Metric("max_rps", "req/s", "higher"), Metric("p95_ms", "ms", "lower"))
    tables = {
        "runs": {"variant": "str", "attempt": "int", "status": "str", **_ANY},
        "samples": {"variant": "str", "attempt": "int", "latency_s": "float", "ok": "bool",
                    "infrastructure": "bool", **_ANY},
        "locust_stats": {"variant": "str", **_ANY}, "locust_history": {"variant": "str", **_ANY},
        "locust_failures": {"variant": "str", **_ANY}, "locust_exceptions": {"variant": "str", **_ANY},
        "cpu": {"variant": "str", "role": "str", **_ANY},
        "app_stats": {"variant": "str", "epoch_s": "float", **_ANY},
        "points": {"path": "str", "rtt_ms": "float", "ping_median_ms": "float", **_ANY},
        "windows": window_columns(**_ANY),
    }
    profiles = {
        "seed": {},
        "full": FULL_SIZES, "quick": QUICK_SIZES,
        "smoke": {"documents": 300, "variants": ("sync_40threads", "async"), "rtts_ms": (5,), "users": 4,
                  "spawn_rate": 4.0, "hold_s": 2.0, "wait_min_s": 0.1, "wait_max_s": 0.3, "ping_count": 5,
                  "warmup_s": 0.3, "health_timeout_s": 30.0, "timeout_s": 300.0},
    }

    metrics = SUMMARY_METRICS

    def compute_metrics(self, run, rows) -> None:
        put_summary_rows(rows, summary_table(run, experiment=self.name))

    def datasets(self, p):
        return [datasets.Listings(p.documents)]

    def run(self, ctx) -> None:
        p: CrossoverParams = ctx.params
        tp = ctx.servers.toxiproxy
        if tp is None:
            raise HarnessError("fastapi_crossover needs the Toxiproxy route (the study provides it with "
                               "via_proxy=true); none in this stack")
        api = network.Toxiproxy(tp.uri)
        proxy_uri = ctx.servers.mongodb_uri
        _host, port = network.mongodb_endpoint(proxy_uri)
        name, proxy = next(((n, d) for n, d in api.proxies().items()
                            if d["listen"].rsplit(":", 1)[-1] == str(port)), (None, None))
        if name is None or proxy is None:
            raise HarnessError(f"no Toxiproxy proxy listens on port {port} (the MongoDB route)")
        direct_uri = network.mongodb_via(proxy_uri, proxy["upstream"])
        base = [t["name"] for t in api.toxics(name)]
        points = [("proxy", float(r)) for r in p.rtts_ms] + ([("direct", 0.0)] if p.direct else [])
        ctx.note("crossover_points", [{"path": a, "rtt_ms": b} for a, b in points])
        try:
            ctx.note("data_reshaping", RESHAPING.get(p.query, "none: the seed's aggregation"))
            with search_index(ctx, p.query, p.index_probe):
                for path, rtt in ctx.order(points):
                    self._point(ctx, p, api, name, path, rtt, proxy_uri, direct_uri)
        finally:
            for t in api.toxics(name):
                if t["name"] not in base:
                    api.remove_toxic(name, t["name"])

    def _point(self, ctx, p, api, proxy_name, path, rtt, proxy_uri, direct_uri) -> None:
        toxic = None
        if path == "proxy" and rtt > 0:
            toxic = api.add_toxic(proxy_name, "latency", {"latency": int(rtt), "jitter": 0},
                                  stream="downstream", name=f"crossover_{int(rtt)}")["name"]
        try:
            uri = direct_uri if path == "direct" else proxy_uri
            measured = ping(uri, p.ping_count)
            ctx.record("points", [{"path": path, "rtt_ms": rtt, "ping_median_ms": measured["median_ms"],
                                   "ping_min_ms": measured["min_ms"], "ping_max_ms": measured["max_ms"]}])
            for kind in ctx.order(p.variants):
                label = variant_id(kind, direct=True) if path == "direct" else variant_id(kind, rtt=int(rtt))
                try:
                    Variant(ctx, p, label, kind=kind, extra={"rtt_ms": rtt, "path": path,
                                                             "ping_median_ms": measured["median_ms"]},
                            mongodb_uri=uri).run()
                except Exception as e:
                    ctx.log.exception("%s failed", label)
                    if not getattr(e, "recorded", False):
                        ctx.record("runs", [{"variant": label, "attempt": 0, "status": "failed",
                                             "error": error_text(e, 2000), "rtt_ms": rtt, "path": path}])
        finally:
            if toxic:
                api.remove_toxic(proxy_name, toxic)


assert set(CrossoverParams().variants) <= set(VARIANTS)
EXPERIMENT = FastapiCrossover()
