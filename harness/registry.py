"""Which experiments exist: every module in `harness/experiments/` that exposes `EXPERIMENT`.

The one discovery: the study, the claims and the notebooks all ask here, for experiments and for
the analysis module each declares (`Experiment.analysis`, a dotted module path).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType

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


def analysis_modules() -> dict[str, ModuleType]:
    """Dotted path -> module, for every analysis module an experiment names (each once, sorted)."""
    paths = sorted({e.analysis for e in all_experiments().values() if getattr(e, "analysis", None)})
    return {path: importlib.import_module(path) for path in paths}


def analysis_of(name: str) -> ModuleType | None:
    """The analysis module of experiment `name`, or None if it declares none."""
    path = getattr(get(name), "analysis", None)
    return importlib.import_module(path) if path else None
