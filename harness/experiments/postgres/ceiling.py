"""The C ceiling for seed 002: pgbench running the same three-query request.

`pgbench` (shipped with PostgreSQL) runs a custom script (`harness.experiments.postgres.workload.pgbench_script`:
a random id via `\\set`, the lookup, the range count, the optional `pg_sleep`, the second lookup;
each statement in autocommit) with `-c clients -j jobs -T seconds -M mode -n --log`. pgbench has
no pool: each of its clients holds its own connection, so its pool-equivalent size is the client
count (recorded as `pool` with `pool_note`). Besides the seed's 200 clients, the default grid runs
it with as many clients as the Python models' pools (20 and 50): what a C client with that many
connections and no queueing overhead reaches.

Variants: `pgbench[mode=<prepared|simple>,slow_ms=<ms>,clients=<n>]`.

The measured window: once all of pgbench's connections exist on the server (or after 1 s when
the server is not a process here), `warmup_s` is skipped, then a `duration_s` window is timed in
wall-clock time; pgbench's `-T` is long enough to cover it. Over the window this worker reads the
pgbench process's CPU (all its threads, via psutil) and the server's CPU (postmaster and
descendants). Throughput in the window comes from pgbench's per-transaction log.

Tables (one repeat):
- `samples`: variant, task (pgbench client id), start_s (since the window opened), latency_s,
  ok, mode, clients, slow_ms, regime: every transaction of the log that started and finished
  inside the window.
- `windows`: variant, wall_s, cpu_s (pgbench's CPU over the window), cpu_user_s, cpu_system_s,
  cpu_wait_s (pgbench's threads' run-queue wait),
  ops (successful transactions that started and ended in the window), completed (successful
  transactions that ended in the window, `measure.completions_in_window`: the throughput's count),
  pgbench_exited_in_window (its CPU is then its last reading), server_cpu_s, machine_busy_s (busy
  CPU of every process on the machine, all cores), server_cpu_source, mode, clients, jobs,
  slow_ms, regime, pool (= clients), pool_note, duration_s, warmup_s, rows, tool.
- `pgbench`: variant, mode, clients, jobs, slow_ms, regime, seconds (-T), returncode,
  tps_reported (pgbench's own figure over its whole run, without connection time),
  latency_avg_ms_reported, initial_connection_ms, transactions_reported, failed_reported,
  log_transactions (lines in the per-transaction log), window_inside_run (bool).
- `failures`: variant, error, returncode, output_tail.
Artifacts: `pgbench_<stem>.sql` (the script) and `pgbench_<stem>.out` (pgbench's output). Its
per-transaction log is read into `samples` (the transactions inside the measured window) and not
kept beside it.
"""

from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil

from ...core import datasets, processes, servers
from ...core.errors import HarnessError
from ...core.measure import (
    EdgeCPU,
    ProcessTimes,
    ServerCPU,
    completions_in_window,
    cpu_consistency,
    error_text,
    find_postmaster,
    machine_busy_s,
    waited_s,
)
from ..analysis import CPU_REJECTED_METRIC, put_cpu_rejected
from ..base import OTHER_COLUMNS, Context, Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import ceiling_table
from .workload import fmt_ms, pgbench_script, regime_name

MODES = ("prepared", "simple", "extended")
POOL_NOTE = "pgbench has no pool: each client holds its own connection (pool-equivalent = clients)"
CONNECT_WAIT_S = 15.0     # longest wait for all pgbench connections before the warm-up starts
BENCH_READ_EVERY_S = 0.1  # how stale pgbench's CPU may be if it exits inside the window

_OUTPUT = {
    "tps_reported": r"^tps = ([\d.]+)",
    "latency_avg_ms_reported": r"^latency average = ([\d.]+) ms",
    "initial_connection_ms": r"^initial connection time = ([\d.]+) ms",
    "transactions_reported": r"^number of transactions actually processed: (\d+)",
    "failed_reported": r"^number of failed transactions: (\d+)",
}


def parse_output(text: str) -> dict[str, float]:
    """pgbench's summary lines (PostgreSQL 15+ format); NaN for a line that is missing."""
    out = {}
    for key, pattern in _OUTPUT.items():
        m = re.search(pattern, text, re.MULTILINE)
        out[key] = float(m.group(1)) if m else math.nan
    return out


def read_log(paths: list[Path]) -> pd.DataFrame:
    """pgbench --log lines `client_id transaction_no time script_no time_epoch time_us [...]`:
    `time` is the latency in microseconds (or `failed`/`skipped`), time_epoch.time_us the moment
    the transaction ended. Returns task, end_epoch_s, latency_s, ok."""
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                ok = parts[2].isdigit()
                end = int(parts[4]) + int(parts[5]) / 1e6
                rows.append((int(parts[0]), end, int(parts[2]) / 1e6 if ok else math.nan, ok))
    return pd.DataFrame(rows, columns=["task", "end_epoch_s", "latency_s", "ok"])


@dataclass(frozen=True)
class PgCeilingParams(Params):
    clients: tuple[int, ...] = (200, 20, 50)      # 200 = the seed's concurrency; 20, 50 = its pools
    jobs: int = 2                                 # pgbench threads (-j)
    modes: tuple[str, ...] = ("prepared", "simple")   # -M
    slow_ms: tuple[float, ...] = (10.0, 0.0)      # pg_sleep per transaction; 0 = fast
    duration_s: float = 5.0
    warmup_s: float = 1.0
    rows: int = 100_000
    margin_s: int = 3                             # -T beyond warm-up + window (covers connecting)
    pgbench: str = "pgbench"                      # binary, or a path
    timeout_s: float = 900.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("clients", "jobs", "duration_s", "margin_s")
        self.require_non_negative("slow_ms")
        self.require_choice("modes", MODES)
        if self.rows < 2:
            raise HarnessError(f"parameter rows must be at least 2, got {self.rows}")

    def seconds(self) -> int:
        return int(math.ceil(self.warmup_s + self.duration_s)) + self.margin_s


class PgCeiling(Experiment):
    name = "pg_ceiling"
    title = "The C ceiling: pgbench running the same three-query request"
    needs = ("postgres",)
    params_type = PgCeilingParams
    profiles = {
        "seed": {},
        # margin 2: at 1, a 200-client pgbench ended before its window closed in 1-3 of 60 cells of
        # each of four full runs (connecting 200 clients takes 0.5-0.7 s here)
        "full": {"duration_s": 2.0, "warmup_s": 0.5, "margin_s": 2},
        "quick": {"clients": (100, 20), "duration_s": 1.0, "warmup_s": 0.3, "margin_s": 1},
        "smoke": {"clients": (8,), "duration_s": 0.5, "warmup_s": 0.2, "rows": 10_000,
                  "margin_s": 1, "timeout_s": 240.0},
    }
    repeats = {"smoke": 1, "quick": 1, "full": 5, "seed": 10}
    analysis = "harness.experiments.postgres.analysis"
    family = "postgres"
    ceiling = "pgbench"
    drivers = ("psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
    notebook = "03_postgres_models.ipynb"
    headline = (Metric("tps", "transactions/s", "higher"), Metric("p99_ms", "ms", "lower"))
    _keys = {"mode": "str", "clients": "int", "slow_ms": "float", "regime": "str"}
    tables = {
        "samples": {"variant": "str", "task": "int", "start_s": "float", "latency_s": "float", "ok": "bool",
                    **_keys},
        # the monitor's window may carry more CPU figures than these
        "windows": window_columns(completed="int", server_cpu_s="float", machine_busy_s="float", cpu_check="str",
                                  server_cpu_child_s="float", machine_busy_child_s="float", jobs="int", pool="int",
                                  pool_note="str", duration_s="float", warmup_s="float", rows="int",
                                  server_cpu_source="str", tool="str", **_keys, **{OTHER_COLUMNS: "any"}),
        "pgbench": {"variant": "str", "jobs": "int", "seconds": "int", "returncode": "int",
                    **dict.fromkeys(_OUTPUT, "float"), "log_transactions": "int", "window_inside_run": "bool",
                    **_keys},
        "failures": {"variant": "str", "error": "str", "returncode": "int", "output_tail": "str"},
    }

    def datasets(self, p: PgCeilingParams) -> list:
        return [datasets.Accounts(p.rows)]

    metrics = (Metric("rps", "req/s", "higher"), Metric("tps", "transactions/s", "higher"),
               Metric("tps_reported", "transactions/s", "higher"), Metric("p50_ms", "ms", "lower"),
               Metric("p99_ms", "ms", "lower"), Metric("latency_avg_ms_reported", "ms", "lower"),
               Metric("cpu_pct", "% of a core", "lower"), Metric("cpu_wait_pct", "% of a core", ""),
               Metric("cpu_us_per_req", "us", "lower"), Metric("server_cpu_pct", "% of a core", ""),
               Metric("server_cpu_us_per_req", "us", "lower"), Metric("machine_cpu_pct", "% of a core", ""),
               CPU_REJECTED_METRIC)

    def compute_metrics(self, run, rows) -> None:
        c = ceiling_table(run)
        if c.empty:
            return
        for _, r in c.iterrows():
            v = f"{r['regime']}.c{int(r['clients'])}.{r['mode']}"
            for q in ("rps", "tps_reported", "p50_ms", "p99_ms", "latency_avg_ms_reported", "cpu_pct",
                      "cpu_wait_pct", "cpu_us_per_req", "server_cpu_pct", "server_cpu_us_per_req", "machine_cpu_pct"):
                rows.put(v, q, r["repeat"], r[q])
        put_cpu_rejected(rows, c)
        for (regime, rep), g in c.groupby(["regime", "repeat"]):
            for clients, gc in g.groupby("clients"):
                rows.put(f"{regime}.c{int(clients)}", "tps", rep, gc["rps"].max())
            top = g[g["clients"] == g["clients"].max()]
            rows.put(regime, "tps", rep, top["rps"].max())

    def run(self, ctx: Context) -> None:
        p: PgCeilingParams = ctx.params
        binary = shutil.which(p.pgbench) or (p.pgbench if Path(p.pgbench).exists() else None)
        if binary is None:
            raise HarnessError(f"pgbench not found ({p.pgbench!r}); install PostgreSQL's client "
                               "tools (Debian: postgresql-client) or set pgbench=<path>")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
        dsn = ctx.servers.postgres_dsn
        pid, how = find_postmaster(dsn, ctx.servers.postgres.pids)
        ctx.note("pgbench_version", version)
        ctx.note("pool_note", POOL_NOTE)
        ctx.note("server_cpu", {"postmaster_pid": pid, "found": how, "measured": pid is not None})
        ctx.note("cpu_count", os.cpu_count())
        ctx.note("transactions", "each statement autocommits (no BEGIN/COMMIT), as asyncpg does; "
                                 "the psycopg models run theirs in a transaction (driver default)")
        failed = []
        for pt in ctx.order(grid(slow_ms=p.slow_ms, clients=p.clients, mode=p.modes)):
            if not self._run_one(ctx, p, binary, dsn, pid, pt["mode"], pt["slow_ms"], pt["clients"]):
                failed.append(variant_id("pgbench", mode=pt["mode"], slow_ms=fmt_ms(pt["slow_ms"]),
                                         clients=pt["clients"]))
        ctx.note("variants_failed", failed)
        if len(failed) == len(p.slow_ms) * len(p.clients) * len(p.modes):
            raise HarnessError("every pgbench run failed; see the failures table and artifacts")

    def _run_one(self, ctx: Context, p: PgCeilingParams, binary: str, dsn: str, pid: int | None,
                 mode: str, slow: float, clients: int) -> bool:

        variant = variant_id("pgbench", mode=mode, slow_ms=fmt_ms(slow), clients=clients)
        stem = f"{mode}_slow{fmt_ms(slow)}_c{clients}"
        art = ctx.artifacts
        script = art / f"pgbench_{stem}.sql"
        script.write_text(pgbench_script(slow))
        logdir = art / f".pgbench_{stem}"
        logdir.mkdir(exist_ok=True)
        jobs = min(p.jobs, clients)
        argv = [binary, "-n", "-f", str(script), "-c", str(clients), "-j", str(jobs),
                "-T", str(p.seconds()), "-M", mode, "-D", f"rows={p.rows}",
                "-D", f"sleep_s={slow / 1000.0:g}", "--log", f"--log-prefix={logdir}/tx"]
        env = servers.libpq_env(dsn)
        out_path = art / f"pgbench_{stem}.out"
        server = ServerCPU(pid)
        server.read()
        base_procs = server.processes
        proc = processes.start(f"pgbench:{stem}", argv, out_path, env=env)
        window: dict = {}
        exited = threading.Event()   # a pgbench that exits early must not leave the monitor waiting
        monitor = threading.Thread(target=self._monitor, daemon=True,
                                   args=(p, proc.pid, clients, server, base_procs + clients, window, exited))
        monitor.start()
        error = None
        try:
            if proc.wait(p.seconds() + CONNECT_WAIT_S + 60) is None:
                error = "pgbench timed out"
        finally:
            exited.set()
            proc.stop()
            monitor.join(timeout=5)
        text = out_path.read_text(errors="replace") if out_path.exists() else ""
        logs = sorted(Path(x) for x in glob.glob(str(logdir / "tx*")))
        if error is None and proc.poll() != 0:
            error = f"pgbench exited with code {proc.poll()}"
        if error is None and "wall_s" not in window:
            error = f"the measured window was not taken: {window.get('error', 'unknown reason')}"
        parsed = parse_output(text)
        log = read_log(logs) if logs else pd.DataFrame(columns=["task", "end_epoch_s", "latency_s", "ok"])
        shutil.rmtree(logdir, ignore_errors=True)   # the samples table holds its in-window transactions
        keys = {"mode": mode, "clients": clients, "slow_ms": slow, "regime": regime_name(slow)}
        inside = (bool(len(log)) and "close_epoch" in window
                  and log["end_epoch_s"].max() >= window["close_epoch"])
        ctx.record("pgbench", [{"variant": variant, **keys, "jobs": jobs, "seconds": p.seconds(),
                                "returncode": proc.poll(), **parsed,
                                "log_transactions": len(log), "window_inside_run": inside}])
        if error is None and not inside:
            error = "pgbench's log ends before the measured window closed"
        if error is not None:
            ctx.record("failures", [{"variant": variant, "error": error, "returncode": proc.poll(),
                                     "output_tail": "\n".join(text.splitlines()[-20:])}])
            ctx.log.warning("%s failed: %s", variant, error)
            return False
        t0, t1 = window.pop("open_epoch"), window.pop("close_epoch")
        start = log["end_epoch_s"] - log["latency_s"].fillna(0.0)
        in_window = log[(start >= t0) & (log["end_epoch_s"] <= t1)]
        samples = pd.DataFrame({"variant": variant, "task": in_window["task"].astype("int32"),
                                "start_s": (start[in_window.index] - t0).to_numpy(),
                                "latency_s": in_window["latency_s"].to_numpy(),
                                "ok": in_window["ok"].astype(bool).to_numpy(), **keys})
        ctx.record("samples", samples)
        completed = completions_in_window(log["end_epoch_s"], log["ok"], t0, t1)
        ctx.record("windows", [{"variant": variant, **window, "ops": int(in_window["ok"].sum()),
                                "completed": completed,
                                **keys, "jobs": jobs, "pool": clients, "pool_note": POOL_NOTE,
                                "duration_s": p.duration_s, "warmup_s": p.warmup_s, "rows": p.rows,
                                "server_cpu_source": server.source, "tool": "pgbench"}])
        return True

    @staticmethod
    def _monitor(p: PgCeilingParams, pgbench_pid: int, clients: int, server: ServerCPU, want_procs: int,
                 out: dict, exited: threading.Event) -> None:
        """Wait for pgbench's connections, skip the warm-up, time the window (wall clock, pgbench's
        CPU, server CPU). Gives up as soon as pgbench has exited (`exited`): no window then."""
        try:
            with EdgeCPU({"server": (server.pid if server.available else None, True)}) as edge:
                PgCeiling._window(p, pgbench_pid, clients, server, want_procs, out, exited)
            if "wall_s" in out:
                # server and machine CPU at the window's edges (`measure.EdgeCPU`): the reads
                # beside the clock below each walk the server's backends on a saturated machine
                # and so cover more than the window (29 of 60 windows read above 2.1 cores)
                read = edge.window(out.pop("w0"), out.pop("w1"))
                out.update(server_cpu_child_s=out["server_cpu_s"], machine_busy_child_s=out["machine_busy_s"],
                           server_cpu_s=sum(read["server"]) if "server" in read else math.nan,
                           machine_busy_s=read["machine"][0])
                out["cpu_check"] = cpu_consistency(out["cpu_s"], out["server_cpu_s"], out["machine_busy_s"],
                                                   out["wall_s"], os.cpu_count() or 1)
        except psutil.Error as e:
            out["error"] = error_text(e)

    @staticmethod
    def _window(p: PgCeilingParams, pgbench_pid: int, clients: int, server: ServerCPU, want_procs: int,
                out: dict, exited: threading.Event) -> None:
        """Wait for pgbench's connections, skip the warm-up, time the window (wall clock and
        pgbench's CPU read beside it; server and machine CPU as read in the monitor thread, kept as
        `*_child_s`, and the window's perf_counter() edges `w0`, `w1` for `measure.EdgeCPU`)."""
        bench = ProcessTimes(pgbench_pid)
        deadline = time.monotonic() + (CONNECT_WAIT_S if server.available else 1.0)
        while time.monotonic() < deadline:
            server.read()
            # pgbench's own sockets, or the server's processes: these count the previous
            # variant's backends until they have exited, which kept one pgbench waiting to its end
            if _sockets(pgbench_pid) >= clients or (server.available and server.processes >= want_procs):
                break
            if exited.wait(0.05):
                out["error"] = "pgbench exited before its connections were all open"
                return
        if exited.wait(p.warmup_s):
            out["error"] = "pgbench exited during the warm-up"
            return
        s0, m0 = server.read(), machine_busy_s()
        user0, system0, q0 = bench.read().snapshot()
        switches0 = bench.switches
        t0, w0 = time.time(), time.perf_counter()
        # read pgbench as the window runs: if it exits just before the window closes (the end
        # of its -T), its CPU is its last reading rather than a lost window
        while (left := w0 + p.duration_s - time.perf_counter()) > 0:
            time.sleep(min(left, BENCH_READ_EVERY_S))
            bench.read()
        t1, w1 = time.time(), time.perf_counter()
        user1, system1, q1 = bench.read().snapshot()
        switches1 = bench.switches
        s1, m1 = server.read(), machine_busy_s()
        out.update(wall_s=w1 - w0, cpu_s=(user1 + system1) - (user0 + system0),
                   cpu_user_s=user1 - user0, cpu_system_s=system1 - system0,
                   cpu_wait_s=waited_s(q0, q1), pgbench_exited_in_window=bench.exited,
                   ctx_voluntary=switches1[0] - switches0[0], ctx_involuntary=switches1[1] - switches0[1],
                   server_cpu_s=s1 - s0, machine_busy_s=m1 - m0, open_epoch=t0, close_epoch=t1, w0=w0, w1=w1)


def _sockets(pid: int) -> int:
    """How many sockets (TCP or Unix: its connections) the process has open; 0 once it is gone."""
    try:
        return len(psutil.Process(pid).net_connections(kind="all"))
    except psutil.Error:
        return 0


EXPERIMENT = PgCeiling()
