"""Seed 002's request, the five client models that run it, and the server-CPU probe.

The request (seed 002, step 1) runs three queries on one pooled connection: a primary-key lookup,
a small range count (`id BETWEEN i AND i + 50`) and another lookup (`i + 1`), with an optional
server-side `pg_sleep` before the last one standing in for a slow query. One function per driver
family holds it (`request_sync`, `request_psycopg_async`, `request_asyncpg`); every model below
calls one of them, and `pg_ceiling` gives pgbench the same three statements (`PGBENCH_SCRIPT`).

Client models (`MODELS`):
    threads_psycopg   ThreadPoolExecutor of `clients` threads, psycopg + psycopg_pool.ConnectionPool
    asyncio_psycopg   asyncio (default loop), psycopg AsyncConnectionPool
    asyncio_asyncpg   asyncio (default loop), asyncpg pool
    uvloop_asyncpg    uvloop, asyncpg pool
    uvloop_psycopg    uvloop, psycopg AsyncConnectionPool (beyond the seed)

Drivers are used with their defaults, as the seed does: a psycopg pool connection is not in
autocommit, so each psycopg request is wrapped in BEGIN ... COMMIT (the pool commits when the block
ends); asyncpg runs each statement on its own (no transaction) with its prepared-statement cache.
A user's request (`harness verify`) runs in a transaction started READ ONLY in every driver.
`psycopg_autocommit=True` in the spec switches psycopg to autocommit.

One variant (model x slow_ms x pool) runs in its own interpreter: `python -m harness.experiments.postgres.workload
SPEC RESULT` (started by `pg_models` through `harness.core.processes.run_child`). The child
1. opens the pool (all connections, outside any timing);
2. starts `clients` closed-loop clients (each issues its next request as soon as the last returns);
3. after `warmup_s` opens the measured window (a `Window` from `harness.core.measure`: wall time and
   this process's CPU), keeps it open `duration_s`, closes it, then stops the clients and drains;
4. calibrates the per-request database time on the now warm pool: `calibration_requests`
   requests issued one after another by a single client, so nothing queues (their latencies are
   returned raw; the analysis takes their median as the per-request database time of the pool
   bound);
5. writes the window row and every request that started and finished inside the window to OUT
   (the latency samples). The window row's `completed` counts the successful requests that
   ENDED inside the window, wherever they started (`measure.completions_in_window`): the
   throughput's count; `ops` keeps the old count (started and ended inside).
   The window row also carries `pool_held_s`: the connection-seconds inside the window during
   which a client held a pooled connection, from the pool's hand-over to the end of the request
   (so the release's own round trip, psycopg's COMMIT or asyncpg's reset, counts as held) or the
   same connection's next hand-over, summed over every request the child logged (the warm-up's
   and the drain's too), each clipped to the window (`held_in_window`); and `pool_query_s`: the
   connection-seconds in which a client was running its statements on the connection, from the
   moment its code resumed holding it to the last statement's return, clipped the same way
   (`queried_in_window`): held minus the hand-over not yet picked up and the release. Divided by
   pool x wall, `pool_held_s` is the share of the pool's connection time in use; the rest is
   connections idle, or handed over but not yet picked up by a waiting client.

A monitor thread, not the event loop, opens and closes the window, so a saturated loop cannot
stretch it; the window's bounds are the times actually taken. The CPU figures of the window are
read by the parent, not the child (`run_in_child`, `measure.EdgeCPU`): a thread of the worker that
only waits for the child samples the child's CPU, the PostgreSQL postmaster and all its descendants
(`ServerCPU`'s tree) and the whole machine's busy time (every process, including anything else
running on a shared machine) every 50 ms, and interpolates each at the child's window edges. The
child's own readings, taken by the monitor thread just outside the window, queued for the GIL behind
the clients and read up to 5 cores on a 2-core machine: they stay as `cpu_child_s`,
`server_cpu_child_s` and `machine_busy_child_s`. `cpu_check` is '' when client + server <= machine
<= cores x wall (within `measure.CPU_TOLERANCE_*`), else the broken inequality; the analysis
leaves such a window's CPU figures out.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ...core.cgroup import capacity_cores
from ...core.measure import (  # noqa: F401 (find_postmaster re-exported)
    EdgeCPU,
    ServerCPU,
    Window,
    completions_in_window,
    cpu_consistency,
    error_text,
    find_postmaster,
    machine_busy_s,
)
from ...core.processes import child_main

MODELS = ("threads_psycopg", "asyncio_psycopg", "asyncio_asyncpg", "uvloop_asyncpg", "uvloop_psycopg")
SEED_MODELS = MODELS[:4]          # the four the seed measured
POOL_OPEN_TIMEOUT_S = 30.0        # psycopg_pool retries connecting until then
CONSECUTIVE_ERRORS_MAX = 50       # a client that fails this many times in a row stops (no spinning)

# psycopg placeholders (%s) -------------------------------------------------------------------------
Q_LOOKUP = "SELECT owner, balance FROM acct WHERE id = %s"
Q_RANGE = "SELECT count(*) FROM acct WHERE id BETWEEN %s AND %s + 50"
Q_SLEEP = "SELECT pg_sleep(%s)"
# asyncpg placeholders ($n) -------------------------------------------------------------------------
A_LOOKUP = "SELECT owner, balance FROM acct WHERE id = $1"
A_RANGE = "SELECT count(*) FROM acct WHERE id BETWEEN $1 AND $1 + 50"
A_SLEEP = "SELECT pg_sleep($1)"

# pgbench: the same three statements; :rows and :sleep_s come from -D, each statement autocommits.
PGBENCH_SCRIPT = """\\set i random(1, :rows - 1)
SELECT owner, balance FROM acct WHERE id = :i;
SELECT count(*) FROM acct WHERE id BETWEEN :i AND :i + 50;
{sleep}SELECT owner, balance FROM acct WHERE id = :i + 1;
"""
PGBENCH_SLEEP = "SELECT pg_sleep(:sleep_s);\n"


def pgbench_script(slow_ms: float) -> str:
    return PGBENCH_SCRIPT.format(sleep=PGBENCH_SLEEP if slow_ms > 0 else "")


def regime_name(slow_ms: float) -> str:
    """`slow` when a pg_sleep is added to each request, `fast` when not."""
    return "slow" if slow_ms > 0 else "fast"


def fmt_ms(slow_ms: float) -> str:
    return f"{slow_ms:g}"


# ------------------------------------------------------------------------------------ the request
# Each returns (t_acquired, t_released, connection): perf_counter() when the pool handed over a
# connection and when the last query returned, so wait = t_acquired - start and hold = t_released -
# t_acquired, and which connection it was (psycopg's pool hands out its own Connection objects, so
# their id; asyncpg hands out a new proxy each time, so the backend's pid), for `held_in_window`.

def request_sync(pool, i: int, slow_s: float) -> tuple[float, float, Any]:
    with pool.connection() as c:
        t_acq = time.perf_counter()
        c.execute(Q_LOOKUP, (i,)).fetchone()
        c.execute(Q_RANGE, (i, i)).fetchone()
        if slow_s:
            c.execute(Q_SLEEP, (slow_s,))
        c.execute(Q_LOOKUP, (i + 1,)).fetchone()
        t_rel = time.perf_counter()
    return t_acq, t_rel, id(c)


async def request_psycopg_async(pool, i: int, slow_s: float) -> tuple[float, float, Any]:
    async with pool.connection() as c:
        t_acq = time.perf_counter()
        await (await c.execute(Q_LOOKUP, (i,))).fetchone()
        await (await c.execute(Q_RANGE, (i, i))).fetchone()
        if slow_s:
            await c.execute(Q_SLEEP, (slow_s,))
        await (await c.execute(Q_LOOKUP, (i + 1,))).fetchone()
        t_rel = time.perf_counter()
    return t_acq, t_rel, id(c)


async def request_asyncpg(pool, i: int, slow_s: float) -> tuple[float, float, Any]:
    async with pool.acquire() as c:
        t_acq = time.perf_counter()
        await c.fetchrow(A_LOOKUP, i)
        await c.fetchval(A_RANGE, i)
        if slow_s:
            await c.execute(A_SLEEP, slow_s)
        await c.fetchrow(A_LOOKUP, i + 1)
        t_rel = time.perf_counter()
        conn = c.get_server_pid()
    return t_acq, t_rel, conn


def program_sync(statements: tuple[dict, ...], pool, values: dict, _slow_s: float) -> tuple[float, float, Any]:
    with pool.connection() as c:
        t_acq = time.perf_counter()
        for st in statements:
            cur = c.execute(st["psycopg"], values)
            if cur.description is not None:
                cur.fetchall()
        t_rel = time.perf_counter()
    return t_acq, t_rel, id(c)


async def program_psycopg_async(statements: tuple[dict, ...], pool, values: dict,
                                _slow_s: float) -> tuple[float, float, Any]:
    async with pool.connection() as c:
        t_acq = time.perf_counter()
        for st in statements:
            cur = await c.execute(st["psycopg"], values)
            if cur.description is not None:
                await cur.fetchall()
        t_rel = time.perf_counter()
    return t_acq, t_rel, id(c)


async def program_asyncpg(statements: tuple[dict, ...], pool, values: dict,
                          _slow_s: float) -> tuple[float, float, Any]:
    async with pool.acquire() as c:
        t_acq = time.perf_counter()
        # A user's request runs in a transaction started READ ONLY: asyncpg's default,
        # one implicit transaction per statement, would follow the session's default, which the
        # request itself could change.
        async with c.transaction(readonly=True):
            for st in statements:
                await c.fetch(st["asyncpg"], *[values[n] for n in st["names"]])
        t_rel = time.perf_counter()
        conn = c.get_server_pid()
    return t_acq, t_rel, conn


# ------------------------------------------------------------------------------------ one variant

@dataclass(frozen=True)
class VariantSpec:
    variant: str
    model: str
    dsn: str
    pool: int
    clients: int
    slow_ms: float
    warmup_s: float
    duration_s: float
    rows: int
    seed: int
    calibration_requests: int
    postmaster_pid: int | None
    psycopg_autocommit: bool = False
    # A user's request (`harness verify`) instead of the seed's: statements run in order on one
    # connection, each {"psycopg": sql, "asyncpg": sql, "names": [...]} (harness.core.workload_file), and
    # per-request parameters drawn from `params` ({"int": [lo, hi]} or {"choice": [...]}).
    statements: tuple[dict, ...] = ()
    params: dict | None = None
    # Every transaction starts READ ONLY (psycopg's `read_only`, asyncpg's `transaction(readonly=
    # True)`) and every session opens with default_transaction_read_only=on. A user's statements
    # need it, and need a transaction: no psycopg autocommit.
    read_only: bool = False
    regime: str = ""                 # the rows' regime: "" = slow or fast by slow_ms (regime_of)
    profile: str = ""                # a file: py-spy samples the child over its window (measure.Window)

    def __post_init__(self) -> None:
        if self.statements and not (self.read_only and not self.psycopg_autocommit):
            raise ValueError("a user's statements run only in read-only transactions (read_only=True, "
                             "psycopg_autocommit=False)")


def regime_of(spec: VariantSpec) -> str:
    return spec.regime or regime_name(spec.slow_ms)


class _State:
    """Shared between clients and the monitor thread (plain attribute reads are atomic)."""

    def __init__(self) -> None:
        self.stop = False
        self.go = threading.Event()  # threads model: set once every client thread exists
        self.open_at = math.inf     # perf_counter() bounds of the measured window
        self.close_at = math.inf


def _monitor(spec: VariantSpec, state: _State, server: ServerCPU, out: dict) -> None:
    """Open the window after the warm-up, close it `duration_s` later, then stop the clients."""
    try:
        time.sleep(spec.warmup_s)
        s0, m0 = server.read(), machine_busy_s()
        sw0 = server.switches()
        procs0 = server.processes
        w = Window(spec.variant, profile=Path(spec.profile) if spec.profile else None).open()
        state.open_at = w.t0
        time.sleep(spec.duration_s)
        w.close()
        state.close_at = w.close_at
        s1, m1 = server.read(), machine_busy_s()
        sw1 = server.switches()
        out.update(open_at=state.open_at, close_at=state.close_at, wall_s=w.wall_s, cpu_s=w.cpu_s,
                   cpu_user_s=w.cpu_user_s, cpu_system_s=w.cpu_system_s, cpu_wait_s=w.cpu_wait_s,
                   ctx_voluntary=w.ctx_voluntary, ctx_involuntary=w.ctx_involuntary,
                   server_ctx_voluntary=sw1[0] - sw0[0] if server.available else -1,
                   server_ctx_involuntary=sw1[1] - sw0[1] if server.available else -1,
                   **({"profile_error": w.profile_error or ""} if spec.profile else {}),
                   server_cpu_s=s1 - s0,
                   machine_busy_s=m1 - m0, server_procs_open=procs0,
                   server_procs_close=server.processes, threads_in_process=threading.active_count(),
                   client_cores=capacity_cores())  # below 1 in pg_models' split cells on a fast client
    finally:
        state.stop = True


def _rng(spec: VariantSpec, task: int) -> random.Random:
    return random.Random(f"{spec.seed}:{task}")


def _next_argument(spec: VariantSpec, rng: random.Random) -> Callable[[], Any]:
    """What each request gets: the seed's row id `i`, or the user's drawn parameters."""
    if spec.statements:
        from ...core.workload_file import draw  # here, not at the top: the seed's children need no pydantic

        params = spec.params or {}
        return lambda: draw(params, rng)
    hi = spec.rows - 1
    return lambda: rng.randint(1, hi)


def _sync_request(spec: VariantSpec) -> Callable:
    return partial(program_sync, spec.statements) if spec.statements else request_sync


def _async_request(spec: VariantSpec, driver: str) -> Callable:
    if spec.statements:
        return partial(program_asyncpg if driver == "asyncpg" else program_psycopg_async, spec.statements)
    return request_asyncpg if driver == "asyncpg" else request_psycopg_async


READ_ONLY_SESSION = "-c default_transaction_read_only=on"


def _psycopg_kwargs(spec: VariantSpec) -> dict[str, Any]:
    kw: dict[str, Any] = {"autocommit": spec.psycopg_autocommit}
    if spec.read_only:
        kw["options"] = READ_ONLY_SESSION
    return kw


def _read_only_sync(conn) -> None:
    conn.read_only = True          # psycopg then starts every transaction with BEGIN READ ONLY


async def _read_only_async(conn) -> None:
    await conn.set_read_only(True)


def _client_sync(spec: VariantSpec, task: int, pool, state: _State, log: list) -> None:
    next_argument, slow_s, request = _next_argument(spec, _rng(spec, task)), spec.slow_ms / 1000.0, _sync_request(spec)
    consecutive = 0
    state.go.wait()
    while not state.stop:
        i = next_argument()
        t0 = time.perf_counter()
        try:
            t_acq, t_rel, conn = request(pool, i, slow_s)
            err = ""
            consecutive = 0
        except Exception as e:  # recorded as a failed request; the client goes on
            t_acq = t_rel = math.nan
            conn = None
            err = error_text(e, 200)
            consecutive += 1
        log.append((task, t0, time.perf_counter(), t_acq, t_rel, conn, err))
        if consecutive >= CONSECUTIVE_ERRORS_MAX:
            return


async def _client_async(spec: VariantSpec, task: int, request: Callable, pool, state: _State,
                        log: list) -> None:
    next_argument, slow_s = _next_argument(spec, _rng(spec, task)), spec.slow_ms / 1000.0
    consecutive = 0
    while not state.stop:
        i = next_argument()
        t0 = time.perf_counter()
        try:
            t_acq, t_rel, conn = await request(pool, i, slow_s)
            err = ""
            consecutive = 0
        except Exception as e:
            t_acq = t_rel = math.nan
            conn = None
            err = error_text(e, 200)
            consecutive += 1
        log.append((task, t0, time.perf_counter(), t_acq, t_rel, conn, err))
        if consecutive >= CONSECUTIVE_ERRORS_MAX:
            return


def _calibrate_sync(spec: VariantSpec, pool) -> list[float]:
    next_argument, request, out = _next_argument(spec, _rng(spec, -1)), _sync_request(spec), []
    for _ in range(spec.calibration_requests):
        t0 = time.perf_counter()
        request(pool, next_argument(), spec.slow_ms / 1000.0)
        out.append(time.perf_counter() - t0)
    return out


async def _calibrate_async(spec: VariantSpec, request: Callable, pool) -> list[float]:
    next_argument, out = _next_argument(spec, _rng(spec, -1)), []
    for _ in range(spec.calibration_requests):
        t0 = time.perf_counter()
        await request(pool, next_argument(), spec.slow_ms / 1000.0)
        out.append(time.perf_counter() - t0)
    return out


def _check_reachable(dsn: str) -> None:
    """One plain connection before a psycopg pool opens: psycopg_pool retries a refused server until
    its open time-out, so a server that died mid-run would cost POOL_OPEN_TIMEOUT_S per variant
    instead of failing at once (asyncpg's pool fails on the first refusal by itself)."""
    import psycopg

    psycopg.connect(dsn, connect_timeout=10).close()


def _run_threads(spec: VariantSpec, server: ServerCPU) -> tuple[dict, list, list[float]]:
    from psycopg_pool import ConnectionPool

    _check_reachable(spec.dsn)
    pool = ConnectionPool(spec.dsn, min_size=spec.pool, max_size=spec.pool, open=False,
                          kwargs=_psycopg_kwargs(spec), configure=_read_only_sync if spec.read_only else None)
    pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_S)
    try:
        state, window, logs = _State(), {}, [[] for _ in range(spec.clients)]
        with ThreadPoolExecutor(max_workers=spec.clients) as ex:
            # Clients wait for `go`: with the first ones already running, the main thread fought
            # them for the GIL and took ~1.5 s to start 200 threads (an unrecorded, longer warm-up).
            try:
                futures = [ex.submit(_client_sync, spec, t, pool, state, logs[t]) for t in range(spec.clients)]
            except BaseException:
                state.stop = True  # the threads already started end at once instead of hanging the exit
                raise
            finally:
                state.go.set()
            _monitor(spec, state, server, window)
            for f in futures:
                f.result()
        calib = _calibrate_sync(spec, pool)
    finally:
        pool.close()
    return window, [r for log in logs for r in log], calib


async def _run_async(spec: VariantSpec, server: ServerCPU) -> tuple[dict, list, list[float]]:
    if spec.model.endswith("asyncpg"):
        import asyncpg

        settings = {"default_transaction_read_only": "on"} if spec.read_only else None
        pool = await asyncpg.create_pool(spec.dsn, min_size=spec.pool, max_size=spec.pool,
                                         server_settings=settings)
        request, close = _async_request(spec, "asyncpg"), pool.close
    else:
        from psycopg_pool import AsyncConnectionPool

        _check_reachable(spec.dsn)   # before the loop's work starts: a blocking call is fine here
        pool = AsyncConnectionPool(spec.dsn, min_size=spec.pool, max_size=spec.pool, open=False,
                                   kwargs=_psycopg_kwargs(spec),
                                   configure=_read_only_async if spec.read_only else None)
        await pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_S)
        request, close = _async_request(spec, "psycopg"), pool.close
    try:
        state, window, logs = _State(), {}, [[] for _ in range(spec.clients)]
        tasks = [asyncio.create_task(_client_async(spec, t, request, pool, state, logs[t]))
                 for t in range(spec.clients)]
        monitor = threading.Thread(target=_monitor, args=(spec, state, server, window), daemon=True)
        monitor.start()
        try:
            await asyncio.gather(*tasks)
        finally:
            state.stop = True
            await asyncio.to_thread(monitor.join)
        calib = await _calibrate_async(spec, request, pool)
    finally:
        await close()
    return window, [r for log in logs for r in log], calib


def run_variant(spec: VariantSpec) -> dict[str, Any]:
    """Measure one variant in this process.

    Returns {"window": {...}, "samples": {column: [...]}, "calibration_latency_s": [...]}.
    """
    if spec.model not in MODELS:
        raise ValueError(f"unknown model {spec.model!r}; known: {', '.join(MODELS)}")
    server = ServerCPU(spec.postmaster_pid)
    if spec.model == "threads_psycopg":
        window, log, calib = _run_threads(spec, server)
        loop, driver = "threads", "psycopg"
    else:
        loop, driver = spec.model.split("_", 1)
        if loop == "uvloop":
            import uvloop

            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        else:
            factory = asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            window, log, calib = runner.run(_run_async(spec, server))
    if "wall_s" not in window:
        raise RuntimeError("the measured window never closed")
    return _package(spec, window, log, calib, server, loop, driver)


def held_in_window(log: list, open_at: float, close_at: float) -> float:
    """Connection-seconds held inside [open_at, close_at]. A successful request holds its connection
    from the pool's hand-over (t_acq) to its end (t1, after the release), or to the next hand-over
    of the same connection if that came first: an asyncpg release finishes in a task of its own,
    so the next client can already hold the connection when the releasing one resumes and reads
    its clock. Each span is clipped to the window. A failed request's hand-over is unknown (NaN) and
    not counted."""
    spans: dict[Any, list[tuple[float, float]]] = {}
    for _task, _t0, t1, t_acq, _t_rel, conn, err in log:
        if not err:
            spans.setdefault(conn, []).append((t_acq, t1))
    held = 0.0
    for held_spans in spans.values():
        held_spans.sort()
        for k, (start, end) in enumerate(held_spans):
            if k + 1 < len(held_spans):
                end = min(end, held_spans[k + 1][0])
            held += max(0.0, min(end, close_at) - max(start, open_at))
    return held


def queried_in_window(log: list, open_at: float, close_at: float) -> float:
    """Connection-seconds inside [open_at, close_at] during which a successful request ran its
    statements: from t_acq (the client's code holding the connection) to t_rel (the last
    statement's return), clipped to the window. Unlike `held_in_window`, it leaves out what lies
    between two requests on a connection: a hand-over the client has not yet run (an asyncpg
    connection given to a task the loop has not resumed) and the release. A request's span on a
    connection never overlaps another's, so the sum is at most pool x wall."""
    return sum(max(0.0, min(t_rel, close_at) - max(t_acq, open_at))
               for _task, _t0, _t1, t_acq, t_rel, _conn, err in log if not err)


def _package(spec, window, log, calib, server, loop, driver) -> dict[str, Any]:
    from importlib.metadata import version

    open_at, close_at = window.pop("open_at"), window.pop("close_at")
    window["edges"] = [open_at, close_at]    # perf_counter(): the parent's CPU reader interpolates at them
    cols = {k: [] for k in ("task", "start_s", "latency_s", "ok", "wait_s", "hold_s", "error")}
    ops_all = errors = 0
    for task, t0, t1, t_acq, t_rel, _conn, err in log:
        ops_all += 1
        if t0 < open_at or t1 > close_at:
            continue  # warm-up, or still in flight when the window closed
        cols["task"].append(task)
        cols["start_s"].append(t0 - open_at)
        cols["latency_s"].append(t1 - t0)
        cols["ok"].append(not err)
        cols["wait_s"].append(t_acq - t0)
        cols["hold_s"].append(t_rel - t_acq)
        cols["error"].append(err)
        errors += bool(err)
    driver_pkg = "asyncpg" if driver == "asyncpg" else "psycopg"
    window.update(
        ops=len(cols["task"]) - errors, errors=errors, ops_all=ops_all,
        completed=completions_in_window([r[2] for r in log], [not r[6] for r in log], open_at, close_at),
        pool_held_s=held_in_window(log, open_at, close_at),
        pool_query_s=queried_in_window(log, open_at, close_at),
        model=spec.model, regime=regime_of(spec), slow_ms=spec.slow_ms, pool=spec.pool,
        clients=spec.clients, duration_s=spec.duration_s, warmup_s=spec.warmup_s, rows=spec.rows,
        loop=loop, driver=f"{driver_pkg} {version(driver_pkg)}",
        loop_impl=(f"uvloop {version('uvloop')}" if loop == "uvloop" else loop),
        psycopg_autocommit=spec.psycopg_autocommit if driver_pkg == "psycopg" else None,
        calibration_requests=len(calib),
        server_cpu_source=server.source,
        gil_enabled=bool(getattr(sys, "_is_gil_enabled", lambda: True)()),
        python=sys.version.split()[0],
    )
    return {"window": window, "samples": cols, "calibration_latency_s": calib}


def tables(window_columns: Callable[..., dict[str, str]], other_columns: str) -> dict[str, dict[str, str]]:
    """The schema of the tables `run_in_child` records (pg_models' and verify_postgres'), given
    `experiments.base.window_columns` and its OTHER_COLUMNS key (a floor above this module)."""
    keys = {"model": "str", "regime": "str", "slow_ms": "float", "pool": "int"}
    return {
        "samples": {"variant": "str", "task": "int", "start_s": "float", "latency_s": "float", "ok": "bool",
                    "wait_s": "float", "hold_s": "float", "error": "str", **keys},
        # the child's window carries its own descriptive fields (driver versions, loop, ...) beside these
        "windows": window_columns(completed="int", errors="int", ops_all="int", pool_held_s="float",
                                  pool_query_s="float", server_cpu_s="float", machine_busy_s="float", cpu_check="str",
                                  cpu_child_s="float", server_cpu_child_s="float", machine_busy_child_s="float",
                                  server_ctx_voluntary="int", server_ctx_involuntary="int",
                                  clients="int", duration_s="float", **keys, **{other_columns: "any"}),
        "calibration": {"variant": "str", "latency_s": "float", **keys},
        "failures": {"variant": "str", "model": "str", "slow_ms": "float", "pool": "int", "error": "str",
                     "returncode": "int", "log_tail": "str"},
    }


def cpu_at_edges(cpu: EdgeCPU, window: dict[str, Any], server_measured: bool) -> dict[str, Any]:
    """The window's client, server and machine CPU read by the parent at the child's window edges
    (`measure.EdgeCPU`), replacing the child's own readings, which are kept as `*_child_s`; and
    `cpu_check`, '' when they fit the machine (`measure.cpu_consistency`), else why not."""
    read = cpu.window(*window.pop("edges"))
    user, system = read.get("client", (math.nan, math.nan))
    server = sum(read["server"]) if server_measured and "server" in read else math.nan
    machine = read["machine"][0]
    out = {"cpu_child_s": window["cpu_s"], "server_cpu_child_s": window["server_cpu_s"],
           "machine_busy_child_s": window["machine_busy_s"],
           "cpu_s": user + system, "cpu_user_s": user, "cpu_system_s": system,
           "server_cpu_s": server, "machine_busy_s": machine, "cpu_read_by": "parent, at the window's edges"}
    out["cpu_check"] = cpu_consistency(out["cpu_s"], server, machine, float(window["wall_s"]), os.cpu_count() or 1)
    return out


def measure_in_child(ctx: Any, spec: VariantSpec, timeout_s: float, stem: str) -> tuple[dict | None, Any]:
    """Run one variant in its own interpreter (`python -m harness.experiments.postgres.workload`),
    its CPU read by this process at the child's window edges. Returns (result, child): the child's
    result with its window's CPU replaced by the edge readings (`cpu_at_edges`), or None when it
    failed (then `child.error` says why). Records nothing: `run_in_child` records; pg_models'
    pilot only reads. `stem` names the child's log among the artifacts."""
    import tempfile

    from ...core import processes

    with tempfile.TemporaryDirectory(prefix="pg_workload-") as tmp, \
            EdgeCPU({"server": (spec.postmaster_pid, True)}) as cpu:
        child = processes.run_child(f"{ctx.experiment.name}:{stem}", "harness.experiments.postgres.workload", spec,
                                    result_path=Path(tmp) / "out.json", log_path=ctx.artifacts / f"{stem}.log",
                                    timeout_s=timeout_s, on_start=lambda pid: cpu.add("client", pid))
        result = child.result
        if child.error is None and result is not None:
            result["window"].update(cpu_at_edges(cpu, result["window"], spec.postmaster_pid is not None))
    return (result if child.error is None else None), child


def run_in_child(ctx: Any, spec: VariantSpec, timeout_s: float, stem: str) -> bool:
    """Run one variant in its own interpreter (`measure_in_child`) and record its `windows`,
    `samples` and `calibration` rows in `ctx` (an experiment's Context), or its `failures` row.
    True if it succeeded. `stem` names the child's log among the artifacts."""
    import pandas as pd

    keys = {"model": spec.model, "regime": regime_of(spec), "slow_ms": spec.slow_ms, "pool": spec.pool}
    result, child = measure_in_child(ctx, spec, timeout_s, stem)
    if result is None:
        error = child.error or "the child returned no result"
        ctx.record("failures", [{"variant": spec.variant, "model": spec.model, "slow_ms": spec.slow_ms,
                                 "pool": spec.pool, "error": error, "returncode": child.returncode,
                                 "log_tail": child.log_tail}])
        ctx.log.warning("%s failed: %s", spec.variant, error)
        return False
    window = result["window"]
    lead = {k: window.pop(k) for k in ("wall_s", "cpu_s", "cpu_user_s", "cpu_system_s", "ops")}
    ctx.record("windows", [{"variant": spec.variant, **lead, **window}])
    samples = pd.DataFrame(result["samples"])
    samples.insert(0, "variant", spec.variant)
    for k, v in keys.items():
        samples[k] = v
    ctx.record("samples", samples.astype({"task": "int32", "ok": "bool"}))
    ctx.record("calibration", pd.DataFrame({"variant": spec.variant, **keys,
                                            "latency_s": result["calibration_latency_s"]}))
    return True


if __name__ == "__main__":
    sys.exit(child_main(run_variant, VariantSpec))
