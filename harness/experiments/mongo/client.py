"""A client per request against one shared client (seed 001, section 1).

`per_request`: create a client, run one `find_one({"customer": c})`, close the client -- timed as a
whole, `iterations` times in sequence. `shared`: the same query on one client created beforehand.
Both after `warmup_s` of the same work; on every loop in `loops` and driver in `drivers`.

Variant ids: `per_request[loop=asyncio,driver=pymongo]`, `shared[loop=asyncio,driver=pymongo]`, ...,
run in `ctx.order()` (reversed on odd repeats).
Tables (schemas in `tables` below):
- `samples`: one row per query; latency_s includes the client's creation and close for per_request;
- `windows`: one row per variant.
Notes: `ferretdb_backend_index`.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from ...core import datasets
from ...core.measure import error_text
from ..base import Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import SETUP_SUFFIXES, client_summary, setup_suffix
from .workload import (
    DOCUMENTS,
    DRIVERS,
    LOOPS,
    async_client,
    customer_stream,
    ferretdb_backend_index,
    note_timeouts,
    orders,
    run_async,
)

MODES = ("per_request", "shared")


@dataclass(frozen=True)
class ClientParams(Params):
    documents: int = DOCUMENTS["seed"]
    iterations: int = 1000
    modes: tuple[str, ...] = MODES
    loops: tuple[str, ...] = LOOPS
    drivers: tuple[str, ...] = DRIVERS
    seed: int = 1
    backend_index: bool = True
    timeout_s: float = 300.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "iterations")
        self.require_choice("modes", MODES)
        self.require_choice("loops", LOOPS)
        self.require_choice("drivers", DRIVERS)


class ClientPerRequest(Experiment):
    name = "mongo_client"
    title = "A client created per request against one shared client"
    needs = ("mongodb",)
    params_type = ClientParams
    profiles = {"seed": {},
                "full": {"documents": DOCUMENTS["full"], "iterations": 200, "warmup_s": 0.5},
                "quick": {"documents": DOCUMENTS["quick"], "iterations": 100, "warmup_s": 0.3},
                "smoke": {"documents": DOCUMENTS["smoke"], "iterations": 10, "warmup_s": 0.1,
                          "drivers": ("pymongo",), "loops": ("asyncio",)}}

    repeats = {"smoke": 1, "quick": 1, "full": 6, "seed": 10}   # full: docs/POWER.md (001-client needs 4)
    analysis = "harness.experiments.mongo.analysis"
    family = "mongo"
    ceiling = "python_cpu"
    drivers = ("pymongo", "motor")
    notebook = "02_mongo_client_bulk_models.ipynb"
    headline = (Metric("per_request_ms", "ms", "lower"), Metric("shared_ms", "ms", "lower"))
    tables = {"samples": {"variant": "str", "mode": "str", "loop": "str", "driver": "str", "task": "int",
                          "start_s": "float", "latency_s": "float", "ok": "bool", "error": "str"},
              "windows": window_columns(mode="str", loop="str", driver="str", iterations="int")}

    def datasets(self, p: ClientParams) -> list:
        return [datasets.Orders(p.documents)]

    metrics = (*(Metric(f"{mode}{suffix}{q}", "ms", "lower") for mode in MODES for suffix in SETUP_SUFFIXES
                 for q in ("_ms", "_p50_ms")),
               *(Metric(f"ratio{suffix}", "ratio", "lower") for suffix in SETUP_SUFFIXES))

    def compute_metrics(self, run, rows) -> None:
        per: dict[tuple[int, str], dict[str, float]] = {}
        for _, r in client_summary(run).iterrows():
            suffix = setup_suffix(r.loop, r.driver)
            rows.put("", f"{r['mode']}{suffix}_ms", r["repeat"], r.mean_ms)
            rows.put("", f"{r['mode']}{suffix}_p50_ms", r["repeat"], r.p50_ms)
            per.setdefault((int(r["repeat"]), suffix), {})[r["mode"]] = r.mean_ms
        for (rep, suffix), modes in per.items():
            if modes.get("shared") and "per_request" in modes:
                rows.put("", f"ratio{suffix}", rep, modes["per_request"] / modes["shared"])

    def run(self, ctx) -> None:
        p: ClientParams = ctx.params
        note_timeouts(ctx)
        with ferretdb_backend_index(ctx, p.backend_index):
            for pt in ctx.order(grid(loop=p.loops, driver=p.drivers, mode=p.modes)):
                mode, loop, driver = pt["mode"], pt["loop"], pt["driver"]
                variant = variant_id(mode, loop=loop, driver=driver)
                rows = run_async(functools.partial(self._variant, ctx, variant, mode, loop, driver), loop=loop)
                ctx.record("samples", [{"variant": variant, "mode": mode, "loop": loop, "driver": driver,
                                        **r} for r in rows])

    async def _variant(self, ctx, variant: str, mode: str, loop: str, driver: str) -> list[dict]:
        p: ClientParams = ctx.params
        uri = ctx.servers.mongodb_uri
        perf = time.perf_counter

        async def per_request(customer: str) -> None:
            async with async_client(uri, driver=driver) as client:
                await orders(client).find_one({"customer": customer})

        async def measure(query, n: int | None, seconds: float, t0: float, seed: int) -> list[dict]:
            rows, next_customer, stop = [], customer_stream(seed, 0), perf() + seconds
            while (len(rows) < n) if n is not None else (perf() < stop):
                start, error = perf(), None
                try:
                    await query(next_customer())
                except Exception as e:
                    error = error_text(e)
                rows.append({"task": 0, "start_s": start - t0, "latency_s": perf() - start,
                             "ok": error is None, "error": error})
            return rows

        async with async_client(uri, driver=driver) as shared_client:
            col = orders(shared_client)

            async def shared(customer: str) -> None:
                await col.find_one({"customer": customer})

            query = per_request if mode == "per_request" else shared
            await measure(query, None, p.warmup_s, perf(), p.seed + 1)
            with ctx.window(variant, mode=mode, loop=loop, driver=driver, iterations=p.iterations) as w:
                rows = await measure(query, p.iterations, 0.0, w.t0, p.seed)
                w.ops = sum(r["ok"] for r in rows)
        return rows


EXPERIMENT = ClientPerRequest()
