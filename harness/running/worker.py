"""Runs one repeat of one experiment in a fresh process: `python -m harness.running.worker SPEC RESULT`.

A fresh interpreter per repeat means one experiment's threads, event loop, pools or GC state cannot
disturb another's figures, and a crash or hang is contained (the parent enforces the time-out
through `processes.run_child`). The parent hands down validated parameters (`RepeatSpec`): the
worker applies no profile and no override of its own. The outcome, with one status per cell
(variant), is written to `<out_dir>/result.json` whatever happens.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import interpreters
from ..core.measure import error_text
from ..core.processes import child_main
from ..core.servers import ServerStack
from ..core.store import experiment_status
from ..experiments import registry
from ..experiments.base import Context, Experiment, Params, ServersDown


@dataclass
class RepeatSpec:
    """What the parent hands a worker (JSON through a private file: it holds server URIs)."""

    experiment: str
    module: str                   # the module that declares it: the worker imports that one alone
    params: dict[str, Any]        # Params.to_dict() of the validated parameters
    servers: dict[str, Any]       # ServerStack.to_json()
    out_dir: str
    repeat: int
    # the variants of earlier repeats: names the cells a server's death leaves unrun (`ServersDown`)
    known_variants: list[str] = field(default_factory=list)


def params_from_dict(exp: Experiment, values: dict[str, Any]) -> Params:
    """The experiment's Params from `Params.to_dict()` (JSON lists back to tuples), validated."""
    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    p = exp.params_type(**given)
    p.validate()
    return p


def run_spec(spec: RepeatSpec) -> dict[str, Any]:
    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    exp = registry.load(spec.experiment, spec.module)
    result: dict[str, Any] = {"experiment": exp.name, "repeat": spec.repeat, "status": "running",
                              "started_at": time.time(), "interpreter": interpreters.runtime_record()}
    ctx = Context(exp, params_from_dict(exp, spec.params), ServerStack.from_json(spec.servers), out_dir,
                  spec.repeat)
    crash = down = None
    try:
        exp.run(ctx)
        result["status"] = "ok"
    except ServersDown as e:  # the cells already run keep their own status; the rest fail with this
        down = str(e)
        result.update(status="failed", error=down)
    except BaseException as e:  # recorded, not raised: the study goes on with the next experiment
        crash = error_text(e, 2000)
        result.update(status="failed", error=crash, traceback=traceback.format_exc())
    try:
        result["tables"] = ctx.write_tables()
    except Exception as e:
        crash = crash or f"writing tables failed: {error_text(e)}"
        result.update(status="failed", error=crash)
    result["cells"] = cells(ctx, crash)
    if down is not None:
        ran = {c["variant"] for c in result["cells"]}
        result["cells"] += failed_cells([v for v in spec.known_variants if v not in ran], down)
    result["cell_status"] = experiment_status(result["cells"])
    result["measured_s"] = measured_s(ctx)
    result["finished_at"] = time.time()
    result["notes"] = ctx.notes
    return result


def _frames(ctx: Context, table: str) -> pd.DataFrame:
    parts = [df for df in ctx.recorded(table) if "variant" in df.columns and len(df)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"variant": []})


def cells(ctx: Context, crash: str | None = None) -> list[dict[str, Any]]:
    """One status per variant of this repeat (contract C2).

    Variants: every `variant` in any recorded table, plus those `ctx.skip()` named. A cell is
    `skipped` when skipped; `failed` when a `failures` table names it, the repeat crashed, any
    sample is `infrastructure`, or failed samples exceed the experiment's `failure_tolerance`
    (0: any failed sample); otherwise `ok`. A repeat that recorded nothing has one cell, `*`."""
    variants: dict[str, None] = {}
    for table in ctx.recorded_tables():
        for v in _frames(ctx, table)["variant"].dropna().astype(str):
            variants.setdefault(v)
    for v in ctx.skipped:
        variants.setdefault(v)
    samples = _frames(ctx, "samples")
    failures = _frames(ctx, "failures")
    tolerance = ctx.experiment.failure_tolerance
    out = []
    for v in variants or ({"*": None} if crash else {}):
        mine = samples[samples["variant"] == v]
        ok_col = mine["ok"].astype(bool) if "ok" in mine.columns else pd.Series(True, index=mine.index)
        ops, failed_ops = len(mine), int((~ok_col).sum())
        cell = {"variant": v, "status": "ok", "reason": None, "ops": ops, "failed_ops": failed_ops}
        listed = failures[failures["variant"] == v]
        infra = "infrastructure" in mine.columns and bool(mine["infrastructure"].fillna(False).astype(bool).any())
        if v in ctx.skipped:
            cell.update(status="skipped", reason=ctx.skipped[v])
        elif len(listed):  # the variant's own error says more than the repeat's
            cell.update(status="failed", reason=str(listed["error"].iloc[0]) if "error" in listed else "failed")
        elif crash:
            cell.update(status="failed", reason=f"repeat failed: {crash}")
        elif failed_ops and (infra or tolerance == 0 or failed_ops > tolerance * ops):
            first = mine.loc[~ok_col, "error"].dropna() if "error" in mine.columns else pd.Series([], dtype=str)
            why = f", first: {str(first.iloc[0])[:300]}" if len(first) else ""
            kind = "infrastructure failure; " if infra else ""
            cell.update(status="failed", reason=f"{kind}{failed_ops} of {ops} operations failed{why}")
        out.append(cell)
    return out


def failed_cells(variants: list[str], reason: str) -> list[dict[str, Any]]:
    """Cells of a repeat that crashed or timed out before reporting its own."""
    return [{"variant": v, "status": "failed", "reason": reason, "ops": 0, "failed_ops": 0}
            for v in (variants or ["*"])]


def measured_s(ctx: Context) -> float:
    """Seconds inside measured windows: the experiment's own `measured_s` note, else the sum of
    the `windows` table's `wall_s`."""
    if "measured_s" in ctx.notes:
        return float(ctx.notes["measured_s"])
    windows = _frames(ctx, "windows")
    return float(windows["wall_s"].sum()) if "wall_s" in windows.columns else 0.0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return child_main(run_spec, RepeatSpec)


if __name__ == "__main__":
    raise SystemExit(main())
