"""`harness verify` on MongoDB: seed 001's checks on a user's own query.

The query is the workload file's `[mongodb]` section (`harness.core.workload_file`): a collection, a
filter template whose ":name" strings are drawn per operation from seeded generators, and optional
projection, sort and limit (`harness.experiments.mongo.workload.Query`). The closed loop, the window, the
warm-up and the per-operation rows are `mongo_pool`'s and `mongo_models'` own
(`mongo.workload.async_variant` / `threads_variant`). Variants, in `ctx.order()`:

- `bare[pool=P]`: `tasks` async tasks on `maxPoolSize=P` (seed 001 section 4, the starvation);
- `semaphore[pool=P]`: the same behind a FIFO `asyncio.Semaphore(P)` (the seed's fix);
- `threads[threads=T]`: `threads` threads on one synchronous MongoClient with a pool of T, against
  `bare` at the first pool: CPU per query and tail (section 5, "measure before migrating");
- `large_read[batch_size=...]` (with `[mongodb.large_read]`): every document the large read returns,
  iterated with `async for`, default batching and each of `batch_sizes`, while a probe task
  (`harness.core.probe.LoopProbe`) records how late the loop woke it, and the loop thread's own CPU and
  wait for a core in between (section 3, the stalls);
- `client_per_request[queries=N]`, `shared_client[queries=N]`: N queries one after another, each on
  a client of its own or all on one shared client (section 1, one client per process);
- `insert_one[documents=N]`, `insert_many[documents=N]` (only with `allow_writes = true`): N copies
  of the collection's documents inserted one by one or in bulk into a scratch collection
  (`harness_verify_scratch_<random>`) the variant creates and drops (section 2, bulk writes).

Every other operation is a read, in `database` (default: the URI's database, else "study"). Each
`{ column = "field" }` generator becomes a list of the field's values in up to `sample` documents,
read before the variants (in natural order: not a random sample). On the local FerretDB with the study's
`orders`, the customer index is made usable as `mongo_pool` does (`ferretdb_backend_index`); on any
other target nothing is created.

A closed-loop variant whose failed share passes `load.max_error_rate` stops the repeat.
`in_study` is false: `harness verify FILE` runs it; with no workload it runs
`examples/workloads/mongodb_orders.toml` on the local servers.
"""

from __future__ import annotations

import gc
import json
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...core import datasets, workload_file
from ...core.config import REPO_ROOT
from ...core.errors import HarnessError
from ...core.measure import error_text
from ...core.probe import SAMPLE_COLUMNS, LoopProbe
from ...core.servers import STUDY_DB, database_pids
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, variant_id, window_columns
from ..mongo.workload import (
    CLOSED_LOOP_SAMPLES,
    DOCUMENTS,
    DatabaseCPU,
    Query,
    async_client,
    async_variant,
    ferretdb_backend_index,
    note_timeouts,
    run_async,
    threads_variant,
)
from .analysis import closed_loop, stalls

EXAMPLE = REPO_ROOT / "examples" / "workloads" / "mongodb_orders.toml"
SCRATCH_PREFIX = "harness_verify_scratch_"   # the only collections a verify run writes, each dropped after


@dataclass(frozen=True)
class VerifyMongoParams(Params):
    workload: str = ""                     # the workload file's body as JSON; "" = EXAMPLE
    tasks: int = 200
    threads: int = 32
    pools: tuple[int, ...] = (10,)
    duration_s: float = 3.0
    documents: int = DOCUMENTS["full"]     # the local `orders` (target = "local" only)
    write_documents: int = 2000            # documents each write variant inserts (allow_writes only)
    client_queries: int = 50               # sequential queries of each client variant
    probe_interval_s: float = 0.001
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if not self.workload:
            object.__setattr__(self, "workload", workload_file.body_json(EXAMPLE))

    def validate(self) -> None:
        super().validate()
        self.require_positive("tasks", "threads", "pools", "duration_s", "documents", "probe_interval_s",
                              "write_documents", "client_queries")
        body = workload_file.from_json(self.workload, "parameter workload")
        if body.get("mongodb") is None:
            raise HarnessError("parameter workload: verify_mongo needs a [mongodb] section")
        workload_file.check_caps(self, ("tasks", "threads", "pools", "duration_s"))

    def body(self) -> dict[str, Any]:
        return json.loads(self.workload)


def database_of(body: dict[str, Any], uri: str) -> str:
    """The workload's `database`, else the URI's default database, else the study's."""
    from pymongo.uri_parser import parse_uri

    return body["mongodb"].get("database") or parse_uri(uri).get("database") or STUDY_DB


async def sample_field(uri: str, database: str, collection: str, field: str, n: int) -> list[Any]:
    """The values of `field` in up to `n` documents that have it (natural order), for a generator."""
    async with async_client(uri) as client:
        docs = await client[database][collection].find({field: {"$exists": True}}, {field: 1, "_id": 0}) \
            .limit(n).to_list()
    values = []
    for d in docs:
        v: Any = d
        for part in field.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if isinstance(v, (str, int, float, bool)):
            values.append(v)
    if not values:
        raise HarnessError(f"mongodb.params: field {field!r} has no scalar values in {collection!r} on the target")
    return values


def query_of(body: dict[str, Any], uri: str) -> Query:
    m, database = body["mongodb"], database_of(body, uri)
    params = {}
    for name, g in (m.get("params") or {}).items():
        if "column" in g:
            params[name] = {"choice": run_async(partial(sample_field, uri, database, m["collection"], g["column"],
                                                        int(g.get("sample", 1000))))}
        else:
            params[name] = g
    return Query(collection=m["collection"], database=database, filter=m["filter"], params=params,
                 projection=m.get("projection"), sort=m.get("sort"), limit=m.get("limit"))


class VerifyMongo(Experiment):
    name = "verify_mongo"
    title = "harness verify: seed 001's checks on a workload file's MongoDB query"
    needs = ("mongodb",)
    in_study = False
    params_type = VerifyMongoParams
    profiles = {"seed": {}, "full": {}, "quick": {},
                "smoke": {"tasks": 20, "threads": 4, "pools": (4,), "duration_s": 0.3, "warmup_s": 0.1,
                          "documents": DOCUMENTS["smoke"], "write_documents": 200, "client_queries": 10,
                          "timeout_s": 240.0}}
    repeats = {"smoke": 1, "quick": 1, "full": 5, "seed": 5}
    analysis = "harness.experiments.verify.analysis"
    family = "verify"
    ceiling = None
    drivers = ("pymongo", "motor")
    notebook = "06_workload.ipynb"
    headline = (Metric("max_ms", "ms", "lower"), Metric("p99_ms", "ms", "lower"),
                Metric("throughput_qps", "queries/s", "higher"), Metric("cpu_us_per_op", "us", "lower"))
    tables = {
        "samples": {**CLOSED_LOOP_SAMPLES, "mode": "str"},
        "windows": window_columns(mode="str", loop="str", driver="str", pool_size="int", workers="int",
                                  semaphore="bool", duration_s="float", **{OTHER_COLUMNS: "any"}),
        "probe": {"variant": "str", **SAMPLE_COLUMNS},
        "reads": {"variant": "str", "batch_size": "int", "documents": "int", "wall_s": "float", "ok": "bool",
                  "error": "str"},
        "writes": {"variant": "str", "method": "str", "documents": "int", "wall_s": "float", "ok": "bool",
                   "error": "str", "scratch": "str"},
        "clients": {"variant": "str", "method": "str", "queries": "int", "wall_s": "float", "ok": "bool",
                    "error": "str"},
    }

    metrics = (Metric("throughput_qps", "queries/s", "higher"), Metric("p50_ms", "ms", "lower"),
               Metric("p99_ms", "ms", "lower"), Metric("max_ms", "ms", "lower"),
               Metric("max_over_p99", "ratio", "lower"),
               Metric("fewest_over_most", "ratio", "higher"), Metric("cpu_us_per_op", "us", "lower"),
               Metric("max_stall_ms", "ms", "lower"), Metric("max_stall_run_ms", "ms", "lower"),
               Metric("max_stall_wait_share", "ratio", ""),
               Metric("ctx_vol_per_op", "switches", ""), Metric("ctx_invol_per_op", "switches", ""))

    def compute_metrics(self, run, rows) -> None:
        for _, r in closed_loop(run).iterrows():
            bottleneck = str(r.get("bottleneck", "") or "")
            for q in ("throughput_qps", "p50_ms", "p99_ms", "max_ms", "max_over_p99", "fewest_over_most"):
                rows.put(r["variant"], q, int(r["repeat"]), r[q], bottleneck)
            rows.put(r["variant"], "cpu_us_per_op", int(r["repeat"]), r["cpu_us_per_query"], bottleneck)
            for kind in ("vol", "invol"):
                rows.put(r["variant"], f"ctx_{kind}_per_op", int(r["repeat"]), r.get(f"ctx_{kind}_per_query"))
        for _, r in stalls(run).iterrows():
            for q in ("max_stall_ms", "max_stall_run_ms", "max_stall_wait_share"):
                rows.put(r["variant"], q, int(r["repeat"]), r[q])

    def datasets(self, p: VerifyMongoParams) -> list:
        return [datasets.Orders(p.documents)] if p.body().get("dataset") == "orders" else []

    def run(self, ctx: Context) -> None:
        p: VerifyMongoParams = ctx.params
        body = p.body()
        note_timeouts(ctx)
        uri = ctx.servers.mongodb_uri
        query = query_of(body, uri)
        ctx.note("generators", {n: {"choice_of": len(g["choice"])} if "choice" in g else g
                                for n, g in query.params.items()})
        limit = float(body.get("load", {}).get("max_error_rate", 0.05))
        large = body["mongodb"].get("large_read")
        points: list[dict[str, Any]] = [{"mode": mode, "pool": pool} for pool in p.pools
                                        for mode in ("bare", "semaphore")]
        points.append({"mode": "threads", "pool": p.threads})
        if large:
            sizes = ([0] if large.get("default_batching", True) else []) + list(large["batch_sizes"])
            points += [{"mode": "large_read", "batch_size": b} for b in sizes]
        points += [{"mode": "client_per_request"}, {"mode": "shared_client"}]
        if body.get("allow_writes"):
            points += [{"mode": "insert_one"}, {"mode": "insert_many"}]
        db = DatabaseCPU(database_pids(ctx.servers))
        with ferretdb_backend_index(ctx, body.get("dataset") == "orders"):
            for pt in ctx.order(points):
                if pt["mode"] == "large_read":
                    self._large_read(ctx, large, body["mongodb"]["collection"], pt["batch_size"])
                    continue
                if pt["mode"] in ("insert_one", "insert_many"):
                    self._write(ctx, body, pt["mode"])
                    continue
                if pt["mode"] in ("client_per_request", "shared_client"):
                    self._clients(ctx, query, pt["mode"])
                    continue
                common = dict(duration_s=p.duration_s, warmup_s=p.warmup_s, seed=int(body.get("seed", 1)),
                              db=db, query=query, mode=pt["mode"])
                if pt["mode"] == "threads":
                    variant = variant_id("threads", threads=p.threads)
                    rows = threads_variant(ctx, variant, threads=p.threads, pool_size=p.threads, **common)
                else:
                    variant = variant_id(pt["mode"], pool=pt["pool"])
                    rows = async_variant(ctx, variant, loop="asyncio", driver="pymongo", pool_size=pt["pool"],
                                         tasks=p.tasks, semaphore=pt["mode"] == "semaphore", **common)
                errors = [r["error"] for r in rows if not r["ok"]]
                workload_file.check_error_rate(variant, len(rows) - len(errors), len(errors), limit,
                                               next(iter(errors), "") or "")

    def _large_read(self, ctx: Context, large: dict[str, Any], default_collection: str, batch: int) -> None:
        p: VerifyMongoParams = ctx.params
        variant = variant_id("large_read", batch_size=batch or "default")
        collection = large.get("collection") or default_collection
        database = database_of(p.body(), ctx.servers.mongodb_uri)
        out: dict[str, Any] = {}

        async def main() -> None:
            async with async_client(ctx.servers.mongodb_uri) as client:
                col = client[database][collection]
                kwargs = {"batch_size": batch} if batch else {}
                n, error = 0, ""
                # connect before the window: the handshake's CPU on the loop is no stall of the read
                # (it read 11-47 ms of loop CPU against the 50 ms limit, with batch_size=100)
                try:
                    await client[database].command("ping")
                except Exception:  # the read below fails the same way, and says so
                    pass
                gc.collect()   # and the earlier variants' garbage collected outside it
                with _serial_window(ctx, variant, "large_read", batch_size=batch) as w:
                    async with LoopProbe(interval_s=p.probe_interval_s, t0=w.t0) as probe:
                        try:
                            async for _doc in col.find(large.get("filter") or {}, **kwargs):
                                n += 1
                        except Exception as e:  # recorded: the check says what failed
                            error = error_text(e)
                    w.ops = n
                out.update(n=n, error=error, wall_s=w.wall_s, probe=probe.rows(variant=variant))

        run_async(main)
        if out["probe"]:   # none when the read ended before the probe's first wake-up was due
            ctx.record("probe", out["probe"])
        _record_or_raise(ctx, "reads", "the large read", {"variant": variant, "batch_size": batch,
                                                          "documents": out["n"], "wall_s": out["wall_s"],
                                                          "error": out["error"]})


    def _clients(self, ctx: Context, query: Query, method: str) -> None:
        """Seed 001 section 1: `client_queries` queries one after another, each on a client created,
        used and closed for it, or all on one shared client (the first filters of the query's seeded
        stream, the same for both)."""
        p: VerifyMongoParams = ctx.params
        uri = ctx.servers.mongodb_uri
        variant = variant_id(method, queries=p.client_queries)
        out: dict[str, Any] = {}

        async def main() -> None:
            filters = query.filters(int(p.body().get("seed", 1)), 0)
            error = ""
            with _serial_window(ctx, variant, method) as w:
                try:
                    if method == "shared_client":
                        async with async_client(uri) as client:
                            for _ in range(p.client_queries):
                                await query.run_async(client[query.database][query.collection], filters())
                    else:
                        for _ in range(p.client_queries):
                            async with async_client(uri) as client:
                                await query.run_async(client[query.database][query.collection], filters())
                except Exception as e:  # recorded: the check says what failed
                    error = error_text(e)
                w.ops = 0 if error else p.client_queries
            out.update(wall_s=w.wall_s, error=error)

        run_async(main)
        _record_or_raise(ctx, "clients", "the client check", {"variant": variant, "method": method,
                                                               "queries": p.client_queries, "wall_s": out["wall_s"],
                                                               "error": out["error"]})

    def _write(self, ctx: Context, body: dict[str, Any], method: str) -> None:
        """Seed 001's bulk-write check, only with allow_writes: `write_documents` copies of the
        query collection's first 100 documents (their shape, without _id) inserted one by one or in
        one insert_many(ordered=False), into a scratch collection this variant creates and drops."""
        p: VerifyMongoParams = ctx.params
        uri, database = ctx.servers.mongodb_uri, database_of(body, ctx.servers.mongodb_uri)
        scratch = f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}"
        variant = variant_id(method, documents=p.write_documents)
        out: dict[str, Any] = {"wall_s": float("nan"), "error": "the scratch collection was not written"}

        async def main() -> None:
            async with async_client(uri) as client:
                db = client[database]
                shape = await db[body["mongodb"]["collection"]].find({}, {"_id": 0}).limit(100).to_list()
                shape = shape or [{"i": 0, "pad": "x" * 200}]
                docs = [dict(shape[k % len(shape)]) for k in range(p.write_documents)]
                await db.create_collection(scratch)
                error = ""
                w = None
                try:
                    with _serial_window(ctx, variant, method) as w:
                        try:
                            if method == "insert_one":
                                for d in docs:
                                    await db[scratch].insert_one(d)
                            else:
                                await db[scratch].insert_many(docs, ordered=False)
                        except Exception as e:  # recorded: the check says what failed
                            error = error_text(e)
                        w.ops = 0 if error else len(docs)
                finally:
                    await db.drop_collection(scratch)
                if w is not None:
                    out.update(wall_s=w.wall_s, error=error)

        run_async(main)
        _record_or_raise(ctx, "writes", "the write check", {"variant": variant, "method": method,
                                                             "documents": p.write_documents, "wall_s": out["wall_s"],
                                                             "error": out["error"], "scratch": scratch})


def _serial_window(ctx: Context, variant: str, mode: str, **extra: Any):
    """The window of a serial check (one task, no pool of its own), with the columns the
    closed-loop windows have, so every window of the experiment shares one schema."""
    return ctx.window(variant, mode=mode, loop="asyncio", driver="pymongo", pool_size=0, workers=1,
                      semaphore=False, duration_s=0.0, **extra)


def _record_or_raise(ctx: Context, table: str, what: str, row: dict[str, Any]) -> None:
    """Record a serial check's one row (its error too, so the verdict can say what failed), then
    fail the variant if the check did."""
    ctx.record(table, [{**row, "ok": not row["error"]}])
    if row["error"]:
        raise HarnessError(f"{row['variant']}: {what} failed: {row['error']}")


EXPERIMENT = VerifyMongo()
