"""Runs one repeat of one experiment in a fresh process: `python -m harness.worker SPEC.json`.

A fresh interpreter per repeat means one experiment's threads, event loop, pools or GC state cannot
disturb another's figures, and a crash or hang is contained (the parent enforces the timeout).
The outcome is written to `<out_dir>/result.json` whatever happens.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from pathlib import Path

from . import registry
from .experiments.base import Context
from .servers import ServerStack
from .store import write_json_atomic


def run_spec(spec: dict) -> dict:
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    exp = registry.get(spec["experiment"])
    params = exp.params(spec["profile"], spec["params"])
    ctx = Context(exp, params, ServerStack.from_json(spec["servers"]), out_dir, spec["repeat"],
                  spec["profile"])
    result: dict = {"experiment": exp.name, "repeat": spec["repeat"], "status": "running",
                    "started_at": time.time()}
    try:
        exp.run(ctx)
        result["status"] = "ok"
    except BaseException as e:  # recorded, not raised: the study goes on with the next experiment
        result["status"] = "failed"
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    finally:
        try:
            result["tables"] = ctx.write_tables()
        except Exception as e:
            result["status"] = "failed"
            result.setdefault("error", f"writing tables failed: {type(e).__name__}: {e}")
        result.update(_operation_errors(ctx))
        result["finished_at"] = time.time()
        result["notes"] = ctx.notes
        write_json_atomic(out_dir / "result.json", result)
    return result


def _operation_errors(ctx: Context) -> dict:
    """How many recorded operations failed (`samples.ok` False), with the first error: a repeat can
    finish "ok" while its server died halfway, and the manifest must say so."""
    parts = [df for df in ctx.recorded("samples") if "ok" in df.columns]
    if not parts:
        return {}
    failed = [df.loc[~df["ok"].astype(bool)] for df in parts]
    n_failed = sum(len(f) for f in failed)
    out = {"operations": sum(len(df) for df in parts), "operation_errors": n_failed}
    first = next((f for f in failed if len(f) and "error" in f.columns), None)
    if first is not None:
        out["first_operation_error"] = str(first["error"].iloc[0])[:300]
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    spec = json.loads(Path(sys.argv[1]).read_text())
    return 0 if run_spec(spec)["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
