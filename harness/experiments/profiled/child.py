"""One window of the profiled pass in a child process (`python -m harness.experiments.profiled.child SPEC OUT`).

perf names Python frames only from CPython 3.13 on (`core.profiles`), and the study's clients run on
the study's interpreter (3.11 by default): the pass's perf parts run each window, plain and profiled,
in a child on the perf interpreter's venv, the profiled one started with perf's trampolines on
(`profiles.perf_env`). A PostgreSQL window runs the PostgreSQL workload's `run_variant`, its CPU read
by the parent at the window's edges as pg_models' are; a MongoDB window runs the MongoDB workload's
variants (`mongo_window`, which the pass also runs in its own process for its py-spy parts).

It imports only the workload code, not pandas and the experiment floor, as the departures' child.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from ...core import interpreters
from ...core.measure import completions_in_window
from ...core.processes import child_main
from ..mongo.workload import async_variant, threads_variant
from ..postgres.workload import VariantSpec, run_variant


class Capture:
    """What the MongoDB workload's variants need of a Context: the servers, and a `record` that
    keeps their windows here instead of in an experiment's tables (their samples are not kept)."""

    def __init__(self, servers: Any):
        self.servers = servers
        self.windows: list[dict[str, Any]] = []

    def record(self, table: str, rows: list[dict[str, Any]]) -> None:
        if table == "windows":
            self.windows.extend(rows)


def mongo_window(servers: Any, model: str, *, threads: int, tasks: int, pool: int, duration_s: float,
                 warmup_s: float, seed: int, profile: Path | None) -> dict[str, Any]:
    """One window of 001-models' comparison: `threads` threads on a synchronous MongoClient (a pool
    as large) or `tasks` asyncio tasks on AsyncMongoClient with a pool of `pool`; its `windows` row,
    with the operations completed inside it and the errors."""
    capture = Capture(servers)
    common: dict[str, Any] = dict(duration_s=duration_s, warmup_s=warmup_s, seed=seed, profile=profile)
    if model == "threads":
        samples = threads_variant(capture, model, threads=threads, pool_size=threads, **common)
    else:
        samples = async_variant(capture, model, loop="asyncio", driver="pymongo", pool_size=pool, tasks=tasks,
                                semaphore=False, **common)
    window = dict(capture.windows[0])
    window["completed"] = completions_in_window([r["start_s"] + r["latency_s"] for r in samples],
                                                [r["ok"] for r in samples], 0.0, window["wall_s"])
    window["errors"] = sum(not r["ok"] for r in samples)
    return window


def run_window(spec: dict) -> dict[str, Any]:
    """The window `spec` asks for: {"pg": VariantSpec fields} or {"mongo": mongo_window's arguments,
    "mongodb_uri": ...}; its row and this interpreter's record."""
    if "pg" in spec:
        window = run_variant(VariantSpec(**spec["pg"]))["window"]
    else:
        args = dict(spec["mongo"])
        profile = args.pop("profile", "")
        window = mongo_window(types.SimpleNamespace(mongodb_uri=spec["mongodb_uri"]), **args,
                              profile=Path(profile) if profile else None)
    return {"window": window, "runtime": interpreters.runtime_record()}


if __name__ == "__main__":
    # processes.child_main: reads the spec, writes the result or the error (atomically) for the parent
    sys.exit(child_main(run_window, dict))
