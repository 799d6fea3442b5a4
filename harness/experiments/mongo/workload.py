"""What the MongoDB experiments share: clients, event loops, the closed-loop `find_one` workload.

- `run_async(main, loop=...)`: one fresh event loop per call (`asyncio` or `uvloop`), so every
  async variant gets its own loop and its own client, created and closed inside it.
- `async_client(uri, driver=..., **options)`: PyMongo's `AsyncMongoClient` or Motor's
  `AsyncIOMotorClient` behind `async with`, closed however the block exits.
- `closed_loop_async()` / `closed_loop_threads()`: N workers, each running `find_one` on the
  indexed `customer` field in a closed loop for a fixed duration, customers drawn from a seeded RNG
  per worker (the same sequence for every variant). They return one row per operation.
  A worker starts no operation after `duration_s` and the measured window closes only when the
  last one has returned, so every operation both starts and ends inside it: the window's `ops` (its
  successful operations) is already the throughput count every family shares
  (`measure.completions_in_window`), and the latency samples hold no warm-up operation.
- `ferretdb_backend_index()`: FerretDB 1.x keeps a MongoDB index as a PostgreSQL btree on
  `_jsonb -> 'customer'`, but pushes an equality filter down as `_jsonb -> 'customer' @> ...`,
  which a btree cannot serve: every `find_one({"customer": ...})` is a sequential scan (see the
  `explain` the experiments record). To measure the seed's *indexed* query, this adds a GIN index
  on the same expression in the backing table for the experiment's duration, and drops it after.
  It does nothing on a real MongoDB server. Parameter `backend_index=off` measures without it.
- `ferretdb_pg_pool()` / `BackendConnections`: FerretDB's own pool of PostgreSQL connections (its
  configured size, read from the running FerretDB's flags) and how many of its connections the
  cluster saw during a window: a client pool larger than FerretDB's cannot get more concurrency.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ...core.datasets import CUSTOMERS
from ...core.measure import TreeCPU, Window, error_text, machine_busy_s
from ...core.redact import redact
from ...core.servers import FERRETDB_PG_DB, STUDY_DB, ServerStack
from ...core.workload_file import draw, fill

LOOPS = ("asyncio", "uvloop")
DRIVERS = ("pymongo", "motor")
COLLECTION = "orders"
# Documents in `orders` per profile: every MongoDB experiment uses the same size in a profile, so
# running several of them does not reload the collection between experiments.
DOCUMENTS = {"seed": 100_000, "full": 20_000, "quick": 20_000, "smoke": 2_000}
# The `samples` rows async_variant() and threads_variant() record (kinds as in experiments/base.py),
# before the caller's own fields.
CLOSED_LOOP_SAMPLES = {"variant": "str", "loop": "str", "driver": "str", "pool_size": "int", "workers": "int",
                       "semaphore": "bool", "task": "int", "start_s": "float", "latency_s": "float", "ok": "bool",
                       "error": "str"}


def run_async(main: Callable[[], Coroutine[Any, Any, Any]], *, loop: str = "asyncio") -> Any:
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

# The stated operation time-out of every MongoDB experiment's client: a server that stops answering
# but keeps its sockets open fails the operation after this long instead of holding it until the
# repeat's timeout_s stops the worker (fault class 4). It is a network read time-out
# (socketTimeoutMS), so it only counts while a request is on the wire: a task's wait for a pooled
# connection, which mongo_pool measures, is never cut short (timeoutMS or waitQueueTimeoutMS would
# turn that wait into errors). 30 s is about 3x the longest legitimate single reply measured on
# FerretDB here (11 s: one 16 MiB mongo_cursor batch of the full 100,000 documents; insert_many of
# 100,000 documents, one reply: 6 s), and below every repeat's timeout_s. mongo_bulk states its own
# timeoutMS, which PyMongo applies instead (its bulk upserts answer in one reply of tens of seconds).
SOCKET_TIMEOUT_MS = 30_000
# PyMongo's default, stated: the monitor's heartbeat check times out after this, and then interrupts
# the operations in use on that server. On a stalled path that often ends them before the read
# time-out (plus the driver's one read retry) does: measured by tests/test_faults.py, class 4.
CONNECT_TIMEOUT_MS = 20_000


def client_timeouts(**options: Any) -> dict[str, Any]:
    """`options` with the stated time-outs added where not given (passed to every client)."""
    return {"serverSelectionTimeoutMS": SERVER_SELECTION_TIMEOUT_MS, "socketTimeoutMS": SOCKET_TIMEOUT_MS,
            "connectTimeoutMS": CONNECT_TIMEOUT_MS, **options}


def note_timeouts(ctx: Any, **options: Any) -> None:
    """Record the clients' time-outs in the repeat (result.json and the manifest)."""
    ctx.note("mongodb_client_timeouts_ms", {k: v for k, v in client_timeouts(**options).items()
                                            if k.lower().endswith("timeoutms")})


@asynccontextmanager
async def async_client(uri: str, *, driver: str = "pymongo", **options: Any) -> AsyncIterator[Any]:
    """An async client for the running loop; closed on exit (PyMongo: awaited; Motor: sync)."""
    options = client_timeouts(**options)
    if driver == "pymongo":
        from pymongo import AsyncMongoClient

        client = AsyncMongoClient(uri, **options)
        try:
            yield client
        finally:
            await client.close()
    elif driver == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        motor_client = AsyncIOMotorClient(uri, **options)
        try:
            yield motor_client
        finally:
            motor_client.close()  # type: ignore[unused-coroutine]  # synchronous in Motor; its stubs say otherwise
    else:
        raise ValueError(f"driver must be one of {DRIVERS}, got {driver!r}")


def orders(client: Any) -> Any:
    return client[STUDY_DB][COLLECTION]


def customer_stream(seed: int, worker: int) -> Callable[[], str]:
    """Random customers for one worker; the same sequence for a given (seed, worker)."""
    rng = random.Random(f"{seed}:{worker}")
    return lambda: f"c{rng.randrange(CUSTOMERS)}"


@dataclass(frozen=True)
class Query:
    """The query each closed-loop operation runs: the seed's `find_one({"customer": c})` on
    `orders` by default, or a user's (`harness verify`): a filter template whose ":name" strings
    are drawn per operation from `params` ({"int": [lo, hi]} or {"choice": [...]}, seeded per
    worker), with optional projection, sort and limit (find_one when the limit is absent or 1)."""

    collection: str = COLLECTION
    database: str = STUDY_DB
    filter: dict[str, Any] | None = None          # None: the seed's customer lookup
    params: dict[str, Any] = field(default_factory=dict)
    projection: dict[str, Any] | None = None
    sort: dict[str, int] | None = None
    limit: int | None = None

    def filters(self, seed: int, worker: int) -> Callable[[], dict[str, Any]]:
        """The filters of one worker, in a fixed sequence for (seed, worker)."""
        if self.filter is None:
            customer = customer_stream(seed, worker)
            return lambda: {"customer": customer()}
        rng, template, params = random.Random(f"{seed}:{worker}"), self.filter, self.params

        return lambda: fill(template, draw(params, rng))

    def _options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.projection is not None:
            opts["projection"] = self.projection
        if self.sort:
            opts["sort"] = list(self.sort.items())
        return opts

    async def run_async(self, collection: Any, flt: dict[str, Any]) -> Any:
        if not self.limit or self.limit == 1:
            return await collection.find_one(flt, **self._options())
        return await collection.find(flt, limit=self.limit, **self._options()).to_list()

    def run_sync(self, collection: Any, flt: dict[str, Any]) -> Any:
        if not self.limit or self.limit == 1:
            return collection.find_one(flt, **self._options())
        return list(collection.find(flt, limit=self.limit, **self._options()))


SEED_QUERY = Query()


async def closed_loop_async(collection: Any, *, tasks: int, duration_s: float, seed: int,
                            t0: float | None = None, semaphore: asyncio.Semaphore | None = None,
                            query: Query = SEED_QUERY) -> list[dict[str, Any]]:
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
        next_filter = query.filters(seed, task)
        while (start := perf()) < stop:
            flt = next_filter()
            error = None
            try:
                if semaphore is None:
                    await query.run_async(collection, flt)
                else:
                    async with semaphore:
                        await query.run_async(collection, flt)
            except Exception as e:  # recorded per operation; the run goes on
                error = error_text(e)
            end = perf()
            rows.append({"task": task, "start_s": start - t0, "latency_s": end - start,
                         "ok": error is None, "error": error})
        return rows

    results = await asyncio.gather(*(worker(i) for i in range(tasks)))
    return [r for rows in results for r in rows]


def closed_loop_threads(collection: Any, *, threads: int, duration_s: float, seed: int,
                        t0: float | None = None, query: Query = SEED_QUERY) -> list[dict[str, Any]]:
    """The same workload on `threads` threads with a synchronous client. Same rows."""
    perf = time.perf_counter
    barrier = threading.Barrier(threads + 1)
    results: list[list[dict[str, Any]]] = [[] for _ in range(threads)]
    start_at: list[float] = []

    def worker(task: int) -> None:
        rows = results[task]
        next_filter = query.filters(seed, task)
        barrier.wait()
        base, stop = start_at[0], start_at[0] + duration_s
        while (start := perf()) < stop:
            flt = next_filter()
            error = None
            try:
                query.run_sync(collection, flt)
            except Exception as e:
                error = error_text(e)
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
                  backend: BackendConnections | None = None, db: DatabaseCPU | None = None,
                  query: Query = SEED_QUERY, profile: Path | None = None, **fields: Any) -> list[dict[str, Any]]:
    """One async closed-loop variant on its own loop and client: warm-up, then a measured window.

    Records the window (wall, process CPU, ops; with `backend`, the most connections FerretDB held
    to PostgreSQL during it) and one `samples` row per operation; returns them. With `profile`,
    py-spy samples the window into that file (`measure.Window`).
    """
    uri = ctx.servers.mongodb_uri

    async def main() -> list[dict[str, Any]]:
        async with async_client(uri, driver=driver, maxPoolSize=pool_size) as client:
            col = client[query.database][query.collection]
            # FIFO: asyncio.Semaphore wakes waiters in arrival order, unlike the pool's wait queue.
            sem = asyncio.Semaphore(pool_size) if semaphore else None
            if warmup_s > 0:
                await closed_loop_async(col, tasks=tasks, duration_s=warmup_s, seed=seed + 1, semaphore=sem,
                                        query=query)
            with _window(ctx, variant, backend, db, profile, loop=loop, driver=driver, pool_size=pool_size,
                         workers=tasks, semaphore=semaphore, duration_s=duration_s, **fields) as w:
                rows = await closed_loop_async(col, tasks=tasks, duration_s=duration_s, seed=seed,
                                               t0=w.t0, semaphore=sem, query=query)
                w.ops = sum(r["ok"] for r in rows)
            return rows

    rows = run_async(main, loop=loop)
    extra = {"variant": variant, "loop": loop, "driver": driver, "pool_size": pool_size,
             "workers": tasks, "semaphore": semaphore, **fields}
    rows = [{**extra, **r} for r in rows]
    ctx.record("samples", rows)
    return rows


def threads_variant(ctx: Any, variant: str, *, threads: int, pool_size: int, duration_s: float,
                    warmup_s: float, seed: int, backend: BackendConnections | None = None,
                    db: DatabaseCPU | None = None, query: Query = SEED_QUERY, profile: Path | None = None,
                    **fields: Any) -> list[dict[str, Any]]:
    """The same workload on threads with one synchronous MongoClient; same window and rows."""
    import pymongo

    with pymongo.MongoClient(ctx.servers.mongodb_uri, **client_timeouts(maxPoolSize=pool_size)) as client:
        col = client[query.database][query.collection]
        if warmup_s > 0:
            closed_loop_threads(col, threads=threads, duration_s=warmup_s, seed=seed + 1, query=query)
        with _window(ctx, variant, backend, db, profile, loop="threads", driver="pymongo-sync", pool_size=pool_size,
                     workers=threads, semaphore=False, duration_s=duration_s, **fields) as w:
            rows = closed_loop_threads(col, threads=threads, duration_s=duration_s, seed=seed, t0=w.t0,
                                       query=query)
            w.ops = sum(r["ok"] for r in rows)
    extra = {"variant": variant, "loop": "threads", "driver": "pymongo-sync", "pool_size": pool_size,
             "workers": threads, "semaphore": False, **fields}
    rows = [{**extra, **r} for r in rows]
    ctx.record("samples", rows)
    return rows


# ------------------------------------------------------------------------------ FerretDB's index

def is_ferretdb(uri: str) -> bool:
    import pymongo

    with pymongo.MongoClient(uri, **client_timeouts()) as c:
        return "ferretdbVersion" in c.admin.command("buildInfo")


def _plan_of(uri: str) -> dict[str, Any]:
    import pymongo

    with pymongo.MongoClient(uri, **client_timeouts()) as c:
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


# ------------------------------------------------------------------------ FerretDB's own pool

# FerretDB v1.24 sets pool_max_conns=50 on its PostgreSQL URL when the URL does not
# (internal/backends/postgresql/metadata/pool/uri.go at v1.24.2).
FERRETDB_DEFAULT_PG_POOL = 50


def _ferretdb_process(stack: ServerStack) -> Any:
    """The running FerretDB process: the harness's own, or the one listening on the URI's port."""
    import psutil

    server = stack.mongodb
    if server is not None and server.pids:
        try:
            return psutil.Process(server.pids[0])
        except psutil.Error:
            pass
    port = urlsplit(stack.mongodb_uri).port or 27017
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return psutil.Process(c.pid)
    except (psutil.Error, OSError):
        pass
    return None


def ferretdb_pg_pool(stack: ServerStack) -> dict[str, Any]:
    """FerretDB's pool of PostgreSQL connections: its size and where the figure comes from.

    Returns {"ferretdb": bool, "pool_max_conns": int | None, "source": str, "backend": redacted URL,
    "_dsn": the backend DSN (not for recording)}; `pool_max_conns` is None when not FerretDB or
    when its flags cannot be read (a server elsewhere).
    """
    import psutil

    if not is_ferretdb(stack.mongodb_uri):
        return {"ferretdb": False, "pool_max_conns": None, "source": "not FerretDB"}
    proc = _ferretdb_process(stack)
    if proc is None:
        return {"ferretdb": True, "pool_max_conns": None,
                "source": "FerretDB's process is not on this machine: its flags cannot be read"}
    try:
        argv = proc.cmdline()
    except psutil.Error as e:
        return {"ferretdb": True, "pool_max_conns": None, "source": f"cmdline unreadable: {error_text(e)}"}
    url = next((a.split("=", 1)[1] for a in argv if a.startswith("--postgresql-url=")), None)
    if url is None:  # the flag's other spelling: `--postgresql-url URL`
        url = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--postgresql-url"), None)
    if url is None:
        return {"ferretdb": True, "pool_max_conns": None, "source": f"no --postgresql-url in {argv[0]}'s flags"}
    query = parse_qs(urlsplit(url).query)
    if "pool_max_conns" in query:
        size, source = int(query["pool_max_conns"][0]), "pool_max_conns in FerretDB's --postgresql-url"
    else:
        size, source = FERRETDB_DEFAULT_PG_POOL, "FerretDB v1.24's default (no pool_max_conns in its URL)"
    return {"ferretdb": True, "pool_max_conns": size, "source": source, "backend": redact(url),
            "_dsn": url.split("?", 1)[0]}


class BackendConnections:
    """Polls, in a thread, how many connections the PostgreSQL cluster holds to FerretDB's database;
    `max` is the most seen between start() and stop() (NaN when nothing could be read, or with no
    `dsn`: a server whose backend is not known here)."""

    def __init__(self, dsn: str | None, interval_s: float = 0.05):
        self.dsn = dsn
        self.interval_s = interval_s
        self.max = float("nan")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.max = float("nan")
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="ferretdb-backends", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.max

    def _poll(self) -> None:
        import psycopg

        if not self.dsn:
            return
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while True:
                    n = (conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                      "AND pid <> pg_backend_pid()", (FERRETDB_PG_DB,)).fetchone() or (0,))[0]
                    self.max = n if self.max != self.max else max(self.max, n)  # NaN != NaN
                    if self._stop.wait(self.interval_s):
                        return
        except Exception:  # the figure stays NaN: recorded as not measured, the variant goes on
            return


class DatabaseCPU:
    """CPU seconds of the database's process trees on this machine (`servers.database_pids`:
    FerretDB and its PostgreSQL postmaster with every backend and background worker); NaN when
    there are none (a server in Docker or elsewhere)."""

    def __init__(self, pids: list[int]):
        self.meters = [m for m in (TreeCPU(pid) for pid in pids) if m.available]

    def read(self) -> float:
        return sum(m.read() for m in self.meters) if self.meters else float("nan")

    def switches(self) -> tuple[int, int]:
        """(voluntary, involuntary) context switches so far of the live processes (`TreeCPU.switches`)."""
        counts = [m.switches() for m in self.meters]
        return (sum(v for v, _ in counts), sum(i for _, i in counts)) if counts else (-1, -1)


@contextmanager
def _window(ctx: Any, variant: str, backend: BackendConnections | None, db: DatabaseCPU | None,
            profile: Path | None = None, **fields: Any) -> Iterator[Window]:
    """`ctx.window()` with the watch (`_watch`) around the window rather than inside it: its reads
    (the database's process trees, FerretDB's connections) take time, which counted as
    window time and lowered a short window's throughput (Little's law, tests/test_littles_law.py)."""
    w = Window(variant, fields, profile=profile)
    with _watch(backend, w, db), w:
        yield w
    if profile is not None:
        w.fields["profile_error"] = w.profile_error or ""
    ctx.record("windows", [w.row()])


@contextmanager
def _watch(backend: BackendConnections | None, window: Any, db: DatabaseCPU | None = None) -> Iterator[None]:
    """Over a window: the most backend connections FerretDB held (with `backend`), and the
    database's and the whole machine's CPU (with `db`): what names the window's bottleneck.

    The readings sit at the window's edges, in the experiment's own thread, when no operation runs:
    the window opens after the warm-up has drained and closes once its last operation has returned,
    so nothing of the load holds the reading up (unlike a monitor thread during the load).
    The machine is read next to the window's clock (last before it opens, first after it closes), so
    it does not count the database reading, a scan of the process list, that brackets it."""
    if backend is not None:
        backend.start()
    db0, machine0 = (db.read(), machine_busy_s()) if db is not None else (float("nan"), float("nan"))
    switches0 = db.switches() if db is not None else (-1, -1)
    try:
        yield
    finally:
        if db is not None:
            machine1 = machine_busy_s()
            window.fields.update(db_cpu_s=db.read() - db0, machine_busy_s=machine1 - machine0,
                                 cores=os.cpu_count() or 1)
            switches1 = db.switches()
            measured = min(*switches0, *switches1) >= 0
            window.fields.update(db_ctx_voluntary=switches1[0] - switches0[0] if measured else -1,
                                 db_ctx_involuntary=switches1[1] - switches0[1] if measured else -1)
        if backend is not None:
            window.fields["ferretdb_pg_conns_max"] = backend.stop()
