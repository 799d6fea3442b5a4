"""Which experiments exist: every module in `harness/experiments/` that exposes `EXPERIMENT`."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from . import experiments as _pkg
from .errors import HarnessError
from .experiments.base import Experiment


@lru_cache(maxsize=1)
def all_experiments() -> dict[str, Experiment]:
    found: dict[str, Experiment] = {}
    for mod in pkgutil.iter_modules(_pkg.__path__):
        if mod.name.startswith("_") or mod.name == "base":
            continue
        module = importlib.import_module(f"{_pkg.__name__}.{mod.name}")
        exp = getattr(module, "EXPERIMENT", None)
        if exp is None:
            continue
        if exp.name in found:
            raise RuntimeError(f"two experiments are named {exp.name!r}")
        found[exp.name] = exp
    return dict(sorted(found.items()))


def get(name: str) -> Experiment:
    exps = all_experiments()
    if name not in exps:
        known = ", ".join(exps) or "none registered yet"
        raise HarnessError(f"unknown experiment {name!r}; known experiments: {known}")
    return exps[name]
