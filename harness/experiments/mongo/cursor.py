"""Event-loop stalls while iterating a large cursor (seed 001, section 3).

A probe task (`harness.core.probe.LoopProbe`) sleeps 1 ms in a loop and records how late each wake-up
is, while the main task reads every document of `orders` with `async for` -- default batching, then
`batch_size` in `batch_sizes` -- and with `to_list()`. The longest lateness is the longest stall
the cursor caused; the iteration's own time is recorded too. Before the variants, the probe runs
alone for `probe_idle_s` to measure its floor and CPU cost.

MongoDB sends `getMore` batches of up to 16 MiB by default: what made the seed's 410 ms stall.
FerretDB's default batches are much smaller, so "default batching" on FerretDB is not the seed's
condition. The variant `iterate[batch_size=16MiB]` ("MongoDB-sized batches, emulated on FerretDB")
asks for as many documents per batch as make `mongodb_batch_mib` MiB of this dataset's documents,
from their average BSON size measured (undecoded) on a sample before the variants (table
`batching`). A command listener counts the documents of every `find`/`getMore` reply, so each
variant records the batches the server actually sent.

Variants: `iterate[batch_size=default]`, `iterate[batch_size=N]`, `iterate[batch_size=16MiB]`,
`to_list[batch_size=default]`; run in `ctx.order()` (reversed on odd repeats).
Tables: see `tables` below. `samples` holds one row per variant (latency_s = iteration time,
batches = replies, max_batch_docs = the largest); `probe` one row per probe wake-up (lateness,
span, run, wait);
`probe_idle` the same for the probe alone (its floor); `batching` the document-size sample and the
batch size it gives.
Notes: `probe_idle` (the probe's CPU cost while idle).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pymongo import monitoring

from ...core import datasets
from ...core.measure import error_text
from ...core.probe import SAMPLE_COLUMNS, LoopProbe, measure_resolution, sample_rows
from ..base import Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import cursor_key, cursor_summary, probe_idle
from .workload import DOCUMENTS, async_client, is_ferretdb, note_timeouts, orders, run_async

MIB = 1024 * 1024
MONGODB_LABEL = "MongoDB-sized batches, emulated on FerretDB"


@dataclass(frozen=True)
class CursorParams(Params):
    documents: int = DOCUMENTS["seed"]             # size of `orders`, all read by every variant
    batch_sizes: tuple[int, ...] = (100, 1000, 10000)
    default_batching: bool = True                 # also iterate with the driver/server default
    mongodb_batches: bool = True                  # also iterate with MongoDB-sized (16 MiB) batches
    mongodb_batch_mib: float = 16.0               # MongoDB's largest getMore reply
    size_sample: int = 2000                       # documents whose BSON size is averaged
    to_list: bool = True                          # also read everything with to_list()
    probe_interval_s: float = 0.001
    probe_idle_s: float = 1.0                     # the probe alone, before the variants
    loop: str = "asyncio"
    driver: str = "pymongo"
    timeout_s: float = 420.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "batch_sizes", "probe_interval_s", "mongodb_batch_mib",
                              "size_sample")
        self.require_non_negative("probe_idle_s")
        self.require_choice("loop", ("asyncio", "uvloop"))
        self.require_choice("driver", ("pymongo", "motor"))


class _BatchCounter(monitoring.CommandListener):
    """A PyMongo command listener: documents in every find/getMore reply since `reset()`."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def reset(self) -> None:
        self.batches = []

    def started(self, event: Any) -> None:
        pass

    def succeeded(self, event: Any) -> None:
        if event.command_name in ("find", "getMore"):
            cursor = event.reply.get("cursor", {})
            self.batches.append(len(cursor.get("firstBatch", cursor.get("nextBatch", []))))

    def failed(self, event: Any) -> None:
        pass


class CursorStall(Experiment):
    name = "mongo_cursor"
    title = "Event-loop stalls while iterating a 100,000-document cursor"
    needs = ("mongodb",)
    params_type = CursorParams
    profiles = {"seed": {},
                "full": {"documents": DOCUMENTS["full"], "probe_idle_s": 0.5, "warmup_s": 0.5},
                "quick": {"documents": DOCUMENTS["quick"], "probe_idle_s": 0.5, "warmup_s": 0.5},
                "smoke": {"documents": DOCUMENTS["smoke"], "batch_sizes": (100, 1000),
                          "probe_idle_s": 0.2, "warmup_s": 0.1, "size_sample": 500}}
    repeats = {"smoke": 1, "quick": 1, "full": 10, "seed": 10}
    analysis = "harness.experiments.mongo.analysis"
    family = "mongo"
    ceiling = "python_cpu"
    drivers = ("pymongo", "motor")
    notebook = "01_mongo_cursor_pool.ipynb"
    headline = (Metric("max_stall_ms", "ms", "lower"), Metric("total_s", "s", "lower"))
    tables = {
        "samples": {"variant": "str", "method": "str", "batch_size": "int", "label": "str", "task": "int",
                    "start_s": "float", "latency_s": "float", "ok": "bool", "error": "str",
                    "documents": "int", "batches": "int", "max_batch_docs": "int"},
        "probe": {"variant": "str", **SAMPLE_COLUMNS},
        "probe_idle": dict(SAMPLE_COLUMNS),   # not a variant
        "batching": {"sampled": "int", "avg_doc_bytes": "float", "target_mib": "float", "batch_size": "int",
                     "server": "str"},
        "windows": window_columns(method="str", batch_size="int", label="str", loop="str", driver="str"),
    }

    def datasets(self, p: CursorParams) -> list:
        return [datasets.Orders(p.documents)]

    metrics = (Metric("max_stall_ms", "ms", "lower"), Metric("max_stall_run_ms", "ms", "lower"),
               Metric("max_stall_wait_share", "ratio", ""), Metric("p99_stall_ms", "ms", "lower"),
               Metric("total_s", "s", "lower"), Metric("max_batch_docs", "count", ""), Metric("documents", "count", ""),
               Metric("avg_doc_bytes", "count", ""), Metric("batch_size", "count", ""),
               Metric("idle_max_ms", "ms", "lower"), Metric("idle_p99_ms", "ms", "lower"),
               Metric("cpu_us_per_wakeup", "us", "lower"))

    def compute_metrics(self, run, rows) -> None:
        for _, r in cursor_summary(run).iterrows():
            if not r.ok:
                continue
            # the MongoDB-sized (16 MiB) batches: one name whatever the batch size it came to
            v = "mongodb_batches" if str(r.get("label") or "").startswith("MongoDB-sized") \
                else cursor_key(r.method, r.batch_size)
            rows.put(v, "max_batch_docs", r["repeat"], r.max_batch_docs)
            rows.put(v, "max_stall_ms", r["repeat"], r.stall_max_ms)
            rows.put(v, "max_stall_run_ms", r["repeat"], r.stall_run_max_ms)
            rows.put(v, "max_stall_wait_share", r["repeat"], r.stall_max_wait_share)
            rows.put(v, "p99_stall_ms", r["repeat"], r.stall_p99_ms)
            rows.put(v, "total_s", r["repeat"], r.total_s)
            rows.put("", "documents", r["repeat"], r.documents)
        for _, r in probe_idle(run).iterrows():
            rows.put("probe", "idle_max_ms", r["repeat"], r.lateness_max_ms)
            rows.put("probe", "idle_p99_ms", r["repeat"], r.lateness_p99_ms)
            rows.put("probe", "cpu_us_per_wakeup", r["repeat"], r.cpu_us_per_wakeup)
        for _, r in run.table(self.name, "batching").iterrows():
            rows.put("mongodb_batches", "avg_doc_bytes", r["repeat"], r.avg_doc_bytes)
            rows.put("mongodb_batches", "batch_size", r["repeat"], r.batch_size)

    def run(self, ctx) -> None:
        p: CursorParams = ctx.params
        note_timeouts(ctx)
        run_async(lambda: self._main(ctx), loop=p.loop)

    @staticmethod
    def plan(p: CursorParams, batching: dict[str, Any]) -> list[dict[str, Any]]:
        """The variants: method, batch_size (0 = server default), label, and the variant id."""
        mongodb = batching["batch_size"]
        points = [{"method": "iterate", "batch_size": 0, "shown": "default", "label": "default batching"}] \
            if p.default_batching else []
        points += [{**pt, "shown": pt["batch_size"], "label": f"batch_size={pt['batch_size']}"}
                   for pt in grid(method="iterate", batch_size=p.batch_sizes)]
        if p.mongodb_batches and mongodb not in p.batch_sizes:
            label = MONGODB_LABEL if batching["server"] == "FerretDB" else "MongoDB-sized batches"
            points.append({"method": "iterate", "batch_size": mongodb, "shown": f"{p.mongodb_batch_mib:g}MiB",
                           "label": label})
        if p.to_list:
            points.append({"method": "to_list", "batch_size": 0, "shown": "default", "label": "to_list()"})
        for pt in points:
            pt["variant"] = variant_id(str(pt["method"]), batch_size=pt.pop("shown"))
        return points

    async def _main(self, ctx) -> None:
        p: CursorParams = ctx.params
        idle = await measure_resolution(p.probe_idle_s, interval_s=p.probe_interval_s) \
            if p.probe_idle_s > 0 else None
        if idle:
            ctx.record("probe_idle", sample_rows(idle["samples"]))
            ctx.note("probe_idle", {k: v for k, v in idle.items() if k != "samples"})
        counter = _BatchCounter()
        async with async_client(ctx.servers.mongodb_uri, driver=p.driver, event_listeners=[counter]) as client:
            col = orders(client)
            batching = await self._mongodb_batch(col, p, ctx.servers.mongodb_uri)
            ctx.record("batching", [batching])
            await self._warm_up(col, p.warmup_s)
            for pt in ctx.order(self.plan(p, batching)):
                await self._variant(ctx, col, counter, pt)

    async def _variant(self, ctx, col, counter: _BatchCounter, pt: dict[str, Any]) -> None:
        p: CursorParams = ctx.params
        variant, method, batch = pt["variant"], pt["method"], pt["batch_size"]
        kwargs = {"batch_size": batch} if batch else {}
        n, error = 0, None
        counter.reset()
        with ctx.window(variant, method=method, batch_size=batch, label=pt["label"], loop=p.loop,
                        driver=p.driver) as w:
            async with LoopProbe(interval_s=p.probe_interval_s, t0=w.t0) as probe:
                try:
                    if method == "to_list":
                        n = len(await col.find({}, **kwargs).to_list())
                    else:
                        async for _doc in col.find({}, **kwargs):
                            n += 1
                except Exception as e:  # an unsupported option is a result, not a crash
                    error = error_text(e)
            w.ops = n
        ctx.record("samples", [{"variant": variant, "method": method, "batch_size": batch, "label": pt["label"],
                                "task": 0, "start_s": 0.0, "latency_s": w.wall_s, "ok": error is None,
                                "error": error, "documents": n, "batches": len(counter.batches),
                                "max_batch_docs": max(counter.batches, default=0)}])
        ctx.record("probe", probe.rows(variant=variant))

    @staticmethod
    async def _mongodb_batch(col, p: CursorParams, uri: str) -> dict[str, Any]:
        """Average BSON size of a sample of documents (read undecoded), and the batch size that
        makes one reply `mongodb_batch_mib` MiB of them."""
        from bson.codec_options import CodecOptions
        from bson.raw_bson import RawBSONDocument

        raw = col.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
        sizes = [len(d.raw) async for d in raw.find({}, limit=min(p.size_sample, p.documents))]
        avg = sum(sizes) / len(sizes)
        return {"sampled": len(sizes), "avg_doc_bytes": avg, "target_mib": p.mongodb_batch_mib,
                "batch_size": max(1, int(p.mongodb_batch_mib * MIB // avg)),
                "server": "FerretDB" if is_ferretdb(uri) else "MongoDB"}

    @staticmethod
    async def _warm_up(col, seconds: float) -> None:
        """Read documents for `seconds` (connection, server caches), then drop the cursor."""
        stop = time.perf_counter() + seconds
        cursor = col.find({}, batch_size=1000)
        async for _doc in cursor:
            if time.perf_counter() >= stop:
                break
        await cursor.close()


EXPERIMENT = CursorStall()
