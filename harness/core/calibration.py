"""In-run ceilings: short, fixed measurements of the machine, taken before and after the experiments.

Absolute throughput differs 2-3x between machines of this project's kind; a figure divided by a
ceiling measured in the same run moves far less. Two ceilings, each three short repeats
(median and spread reported, so the ceiling's own noise is visible):

- `pgbench`: pgbench's C client running one fixed select-only transaction (a primary-key lookup in
  a 1,000-row table this module creates) with 4 clients, prepared statements, 1 s per repeat. The
  ceiling for the PostgreSQL families: it exercises the same server, loopback and kernel as they do,
  with a client that costs almost nothing.
- `python_cpu`: a fixed pure-Python loop (integer arithmetic and dict stores, the kind of bytecode a
  driver's hot path runs), ~1 s per repeat, in loops per second. The ceiling for the MongoDB and
  FastAPI families: on one shared machine their throughput is bounded by the client's (and the
  app's) single-threaded Python speed, not by a C client.

Each repeat records the machine's steal time over its window (psutil.cpu_times().steal, i.e.
/proc/stat), so a noisy neighbour shows up beside the figure; the CPU model comes from /proc/cpuinfo.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from . import host, servers, stats
from .errors import HarnessError

REPEATS = 3
PGBENCH_SECONDS = 1
PGBENCH_CLIENTS = 4
CPU_SECONDS = 1.0
TABLE = "harness_calibration"
TABLE_ROWS = 1000
PGBENCH_SCRIPT = f"\\set id random(1, {TABLE_ROWS})\nSELECT v FROM {TABLE} WHERE id = :id;\n"
_TPS = re.compile(r"tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)")


def _steal_s() -> float:
    return float(getattr(psutil.cpu_times(), "steal", 0.0) or 0.0)


def _timed(fn: Callable[[], float]) -> dict[str, float]:
    """fn() -> a rate, with the wall time and the machine's steal time over its window."""
    steal0, t0 = _steal_s(), time.perf_counter()
    rate = fn()
    wall = time.perf_counter() - t0
    steal = _steal_s() - steal0
    ncpu = psutil.cpu_count() or 1
    return {"rate": rate, "wall_s": wall, "steal_s": steal, "steal_pct": 100.0 * steal / (wall * ncpu)}


def _loop(n: int) -> int:
    # fixed bytecode mix: keep it unchanged, or ceilings from older runs stop being comparable
    d: dict[int, int] = {}
    total = 0
    for i in range(n):
        total += (i * 7) % 13
        d[i & 1023] = total
    return total


def python_cpu_rate(seconds: float = CPU_SECONDS, chunk: int = 50_000) -> float:
    """Loops of `_loop` per second over about `seconds` of wall time."""
    done, t0 = 0, time.perf_counter()
    while True:
        _loop(chunk)
        done += chunk
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return done / elapsed


def _ensure_table(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id int PRIMARY KEY, v int NOT NULL)")
        n = (conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() or (0,))[0]
        if n != TABLE_ROWS:
            conn.execute(f"TRUNCATE {TABLE}")
            conn.execute(f"INSERT INTO {TABLE} SELECT i, i * 7 FROM generate_series(1, {TABLE_ROWS}) i")
            conn.execute(f"ANALYZE {TABLE}")


def pgbench_tps(dsn: str, binary: str, seconds: int = PGBENCH_SECONDS) -> float:
    with tempfile.TemporaryDirectory(prefix="harness-calib-") as d:
        script = Path(d) / "select.sql"
        script.write_text(PGBENCH_SCRIPT)
        argv = [binary, "-n", "-f", str(script), "-c", str(PGBENCH_CLIENTS), "-j", "2",
                "-T", str(seconds), "-M", "prepared"]
        out = subprocess.run(argv, env=servers.libpq_env(dsn), capture_output=True, text=True, timeout=seconds + 60)
    m = _TPS.search(out.stdout)
    if out.returncode != 0 or not m:
        raise HarnessError(f"calibration pgbench failed (exit {out.returncode}): "
                           f"{(out.stderr or out.stdout).strip().splitlines()[-1:] or ['no output']}")
    return float(m.group(1))


def _series(runs: list[dict[str, float]], unit: str, **extra: Any) -> dict[str, Any]:
    rates = [r["rate"] for r in runs]
    s = stats.summarise(rates)
    def num(v):  # None rather than NaN: the manifest is strict JSON
        return None if v is None or v != v else v

    return {"unit": unit, "values": rates, "median": num(s["median"]), "ci_low": num(s["ci_low"]),
            "ci_high": num(s["ci_high"]), "cv": num(s["cv"]), "n": s["n"],
            "steal_pct": [r["steal_pct"] for r in runs], "wall_s": [r["wall_s"] for r in runs], **extra}


def measure(stack=None, repeats: int = REPEATS, cpu_seconds: float = CPU_SECONDS,
            pgbench_warmup: bool = True, pgbench: bool = True) -> dict[str, Any]:
    """Both ceilings (pgbench only when asked, the stack has a PostgreSQL server and pgbench is
    installed; otherwise its entry says why). Never raises for a missing ceiling: the run goes on
    without it. pgbench=False where the server may be a user's: pgbench's table is a write.
    The smoke profile asks for less (one short repeat, no pgbench warm-up): its ceilings only show
    that the path works, and tests start many smoke runs."""
    out: dict[str, Any] = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "cpu_model": host.cpu_model(), "cpus": psutil.cpu_count(),
                           "repeats": repeats}
    runs = [_timed(lambda: python_cpu_rate(cpu_seconds)) for _ in range(repeats)]
    out["python_cpu"] = _series(runs, "loops/s",
                                workload=f"harness.core.calibration._loop, ~{cpu_seconds:g} s per repeat")
    dsn = getattr(getattr(stack, "postgres", None), "uri", None) if stack is not None else None
    binary = shutil.which("pgbench")
    if not pgbench:
        out["pgbench"] = {"error": "not measured: the server may be a user's (harness verify), and "
                                   "pgbench's table would be a write to it"}
    elif not dsn:
        out["pgbench"] = {"error": "no PostgreSQL server in this stack"}
    elif not binary:
        out["pgbench"] = {"error": "pgbench not found on PATH"}
    else:
        try:
            _ensure_table(dsn)
            if pgbench_warmup:
                pgbench_tps(dsn, binary, 1)   # warm-up: connections, plan cache, buffers
            runs = [_timed(lambda: pgbench_tps(dsn, binary)) for _ in range(repeats)]
            out["pgbench"] = _series(runs, "transactions/s",
                                     transaction=f"SELECT v FROM {TABLE} WHERE id = random 1..{TABLE_ROWS}",
                                     clients=PGBENCH_CLIENTS, seconds=PGBENCH_SECONDS, mode="prepared")
        except (HarnessError, OSError, subprocess.SubprocessError) as e:
            out["pgbench"] = {"error": str(e)}
        except Exception as e:  # a database error: record it, the run goes on
            out["pgbench"] = {"error": f"{type(e).__name__}: {e}"}
    return out


# The ceilings, and why each normalises the experiments that declare it (`Experiment.ceiling`; the
# caller passes the declared name in: this floor does not know the experiments). Stated in the report.
CEILINGS = ("pgbench", "python_cpu")
CEILING_WHY = {
    "pgbench": "PostgreSQL families: a fraction of pgbench's C client on a fixed select, against the same "
               "server and loopback",
    "python_cpu": "MongoDB and FastAPI families: per million loops/s of a fixed pure-Python workload, because "
                  "on one shared machine their throughput is bounded by the Python client's (and app's) CPU, "
                  "and FerretDB's own cost is not comparable with a C client's",
}


def ceiling_for(which: str | None, calibration: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """(ceiling value, which) for ceiling `which` (an experiment's declared `ceiling`, from
    `registry.ceiling_of`): the median over before and after repeats; the Python ceiling in
    millions of loops per second. (None, "") when `which` is None."""
    if which is None or not calibration:
        return None, which or ""
    values = []
    for when in ("before", "after"):
        part = (calibration.get(when) or {}).get(which) or {}
        values += [v for v in part.get("values", []) if v and v > 0]
    if not values:
        return None, which
    v = stats.summarise(values)["median"]
    return (v / 1e6 if which == "python_cpu" else v), which
