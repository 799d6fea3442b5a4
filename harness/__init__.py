"""A reproducible performance study of async database access in Python.

The public API for notebooks and library users (everything else is internal and may change):

    import harness
    run = harness.open_run()                     # latest complete run (or a path / run id)
    run.cells("mongo_pool")                      # one status per variant and repeat
    run.table("mongo_pool", "samples")           # raw rows of ok cells, with a `repeat` column
    harness.list_runs()                          # stored runs, with statuses
    harness.list_experiments()                   # name -> Experiment
    path = harness.run(["mongo_pool"], profile="smoke")   # provision, measure, store

Names are imported on first use, so `import harness` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.errors import HarnessError
    from .core.store import Run, list_runs, open_run

__all__ = ["HarnessError", "Run", "list_experiments", "list_runs", "open_run", "run"]

_LAZY = {"Run": "core.store", "open_run": "core.store", "list_runs": "core.store", "HarnessError": "core.errors"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def list_experiments() -> dict[str, Any]:
    """Every registered experiment, by name."""
    from .experiments import registry

    return registry.all_experiments()


def run(names: list[str], profile: str = "quick", *, repeat: int | None = None,
        overrides: dict[str, Any] | None = None, data_dir: Any = None) -> Any:
    """Run experiments as `python -m harness run` does; returns the new run's directory."""
    from .running import study

    return study.run(list(names), profile, repeat, overrides, data_dir)
