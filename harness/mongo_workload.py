"""What the MongoDB experiments share: clients, event loops, the closed-loop `find_one` workload.

- `run_async(main, loop=...)`: one fresh event loop per call (`asyncio` or `uvloop`), so every
  async variant gets its own loop and its own client, created and closed inside it.
- `async_client(uri, driver=..., **options)`: PyMongo's `AsyncMongoClient` or Motor's
  `AsyncIOMotorClient` behind `async with`, closed however the block exits.
- `closed_loop_async()` / `closed_loop_threads()`: N workers, each running `find_one` on the
  indexed `customer` field in a closed loop for a fixed duration, customers drawn from a seeded RNG
  per worker (the same sequence for every variant). They return one row per operation.
- `ferretdb_backend_index()`: FerretDB 1.x keeps a MongoDB index as a PostgreSQL btree on
  `_jsonb -> 'customer'`, but pushes an equality filter down as `_jsonb -> 'customer' @> ...`,
  which a btree cannot serve: every `find_one({"customer": ...})` is a sequential scan (see the
  `explain` the experiments record). To measure the seed's *indexed* query, this adds a GIN index
  on the same expression in the backing table for the experiment's duration, and drops it after.
  It does nothing on a real MongoDB server. Parameter `backend_index=off` measures without it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from .datasets import CUSTOMERS
from .servers import FERRETDB_PG_DB, STUDY_DB, ServerStack

LOOPS = ("asyncio", "uvloop")
DRIVERS = ("pymongo", "motor")
COLLECTION = "orders"
# Documents in `orders` per profile: every MongoDB experiment uses the same size in a profile, so
# running several of them does not reload the collection between experiments.
DOCUMENTS = {"full": 100_000, "quick": 20_000, "smoke": 2_000}


def run_async(main: Callable[[], Awaitable[Any]], *, loop: str = "asyncio") -> Any:
    """Run `main()` to completion on a fresh event loop of the given kind."""
    if loop == "asyncio":
        factory = None
    elif loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


# A server that dies mid-experiment fails each operation within seconds (default: 30 s per
# operation, so a closed loop of 200 tasks ran into the worker's timeout). No effect while it is up.
SERVER_SELECTION_TIMEOUT_MS = 5_000


@asynccontextmanager
async def async_client(uri: str, *, driver: str = "pymongo", **options: Any) -> AsyncIterator[Any]:
    """An async client for the running loop; closed on exit (PyMongo: awaited; Motor: sync)."""
    options.setdefault("serverSelectionTimeoutMS", SERVER_SELECTION_TIMEOUT_MS)
    if driver == "pymongo":
        from pymongo import AsyncMongoClient

        client = AsyncMongoClient(uri, **options)
        try:
            yield client
        finally:
            await client.close()
    elif driver == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        client = AsyncIOMotorClient(uri, **options)
        try:
            yield client
        finally:
            client.close()
    else:
        raise ValueError(f"driver must be one of {DRIVERS}, got {driver!r}")


def orders(client: Any) -> Any:
    return client[STUDY_DB][COLLECTION]


def customer_stream(seed: int, worker: int) -> Callable[[], str]:
    """Random customers for one worker; the same sequence for a given (seed, worker)."""
    rng = random.Random(f"{seed}:{worker}")
    return lambda: f"c{rng.randrange(CUSTOMERS)}"


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


async def closed_loop_async(collection: Any, *, tasks: int, duration_s: float, seed: int,
                            t0: float | None = None,
                            semaphore: asyncio.Semaphore | None = None) -> list[dict[str, Any]]:
    """`tasks` tasks running find_one in a closed loop until `duration_s` after `t0`.

    An operation started before the deadline is awaited to its end, however long it waits for a
    connection: a starved task's one slow query is exactly what the pool experiment is about.
    Rows: task, start_s (relative to t0), latency_s, ok, error.
    """
    perf = time.perf_counter
    t0 = perf() if t0 is None else t0
    stop = t0 + duration_s

    async def worker(task: int) -> list[dict[str, Any]]:
        rows = []
        next_customer = customer_stream(seed, task)
        while (start := perf()) < stop:
            customer = next_customer()
            error = None
            try:
                if semaphore is None:
                    await collection.find_one({"customer": customer})
                else:
                    async with semaphore:
                        await collection.find_one({"customer": customer})
            except Exception as e:  # recorded per operation; the run goes on
                error = _error(e)
            end = perf()
            rows.append({"task": task, "start_s": start - t0, "latency_s": end - start,
                         "ok": error is None, "error": error})
        return rows

    results = await asyncio.gather(*(worker(i) for i in range(tasks)))
    return [r for rows in results for r in rows]


def closed_loop_threads(collection: Any, *, threads: int, duration_s: float, seed: int,
                        t0: float | None = None) -> list[dict[str, Any]]:
    """The same workload on `threads` threads with a synchronous client. Same rows."""
    perf = time.perf_counter
    barrier = threading.Barrier(threads + 1)
    results: list[list[dict[str, Any]]] = [[] for _ in range(threads)]
    start_at: list[float] = []

    def worker(task: int) -> None:
        rows = results[task]
        next_customer = customer_stream(seed, task)
        barrier.wait()
        base, stop = start_at[0], start_at[0] + duration_s
        while (start := perf()) < stop:
            customer = next_customer()
            error = None
            try:
                collection.find_one({"customer": customer})
            except Exception as e:
                error = _error(e)
            end = perf()
            rows.append({"task": task, "start_s": start - base, "latency_s": end - start,
                         "ok": error is None, "error": error})

    pool = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}", daemon=True)
            for i in range(threads)]
    for t in pool:
        t.start()
    start_at.append(perf() if t0 is None else t0)
    barrier.wait()
    for t in pool:
        t.join()
    return [r for rows in results for r in rows]


def async_variant(ctx: Any, variant: str, *, loop: str, driver: str, pool_size: int, tasks: int,
                  semaphore: bool, duration_s: float, warmup_s: float, seed: int,
                  **fields: Any) -> list[dict[str, Any]]:
    """One async closed-loop variant on its own loop and client: warm-up, then a measured window.

    Records the window (wall, process CPU, ops) and one `samples` row per operation; returns them.
    """
    uri = ctx.servers.mongodb_uri

    async def main() -> list[dict[str, Any]]:
        async with async_client(uri, driver=driver, maxPoolSize=pool_size) as client:
            col = orders(client)
            # FIFO: asyncio.Semaphore wakes waiters in arrival order, unlike the pool's wait queue.
            sem = asyncio.Semaphore(pool_size) if semaphore else None
            if warmup_s > 0:
                await closed_loop_async(col, tasks=tasks, duration_s=warmup_s, seed=seed + 1, semaphore=sem)
            with ctx.window(variant, loop=loop, driver=driver, pool_size=pool_size, workers=tasks,
                            semaphore=semaphore, duration_s=duration_s, **fields) as w:
                rows = await closed_loop_async(col, tasks=tasks, duration_s=duration_s, seed=seed,
                                               t0=w.t0, semaphore=sem)
                w.ops = sum(r["ok"] for r in rows)
            return rows

    rows = run_async(main, loop=loop)
    extra = {"variant": variant, "loop": loop, "driver": driver, "pool_size": pool_size,
             "workers": tasks, "semaphore": semaphore, **fields}
    rows = [{**extra, **r} for r in rows]
    ctx.record("samples", rows)
    return rows


def threads_variant(ctx: Any, variant: str, *, threads: int, pool_size: int, duration_s: float,
                    warmup_s: float, seed: int, **fields: Any) -> list[dict[str, Any]]:
    """The same workload on threads with one synchronous MongoClient; same window and rows."""
    import pymongo

    with pymongo.MongoClient(ctx.servers.mongodb_uri, maxPoolSize=pool_size,
                             serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS) as client:
        col = orders(client)
        if warmup_s > 0:
            closed_loop_threads(col, threads=threads, duration_s=warmup_s, seed=seed + 1)
        with ctx.window(variant, loop="threads", driver="pymongo-sync", pool_size=pool_size,
                        workers=threads, semaphore=False, duration_s=duration_s, **fields) as w:
            rows = closed_loop_threads(col, threads=threads, duration_s=duration_s, seed=seed, t0=w.t0)
            w.ops = sum(r["ok"] for r in rows)
    extra = {"variant": variant, "loop": "threads", "driver": "pymongo-sync", "pool_size": pool_size,
             "workers": threads, "semaphore": False, **fields}
    rows = [{**extra, **r} for r in rows]
    ctx.record("samples", rows)
    return rows


# ------------------------------------------------------------------------------ FerretDB's index

def is_ferretdb(uri: str) -> bool:
    import pymongo

    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS) as c:
        return "ferretdbVersion" in c.admin.command("buildInfo")


def _plan_of(uri: str) -> dict[str, Any]:
    import pymongo

    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS) as c:
        plan = c[STUDY_DB].command("explain", {"find": COLLECTION, "filter": {"customer": "c0"}})
    qp = plan.get("queryPlanner", {})
    node = qp.get("Plan") or qp.get("winningPlan") or {}

    def nodes(n: dict) -> list[str]:
        # FerretDB explains PostgreSQL's plan ("Node Type", "Plans"); MongoDB its own ("stage").
        children = n.get("Plans") or ([n["inputStage"]] if "inputStage" in n else [])
        return [n.get("Node Type") or n.get("stage") or "?"] + [x for c in children for x in nodes(c)]

    return {"plan": " > ".join(nodes(node)), "filter_pushdown": plan.get("filterPushdown")}


@contextmanager
def ferretdb_backend_index(ctx: Any, enabled: bool) -> Iterator[dict[str, Any]]:
    """Make `find_one({"customer": ...})` an indexed query on FerretDB (see the module docstring).

    Yields a dict of facts (server, plans before and after, what was done), also noted on `ctx`.
    """
    stack: ServerStack = ctx.servers
    uri = stack.mongodb_uri
    info: dict[str, Any] = {"ferretdb": is_ferretdb(uri), "requested": enabled, "created": False}
    info["plan_before"] = _plan_of(uri)
    backend = stack.mongodb.backend_uri if stack.mongodb else None
    index = None
    conn = None
    if info["ferretdb"] and enabled:
        if not backend:
            info["skipped"] = "FerretDB's PostgreSQL backend is not known to the harness (external server)"
        else:
            import psycopg

            conn = psycopg.connect(backend.rsplit("/", 1)[0] + f"/{FERRETDB_PG_DB}", autocommit=True)
            row = conn.execute(
                f'SELECT _jsonb->>\'table\' FROM "{STUDY_DB}"._ferretdb_database_metadata '
                "WHERE _jsonb->>'_id' = %s", (COLLECTION,)).fetchone()
            if row is None:
                info["skipped"] = f"no backing table found for {COLLECTION}"
            else:
                index = f"{row[0]}_customer_gin_harness"
                conn.execute(f'CREATE INDEX IF NOT EXISTS "{index}" ON "{STUDY_DB}"."{row[0]}" '
                             "USING gin ((_jsonb -> 'customer'))")
                info.update(created=True, index=f"{STUDY_DB}.{index}",
                            definition="GIN ((_jsonb -> 'customer')) on the backing table")
                info["plan_after"] = _plan_of(uri)
    ctx.note("ferretdb_backend_index", info)
    try:
        yield info
    finally:
        if conn is not None:
            with conn:
                if index:
                    conn.execute(f'DROP INDEX IF EXISTS "{STUDY_DB}"."{index}"')


def grid(loops: tuple[str, ...], drivers: tuple[str, ...]) -> list[tuple[str, str]]:
    """(loop, driver) pairs, the seed's own (asyncio, pymongo) first."""
    pairs = [(lp, d) for lp in loops for d in drivers]
    return sorted(pairs, key=lambda p: (p != ("asyncio", "pymongo"), p))
