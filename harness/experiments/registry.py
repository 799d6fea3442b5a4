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

from .. import experiments as _pkg
from ..core.errors import HarnessError
from .base import Experiment


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


# -- experiment versions ----------------------------------------------------------------------------
# As asv versions each benchmark by its own source: an experiment's version is a short hash of its own
# code, read as syntax trees (docstrings and comments left out), and of its resolved parameters. Its
# own module counts whole; from there the walk follows, definition by definition, every name the code
# uses that a workload module defines (a function, a class, a constant; the family's analysis
# included, since the metrics the experiment declares are computed there), and every module it runs as
# a program (a dotted module named in a string, or a package of its folder named so) whole. A
# sibling's code, the shared kit and the core's statistics are outside: editing them leaves the
# version as it was. An experiment may set `version = "..."` by hand; it then stands for the code.

# Modules whose definitions a version follows: every module of a family's folder (its workload, its
# apps, its analysis, another family's module it uses), the datasets and the open-loop generator; not
# the kit every family shares (`experiments.base`, `experiments.analysis`).
WORKLOAD_MODULES = ("harness.core.openloop", "harness.core.datasets")
SHARED_KIT = ("harness.experiments.base", "harness.experiments.analysis")
VERSION_CHARS = 12
_DECLARES = re.compile(r"^EXPERIMENT\s*=", re.MULTILINE)
_MODULE_TEXT = re.compile(r"^harness(\.[a-z_][a-z0-9_]*)+(:[A-Za-z_]\w*)?$")
WHOLE = "*"   # in version_parts: the module counts whole


_ROOT = Path(_pkg.__file__).parents[2]   # the folder that holds the `harness` package


def _source_file(module: str) -> Path | None:
    """The source of a module of this package, found on disk without importing anything (finding a
    spec imports the parents: an app's locustfile patches the interpreter on import)."""
    if not module.startswith("harness.") and module != "harness":
        return None
    base = _ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_workload(module: str) -> bool:
    if any(module == w or module.startswith(w + ".") for w in WORKLOAD_MODULES):
        return True
    prefix = f"{_pkg.__name__}."
    if module in SHARED_KIT or not module.startswith(prefix):
        return False
    return "." in module[len(prefix):]   # inside a family's folder, not the family's package itself


class _Module:
    """One module's syntax tree, docstrings dropped: its top-level definitions by name and where
    each name it imports comes from."""

    def __init__(self, module: str, path: Path, text: str) -> None:
        self.name, self.path = module, path
        self.tree = _without_docstrings(ast.parse(text, str(path)))
        self.package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        self.defs: dict[str, list[ast.stmt]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}   # local name -> (module, attribute or None)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            self.defs.setdefault(n.id, []).append(node)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.imports[a.asname] = (a.name, None)
                    else:
                        self.imports[a.name.split(".")[0]] = (a.name.split(".")[0], None)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = self.package.split(".")
                    parent = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                for a in node.names:
                    self.imports[a.asname or a.name] = (base, a.name)


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


class _Walk:
    """What an experiment's version hashes: {module: {name or WHOLE: normalised syntax tree}}.
    `sources` (module -> text) stands in for files on disk: the tests edit code this way."""

    def __init__(self, sources: dict[str, str] | None = None, skip: tuple[str, ...] = ()) -> None:
        self.sources = sources or {}
        self.skip = set(skip)   # module paths named only as declarations (the analysis module's path)
        self.modules: dict[str, _Module | None] = {}
        self.parts: dict[str, dict[str, str]] = {}

    def module(self, name: str) -> _Module | None:
        if name not in self.modules:
            path = _source_file(name)
            if path is None:
                self.modules[name] = None
            else:
                text = self.sources.get(name)
                self.modules[name] = _Module(name, path, text if text is not None else path.read_text())
        return self.modules[name]

    def whole(self, name: str) -> None:
        mod = self.module(name)
        if mod is None or WHOLE in self.parts.get(name, {}):
            return
        self.parts[name] = {WHOLE: ast.dump(mod.tree, include_attributes=False)}   # its definitions within
        if mod.path.name == "__init__.py":   # a package run as a program counts whole: every module in it
            for sub in pkgutil.iter_modules([str(mod.path.parent)]):
                self.whole(f"{name}.{sub.name}")
        self.follow(mod, mod.tree)

    def definition(self, name: str, attr: str) -> None:
        """`attr` as module `name` defines or imports it (followed only into workload modules)."""
        if not _is_workload(name):
            return
        sub = f"{name}.{attr}"
        if _source_file(sub) is not None:   # `from .. import datasets`: a module, not a definition
            return
        mod = self.module(name)
        if mod is None:
            return
        done = self.parts.setdefault(name, {})
        if WHOLE in done or attr in done:
            return
        if attr in mod.defs:
            nodes = mod.defs[attr]
            done[attr] = "\n".join(ast.dump(n, include_attributes=False) for n in nodes)
            for n in nodes:
                self.follow(mod, n)
        elif attr in mod.imports:   # re-exported from another module
            self.reference(*mod.imports[attr])

    def reference(self, module: str, attr: str | None) -> None:
        if attr is not None:   # `import x`: its attributes are followed where they are used
            self.definition(module, attr)

    def follow(self, mod: _Module, node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in mod.defs:
                    self.definition(mod.name, n.id)
                elif n.id in mod.imports:
                    self.reference(*mod.imports[n.id])
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in mod.imports:
                base, attr = mod.imports[n.value.id]
                target = f"{base}.{attr}" if attr else base   # `analysis.cursor_summary`, `datasets.Orders`
                if _source_file(target) is not None:
                    self.definition(target, n.attr)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                self.program(mod, n.value)

    def program(self, mod: _Module, text: str) -> None:
        """A module a string names, run as a program (a child, a server): it counts whole."""
        if _MODULE_TEXT.match(text):
            name = text.split(":", 1)[0]
            if name not in self.skip and _is_workload(name):
                self.whole(name)
        elif re.fullmatch(r"[a-z_][a-z0-9_]*", text) and (mod.path.parent / text / "__init__.py").is_file():
            self.whole(f"{mod.package}.{text}")   # a package of the module's folder, named by path


def version_parts(name: str, sources: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """{module: {definition name, or WHOLE for a whole module: its syntax tree}}: everything
    experiment `name`'s version hashes, docstrings and comments left out."""
    exp = get(name)
    walk = _Walk(sources, skip=(exp.analysis,) if exp.analysis else ())
    walk.whole(type(exp).__module__)
    return {m: dict(sorted(p.items())) for m, p in sorted(walk.parts.items()) if p}


def version(name: str, params: Any, sources: dict[str, str] | None = None) -> str:
    """A short hash of experiment `name`'s own code (version_parts), or of the `version` it sets by
    hand, and of its resolved parameters (a Params or its `to_dict()`): equal versions measured
    the same thing with the same settings."""
    h = hashlib.sha256()
    hand = get(name).version
    if hand:
        h.update(b"version\0" + str(hand).encode() + b"\0")
    else:
        for module, parts in version_parts(name, sources).items():
            for part, tree in parts.items():
                h.update(f"{module}:{part}".encode() + b"\0" + tree.encode() + b"\0")
    values = params.to_dict() if hasattr(params, "to_dict") else dict(params)
    h.update(json.dumps(values, sort_keys=True, default=str).encode())
    return h.hexdigest()[:VERSION_CHARS]
