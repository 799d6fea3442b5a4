"""The child process of one departures cell (`python -m harness.experiments.departures.child SPEC OUT`).

It runs in the cell's interpreter (3.11, 3.12, 3.13, free-threaded builds), pins itself to the
cell's client cores first thing, runs the family's models back to back with the MongoDB
workload's `threads_variant`/`async_variant` or the PostgreSQL workload's `run_variant`, and writes windows, samples,
its affinity, its runtime and the drivers' versions (read back) to OUT (JSON). A PostgreSQL cell
also runs the GIL probe (`harness.core.probe.GilProbe`): alone first (its floor), then beside each
model's clients, keeping the wake-ups inside the window. MongoDB cells do not: their windows do not
carry their bounds out of the workload.
`harness.experiments.departures.experiment` builds the cells, starts this child and records what it returns.

It lives apart from the experiment so that a child imports only the workload code (~0.5 s),
not pandas and the experiment floor (~1.1 s): a full run starts about 70 of them.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from ...core import interpreters, placement
from ...core.measure import completions_in_window
from ...core.probe import GilProbe, gil_floor, gil_rows
from ...core.processes import child_main
from ..mongo.workload import async_variant, threads_variant
from ..postgres.workload import VariantSpec, run_variant


class _ChildContext:
    """What the MongoDB workload's variants need from a Context: the URI and `record()`."""

    def __init__(self, uri: str):
        self.servers = types.SimpleNamespace(mongodb_uri=uri)
        self.windows: list[dict] = []
        self.samples: list[dict] = []

    def record(self, table: str, rows: list[dict]) -> None:
        if table == "samples":
            self.samples.extend(rows)
        elif table == "windows":
            self.windows.extend(rows)


_SAMPLE_COLUMNS = ("task", "start_s", "latency_s", "ok", "error")


def _columns(rows: list[dict]) -> dict[str, list]:
    return {c: [r.get(c) for r in rows] for c in _SAMPLE_COLUMNS}


def _child_mongo(spec: dict) -> tuple[dict, dict]:
    p = spec["params"]
    windows, samples = {}, {}
    for model in spec["models"]:
        ctx = _ChildContext(spec["mongodb_uri"])
        variant = spec["variants"][model]
        if model == "threads":
            rows = threads_variant(ctx, variant, threads=p["mongo_threads"], pool_size=p["mongo_threads"],
                                   duration_s=p["duration_s"], warmup_s=p["warmup_s"], seed=p["seed"])
        else:
            rows = async_variant(ctx, variant, loop="asyncio", driver="pymongo", pool_size=p["mongo_pool"],
                                 tasks=p["mongo_tasks"], semaphore=False, duration_s=p["duration_s"],
                                 warmup_s=p["warmup_s"], seed=p["seed"])
        w = ctx.windows[0]
        w["errors"] = sum(not r["ok"] for r in rows)
        # the same count as pg's `completed`; the mongo window closes after its operations drain,
        # so it equals `ops`, but it is taken by the one definition rather than assumed
        w["completed"] = completions_in_window([r["start_s"] + r["latency_s"] for r in rows],
                                               [r["ok"] for r in rows], 0.0, w["wall_s"])
        windows[model], samples[model] = w, _columns(rows)
    return windows, samples


def _child_pg(spec: dict) -> tuple[dict, dict, dict]:
    """The PostgreSQL models back to back, each with the GIL probe running beside its clients; its
    wake-ups inside the window (the window's `edges`) are returned per model, offsets from the
    window's opening (`probe.gil_rows`)."""
    p = spec["params"]
    windows, samples, gil = {}, {}, {}
    for model in spec["models"]:
        with GilProbe(seed=p["seed"]) as probe:
            out = run_variant(VariantSpec(
                variant=spec["variants"][model], model=model, dsn=spec["dsn"], pool=p["pg_pool"],
                clients=p["pg_clients"], slow_ms=0.0, warmup_s=p["warmup_s"], duration_s=p["duration_s"],
                rows=p["rows"], seed=p["seed"], calibration_requests=0, postmaster_pid=spec["postmaster_pid"]))
        w = out["window"]
        w.update(workers=p["pg_clients"], pool_size=p["pg_pool"])
        windows[model] = w
        samples[model] = {c: out["samples"][c] for c in _SAMPLE_COLUMNS}
        open_at, close_at = w["edges"]
        gil[model] = gil_rows(probe.between(open_at, close_at), open_at)
    return windows, samples, gil


def run_cell(spec: dict) -> dict[str, Any]:
    """One cell: pin this process, then run the family's models back to back."""
    result: dict[str, Any] = {
        # before any thread starts, so every thread of the client inherits it
        "client_affinity": placement.set_client(spec["client_cpus"]),
        "client_affinity_proc": placement.proc_status_affinity(os.getpid()),
        "runtime": interpreters.runtime_record(),
        # the drivers this interpreter's venv holds, read back (importlib.metadata): the driver factor's
        # levels are checked against them and every window records them
        "drivers": interpreters.driver_versions(),
    }
    if spec["family"] == "mongo":
        result["windows"], result["samples"] = _child_mongo(spec)
    else:
        # the GIL probe's floor first, with no client thread yet: its timer's latency in this process
        floor = gil_floor(seed=spec["params"]["seed"])
        result["gil_floor"] = gil_rows(floor, floor[0][0] if floor else 0.0)
        result["windows"], result["samples"], result["gil"] = _child_pg(spec)
    return result


if __name__ == "__main__":
    # processes.child_main: reads the spec, writes the result or the error (atomically) for the parent
    sys.exit(child_main(run_cell, dict))
