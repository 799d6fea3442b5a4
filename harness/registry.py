"""Which experiments exist: every module under `harness/experiments/` (a folder per family) that
exposes `EXPERIMENT`.

The one discovery: the study, the claims and the notebooks all ask here, for experiments and for
what each declares: its analysis module (`Experiment.analysis`, a dotted module path), its in-run
ceiling (`ceiling_of`) and the packages that shape its figures (`drivers`).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import pkgutil
import re
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from . import experiments as _pkg
from .core.errors import HarnessError
from .experiments.base import Experiment


@lru_cache(maxsize=1)
def all_experiments() -> dict[str, Experiment]:
    found: dict[str, Experiment] = {}
    for mod in pkgutil.walk_packages(_pkg.__path__, f"{_pkg.__name__}."):
        if mod.ispkg or any(part.startswith("_") for part in mod.name.split(".")) or mod.name in SHARED_KIT:
            continue
        # only modules that declare an experiment are imported: not a workload, an analysis, or an
        # app (the locustfile patches the interpreter with gevent on import)
        source = _source_file(mod.name)
        if source is None or not _DECLARES.search(source.read_text()):
            continue
        module = importlib.import_module(mod.name)
        exp = getattr(module, "EXPERIMENT", None)
        if not isinstance(exp, Experiment):
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


def load(name: str, module: str) -> Experiment:
    """Experiment `name` from `module`, the module that declares it (its class's), imported alone:
    a repeat's worker then loads one family's drivers, not every family's. A module outside the
    experiments' package, or whose EXPERIMENT is not `name`, sends the lookup to the whole registry."""
    exp = None
    if module.startswith(f"{_pkg.__name__}."):
        try:
            exp = getattr(importlib.import_module(module), "EXPERIMENT", None)
        except ModuleNotFoundError:   # no such module (a failing import of a real one fails in get too)
            pass
    return exp if isinstance(exp, Experiment) and exp.name == name else get(name)


def analysis_modules() -> dict[str, ModuleType]:
    """Dotted path -> module, for every analysis module an experiment names (each once, sorted)."""
    paths = sorted({e.analysis for e in all_experiments().values() if getattr(e, "analysis", None)})
    return {path: importlib.import_module(path) for path in paths}


def analysis_of(name: str) -> ModuleType | None:
    """The analysis module of experiment `name`, or None if it declares none."""
    path = getattr(get(name), "analysis", None)
    return importlib.import_module(path) if path else None


def ceiling_of(name: str) -> str | None:
    """The in-run ceiling that normalises experiment `name`'s throughputs (its declared `ceiling`);
    None for an experiment that declares none or is not registered (a run's retired experiment)."""
    exp = all_experiments().get(name)
    return exp.ceiling if exp is not None else None


def drivers() -> dict[str, tuple[str, ...]]:
    """Package -> the registered experiments whose figures its version shapes (each experiment's
    declared `drivers`); packages in the order the experiments, by name, first declare them."""
    out: dict[str, list[str]] = {}
    for name, exp in all_experiments().items():
        for package in exp.drivers:
            out.setdefault(package, []).append(name)
    return {package: tuple(users) for package, users in out.items()}


# -- experiment versions (issue 22 point 12) --------------------------------------------------------
# As asv versions each benchmark by its code: an experiment's version is a short hash of the source
# of what defines its figures -- its own module, its analysis module, the workload modules it uses
# (followed through their imports) -- and of its resolved parameters. Two runs whose version of an
# experiment differs did not measure the same thing; `harness compare` says so.

# Modules that define a workload, whose source counts towards the version of an experiment that
# imports them (directly or through another of them): every module of a family's folder (its
# workload, its apps, its shared parameters, another family's analysis it reads), the datasets and
# the open-loop generator; not the kit every family shares (`experiments.base`, `experiments.analysis`).
WORKLOAD_MODULES = ("harness.core.openloop", "harness.core.datasets")
SHARED_KIT = ("harness.experiments.base", "harness.experiments.analysis")
VERSION_CHARS = 12
_DECLARES = re.compile(r"^EXPERIMENT\s*=", re.MULTILINE)
_MODULE_TEXT = re.compile(r"^harness(\.[a-z_][a-z0-9_]*)+(:[A-Za-z_]\w*)?$")


def _source_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _imports(module: str, path: Path) -> set[str]:
    """The absolute names of the modules `path` (module `module`) imports, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)   # `from .. import datasets`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_TEXT.match(node.value):
            out.add(node.value.split(":", 1)[0])   # a module run as a child: "harness.experiments.departures.child"
    if path.name == "__init__.py":   # a package counts whole: the FastAPI family's apps, app and locustfile
        out.update(f"{module}.{m.name}" for m in pkgutil.iter_modules([str(path.parent)]))
    out.update(m.rsplit(".", k)[0] for m in list(out) for k in range(1, m.count(".")))   # and their packages
    return out


def _is_workload(module: str) -> bool:
    if any(module == w or module.startswith(w + ".") for w in WORKLOAD_MODULES):
        return True
    prefix = f"{_pkg.__name__}."
    if module in SHARED_KIT or not module.startswith(prefix):
        return False
    # inside a family's folder; not the family's package itself, whose __init__ would count every
    # experiment of the family (a package counts whole, as `apps` should)
    return "." in module[len(prefix):]


def version_sources(name: str) -> dict[str, Path]:
    """Module name -> source file of everything an experiment's version hashes (sorted by name)."""
    exp = get(name)
    own = type(exp).__module__
    todo = [own] + ([exp.analysis] if getattr(exp, "analysis", None) else [])
    found: dict[str, Path] = {}
    while todo:
        module = todo.pop()
        if module in found:
            continue
        path = _source_file(module)
        if path is None:
            continue
        found[module] = path
        if module == own or _is_workload(module):   # follow the workload's imports, not the analysis'
            todo += [m for m in _imports(module, path) if _is_workload(m) and m not in found and _safe_spec(m)]
    return dict(sorted(found.items()))


def _safe_spec(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # `from .x import Name`: `x.Name` is not a module
        return False


def version(name: str, params: Any) -> str:
    """A short hash of experiment `name`'s code (version_sources) and its resolved parameters (a
    Params or its `to_dict()`): equal versions measured the same thing with the same settings."""
    h = hashlib.sha256()
    for module, path in version_sources(name).items():
        h.update(module.encode() + b"\0" + path.read_bytes() + b"\0")
    values = params.to_dict() if hasattr(params, "to_dict") else dict(params)
    h.update(json.dumps(values, sort_keys=True, default=str).encode())
    return h.hexdigest()[:VERSION_CHARS]
