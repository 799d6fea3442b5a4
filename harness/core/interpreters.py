"""Which Python runs the client: find an interpreter, give it its own virtual environment.

`resolve("3.12")` finds an installed interpreter (a path, then PATH, then pyenv, then `uv python
find` when uv is installed) and asks it for its version and build; nothing is ever downloaded.
`ensure_venv(interp)` builds (once) `.venvs/py3.12/` for it:

1. from `requirements.lock` (the universal lock) when it exists, else from pyproject's
   dependencies constrained to the versions installed in the study's own environment, so every
   interpreter runs the same library versions;
2. if that full install fails on this interpreter, only the packages the client processes import
   (`CLIENT_PACKAGES`), under the same pins; the venv's marker says which (`mode`: full | client);
3. wheels only (`--only-binary=:all:`): a package without a wheel for this interpreter is an error
   naming the package and the interpreter, not a compiler run. uv installs when it is at hand, pip
   otherwise and whenever uv fails (its message names the package: `_pip`).

The study's own interpreter uses the study's own environment (no second copy). The harness itself
is not installed into these venvs: children run from the repository root (`child_env()`).

`ensure_pinned_venv(interp, {"pymongo": "4.18.2"})` (the departures' driver factor) builds
`.venvs/py3.12-pymongo-4.18.2/`: the client packages under the same pins with only the named ones
overridden (a version may end in `.*`: `4.15.*`). Pins equal to the lock's are the interpreter's own
venv (nothing installed). A pin the index does not serve, or that does not install or import on the
interpreter, raises `PinUnavailable` (one line, the reason) and leaves a marker beside the venvs, so
that the lookup inside a measurement (`build=False`) gives the same reason: a skip, not a failure.
`driver_versions()` reads the drivers' versions back (importlib.metadata) in the running process.

`python -m harness.core.interpreters 3.12 3.13` builds the venvs ahead of a run (it downloads wheels
and takes CPU: never while a measurement runs); `--pin pymongo==4.18.2` builds the pinned ones.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from .errors import HarnessError

REPO_ROOT = Path(__file__).resolve().parents[2]   # harness/core/interpreters.py
LOCK_FILE = REPO_ROOT / "requirements.lock"
CACHE_DIR = REPO_ROOT / ".venvs"
MARKER = "harness-venv.json"
# What the client processes (the worker, the workload children, the FastAPI app under test)
# import; Locust, Jupyter and the analysis stay on the study's interpreter.
CLIENT_PACKAGES = ("pymongo", "motor", "asyncpg", "psycopg[binary,pool]", "psycopg-pool", "uvloop",
                   "psutil", "numpy", "pandas", "pyarrow", "fastapi", "uvicorn", "httpx")
CLIENT_IMPORTS = ("pymongo", "motor", "asyncpg", "psycopg", "psycopg_pool", "uvloop", "psutil",
                  "pandas", "pyarrow")
# The database drivers (and the loop) under test: read back in every client child, checked by compare.
DRIVERS = ("pymongo", "motor", "psycopg", "psycopg-binary", "psycopg-pool", "asyncpg", "uvloop")
PIP_TIMEOUT_S = 1800
_REQUEST = re.compile(r"^(?:python)?(\d+)(?:\.(\d+))?(?:\.(\d+))?(t)?$")
_PROBE = ("import json, platform, sys, sysconfig; print(json.dumps({"
          "'version': platform.python_version(), 'implementation': sys.implementation.name, "
          "'gil_disabled': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
          "'executable': sys.executable, 'prefix': sys.prefix, "
          "'base_prefix': getattr(sys, 'base_prefix', sys.prefix)}))")


@dataclass(frozen=True)
class Interpreter:
    request: str          # what was asked for: "3.12", "3.13t", "/usr/bin/python3.12"
    path: str             # the executable that answered
    version: str          # "3.12.1"
    implementation: str   # "cpython"
    gil_disabled: bool    # a free-threaded build (sysconfig Py_GIL_DISABLED)
    found_by: str         # "path" | "PATH" | "pyenv" | "uv" | "study"
    base_prefix: str

    @property
    def build(self) -> str:
        return "free-threaded" if self.gil_disabled else "gil"

    @property
    def tag(self) -> str:
        """`py3.12`, `py3.13t`: the venv's directory name."""
        major_minor = ".".join(self.version.split(".")[:2])
        return f"py{major_minor}{'t' if self.gil_disabled else ''}"

    @property
    def label(self) -> str:
        """`3.12`, `3.13t`: the factor level in variant names."""
        return self.tag[2:]

    def record(self) -> dict:
        return {**asdict(self), "build": self.build, "tag": self.tag}


@dataclass(frozen=True)
class Venv:
    interpreter: Interpreter
    python: str           # the venv's python: what client children are started with
    path: str
    # "requirements.lock" | "pyproject.toml (pinned to the study environment)" | "study environment"
    source: str
    source_sha256: str | None
    mode: str             # "full" | "client" | "study"
    packages: dict        # name -> version of the client packages, as installed
    note: str = ""
    pins: dict | None = None  # ensure_pinned_venv: name -> version overriding the lock's pin

    def record(self) -> dict:
        return {"interpreter": self.interpreter.record(), "python": self.python, "path": self.path,
                "source": self.source, "source_sha256": self.source_sha256, "mode": self.mode,
                "packages": self.packages, "note": self.note, **({"pins": self.pins} if self.pins else {})}


class PinUnavailable(HarnessError):
    """A pinned version the package index does not serve, or that does not install or import on the
    interpreter: the levels that need it are skipped with this one-line reason, not failed."""


# ------------------------------------------------------------------------------------ finding

def probe(executable: str | os.PathLike, request: str = "", found_by: str = "path") -> Interpreter:
    """Ask an executable what it is; HarnessError naming it if it is not a usable Python."""
    try:
        out = subprocess.run([str(executable), "-c", _PROBE], capture_output=True, text=True,
                             timeout=30, env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"--python {request or executable}: {executable} could not be run ({e})") from None
    if out.returncode != 0:
        raise HarnessError(f"--python {request or executable}: {executable} is not a Python 3 interpreter "
                           f"the harness can ask ({(out.stderr.strip().splitlines() or ['?'])[-1]})")
    info = json.loads(out.stdout)
    # a shim (pyenv's) re-executes the real interpreter: record the one that answered
    return Interpreter(request=request or str(executable), path=info["executable"] or str(executable),
                       version=info["version"],
                       implementation=info["implementation"], gil_disabled=info["gil_disabled"],
                       found_by=found_by, base_prefix=info["base_prefix"])


def pyenv_root() -> Path | None:
    root = os.environ.get("PYENV_ROOT")
    if root:
        return Path(root)
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    default = Path.home() / ".pyenv"
    return default if default.is_dir() else None


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.t]", v.rstrip("t")) if x)


def _candidates(major: str, minor: str | None, patch: str | None, t: str) -> Iterator[tuple[str, str]]:
    """(executable, how found) in the order PATH, pyenv, uv; probed by the caller."""
    name = f"python{major}" + (f".{minor}{t}" if minor else "")
    if not patch:
        found = shutil.which(name)
        if found:
            yield found, "PATH"
    root = pyenv_root()
    if root and (root / "versions").is_dir():
        prefix = ".".join(x for x in (major, minor, patch) if x)
        dirs = [d for d in (root / "versions").iterdir()
                if (d.name == prefix + t or d.name.startswith(prefix + ".")) and d.name.endswith(t)
                and (t or not d.name.endswith("t"))]
        for d in sorted(dirs, key=lambda d: _version_key(d.name), reverse=True):
            for exe in (d / "bin" / name, d / "bin" / f"python{major}", d / "bin" / "python"):
                if exe.exists():
                    yield str(exe), "pyenv"
                    break
    uv = _uv()
    if uv:
        req = ".".join(x for x in (major, minor, patch) if x) + t
        out = subprocess.run([uv, "python", "find", "--no-python-downloads", req], capture_output=True,
                             text=True, timeout=60, env=dict(_clean_env(), UV_PYTHON_DOWNLOADS="never"))
        if out.returncode == 0 and out.stdout.strip():
            yield out.stdout.strip().splitlines()[-1], "uv"


def _uv() -> str | None:
    """uv on PATH, or the one installed beside the study's interpreter (the dev extra has it)."""
    sibling = Path(sys.executable).parent / "uv"
    return shutil.which("uv") or (str(sibling) if sibling.exists() else None)


_RESOLVED: dict[tuple, Interpreter | str] = {}


def resolve(request: str | None) -> Interpreter:
    """An installed interpreter for a version ("3.12", "3.12.1", "3.13t", "python3.12") or a path.

    None (or "current") is the study's own interpreter. Each answer (an error too) is kept for the
    process, per request and per PATH and PYENV_ROOT: finding one probes every candidate in a
    subprocess (about 0.1 s each), and an experiment's parameters ask again at every validation
    (`harness list` spent 4.5 of its 7 s there).
    """
    key = (request, os.environ.get("PATH"), os.environ.get("PYENV_ROOT"))
    if key not in _RESOLVED:
        try:
            _RESOLVED[key] = _resolve(request)
        except HarnessError as e:
            _RESOLVED[key] = str(e)
    found = _RESOLVED[key]
    if isinstance(found, str):
        raise HarnessError(found)
    return found


def _resolve(request: str | None) -> Interpreter:
    if request is None or request in ("", "current"):
        return Interpreter(request="current", path=sys.executable, version=_current_version(),
                           implementation=sys.implementation.name, gil_disabled=_current_gil_disabled(),
                           found_by="study", base_prefix=sys.base_prefix)
    request = str(request).strip()
    if os.sep in request or request.startswith(("~", ".")):
        path = Path(request).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HarnessError(f"--python {request}: no executable file at {path}")
        return probe(path, request, "path")
    m = _REQUEST.match(request)
    if not m:
        raise HarnessError(f"--python {request}: expected a version such as 3.12, 3.12.1 or 3.13t, "
                           "or the path of an interpreter")
    major, minor, patch, t = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    wanted = ".".join(x for x in (major, minor, patch) if x)
    tried = []
    for exe, how in _candidates(major, minor, patch, t):
        try:
            interp = probe(exe, request, how)
        except HarnessError as e:
            tried.append(str(e))
            continue
        if (interp.version == wanted or interp.version.startswith(wanted + ".")) \
                and interp.gil_disabled == bool(t):
            return interp
        tried.append(f"{exe} is {interp.version} ({interp.build})")
    where = "PATH, pyenv" + (f" ({pyenv_root()})" if pyenv_root() else "") + \
            (", `uv python find`" if _uv() else " (uv is not installed)")
    raise HarnessError(f"--python {request}: no {'free-threaded ' if t else ''}Python {wanted} found on "
                       f"{where}; install it (nothing is downloaded at run time)"
                       + (f". Tried: {'; '.join(tried)}" if tried else ""))


def free_threaded() -> list[Interpreter]:
    """Every free-threaded build installed here (PATH, pyenv, uv), newest first; none is downloaded."""
    found: dict[str, Interpreter] = {}
    for minor in range(13, 20):
        try:
            interp = resolve(f"3.{minor}t")
        except HarnessError:
            continue
        found.setdefault(interp.version, interp)
    return [found[v] for v in sorted(found, key=_version_key, reverse=True)]


def _current_version() -> str:
    import platform

    return platform.python_version()


def _current_gil_disabled() -> bool:
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled_now() -> bool:
    """Whether this process runs with the GIL (a free-threaded build may re-enable it at run time)."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def study_python() -> str:
    """The study's own interpreter, for tools that stay on it (Locust) when a worker runs on another
    (`--python`): the study passes it down as HARNESS_STUDY_PYTHON."""
    return os.environ.get("HARNESS_STUDY_PYTHON") or sys.executable


def runtime_record() -> dict:
    """The running interpreter's version and build: recorded with every sample."""
    return {"python": _current_version(), "python_build": "free-threaded" if _current_gil_disabled() else "gil",
            "gil_enabled": gil_enabled_now(), "python_executable": sys.executable}


# ------------------------------------------------------------------------------------ venvs

def _clean_env() -> dict[str, str]:
    """The environment without the study venv's activation, so a probe sees the bare interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a client child started with a venv's python: the harness from the repo."""
    env = _clean_env()
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _is_study_interpreter(interp: Interpreter) -> bool:
    return (interp.found_by == "study"
            or (interp.version == _current_version() and interp.gil_disabled == _current_gil_disabled()
                and os.path.realpath(interp.base_prefix) == os.path.realpath(sys.base_prefix)))


def _source() -> tuple[str, str]:
    """(source name, sha256) of what the venvs are built from."""
    if LOCK_FILE.exists():
        return "requirements.lock", hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()
    pyproject = REPO_ROOT / "pyproject.toml"
    pins = "\n".join(_study_pins())
    digest = hashlib.sha256(pyproject.read_bytes() + pins.encode()).hexdigest()
    return "pyproject.toml (pinned to the study environment)", digest


def _study_pins() -> list[str]:
    """`name==version` of every distribution in the study's own environment."""
    pins = {}
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if name and name.lower() != "async-db-study":
            pins[name.lower()] = f"{name}=={d.version}"
    return [pins[k] for k in sorted(pins)]


def _lock_constraints() -> list[str]:
    """The lock's requirement lines without hashes or comments (pip constraints refuse hashes)."""
    text = LOCK_FILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        out.append(re.sub(r"\s--hash[= ]\S+", "", line).strip())
    return out


def _pyproject_dependencies() -> list[str]:
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return list(data["project"]["dependencies"])


def venv_path(interp: Interpreter, cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or CACHE_DIR) / interp.tag


def ensure_venv(interp: Interpreter, cache_dir: Path | None = None, *, build: bool = True,
                log=None) -> Venv:
    """The interpreter's venv, built once (see the module docstring). `build=False`: only look it up,
    HarnessError if missing or stale (inside a measurement nothing may be installed)."""
    if _is_study_interpreter(interp):
        return Venv(interp, sys.executable, sys.prefix, "study environment", None, "study",
                    _installed_versions(sys.executable))
    source, digest = _source()
    path = venv_path(interp, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{interp.tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs building the same venv wait for each other
        marker = path / MARKER
        m = json.loads(marker.read_text()) if marker.exists() else None
        if m and m.get("version") == interp.version and Path(m["python"]).exists():
            stale = _stale(interp, m, digest)
            if not stale:
                return Venv(interp, m["python"], str(path), m["source"], digest, m["mode"], m["packages"],
                            m.get("note", ""))
            if not build:
                raise HarnessError(f"the virtual environment for Python {interp.label} at {path} is out of "
                                   f"date with {source} ({stale}); update it first, outside any "
                                   f"measurement: python -m harness.core.interpreters {interp.request}")
            if LOCK_FILE.exists():  # in place: pip changes only the pins that moved
                return _sync(interp, path, m, source, digest, log or (lambda msg: None))
        if not build:
            raise HarnessError(f"no ready virtual environment for Python {interp.label} at {path} "
                               f"(built from {source}); build it first, outside any measurement: "
                               f"python -m harness.core.interpreters {interp.request}")
        return _build(interp, path, source, digest, log or (lambda msg: None))


def _marker_env(interp: Interpreter) -> dict[str, str]:
    import platform

    return {"python_version": ".".join(interp.version.split(".")[:2]), "python_full_version": interp.version,
            "implementation_name": interp.implementation, "sys_platform": sys.platform,
            "platform_system": platform.system(), "platform_machine": platform.machine(), "os_name": os.name,
            "platform_python_implementation": ("CPython" if interp.implementation == "cpython"
                                               else interp.implementation)}


def lock_pins(interp: Interpreter) -> dict[str, str]:
    """The lock's `name -> version` that apply to this interpreter (markers evaluated for it)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = _marker_env(interp)
    pins = {}
    for line in _lock_constraints():
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        spec = next(iter(req.specifier), None)
        if spec is not None and spec.operator == "==":
            pins[str(canonicalize_name(req.name))] = spec.version
    return pins


def _all_installed(py: str) -> dict[str, str]:
    code = ("import json, re; from importlib import metadata as m; "
            "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version "
            "for d in m.distributions() if d.metadata['Name']}))")
    out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60, env=_clean_env())
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _stale(interp: Interpreter, marker: dict, digest: str) -> str | None:
    """Why a venv no longer matches its source (None if it does). With a lock: the pins that apply to
    this interpreter and differ from what is installed (a full venv must hold every pin, a client
    venv the pins of what it has); without: the pyproject/study-pins digest."""
    if not LOCK_FILE.exists():
        return None if marker.get("source_sha256") == digest else "pyproject or the study environment changed"
    installed = _all_installed(marker["python"])
    wrong = [f"{n} {installed.get(n, 'missing')} (lock: {v})" for n, v in lock_pins(interp).items()
             if installed.get(n) != v and (marker["mode"] == "full" or n in installed)]
    return ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "") if wrong else None


def _sync(interp: Interpreter, path: Path, marker: dict, source: str, digest: str, log) -> Venv:
    py = marker["python"]
    constraints = path / "constraints.txt"
    constraints.write_text("\n".join(_lock_constraints()) + "\n")
    args = ["-r", str(LOCK_FILE)] if marker["mode"] == "full" else ["-c", str(constraints), *CLIENT_PACKAGES]
    log(f"updating {path} to {source}")
    err = _pip(py, args, log)
    if err is not None:
        shutil.rmtree(path, ignore_errors=True)  # rebuilt from scratch, with the client fallback
        return _build(interp, path, source, digest, log)
    marker.update(source_sha256=digest, packages=_installed_versions(py))
    (path / MARKER).write_text(json.dumps(marker, indent=2))
    return Venv(interp, py, str(path), source, digest, marker["mode"], marker["packages"], marker.get("note", ""))


def _new_venv(interp: Interpreter, path: Path, log, what: str = "") -> str:
    """An empty venv at `path` (a stale one is removed first); its python's path."""
    if path.exists():
        shutil.rmtree(path)
    log(f"creating {path} with {interp.path} ({interp.version}, {interp.build}){what}")
    out = subprocess.run([interp.path, "-m", "venv", str(path)], capture_output=True, text=True,
                         timeout=300, env=_clean_env())
    if out.returncode != 0:
        raise HarnessError(f"--python {interp.request}: `{interp.path} -m venv` failed: "
                           f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return str(path / "bin" / "python")


def _build(interp: Interpreter, path: Path, source: str, digest: str, log) -> Venv:
    py = _new_venv(interp, path, log)
    constraints = path / "constraints.txt"
    if LOCK_FILE.exists():
        constraints.write_text("\n".join(_lock_constraints()) + "\n")
        full = ["-r", str(LOCK_FILE)]
    else:
        constraints.write_text("\n".join(_study_pins()) + "\n")
        full = ["-c", str(constraints), *_pyproject_dependencies()]
    mode, note = "full", ""
    err = _pip(py, full, log)
    if err is not None:
        note = (f"the full {source} did not install on Python {interp.version} ({err}); "
                f"installed only the client packages")
        log(note)
        err = _pip(py, ["-c", str(constraints), *CLIENT_PACKAGES], log)
        mode = "client"
        if err is not None:
            shutil.rmtree(path, ignore_errors=True)
            raise HarnessError(f"--python {interp.request}: cannot build the client environment for "
                               f"Python {interp.version} ({interp.path}): {err}")
    check = subprocess.run([py, "-c", "import " + ", ".join(CLIENT_IMPORTS)], capture_output=True,
                           text=True, timeout=300, env=_clean_env())
    if check.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise HarnessError(f"--python {interp.request}: the client packages do not import on Python "
                           f"{interp.version}: {(check.stderr.strip().splitlines() or ['?'])[-1]}")
    venv = Venv(interp, py, str(path), source, digest, mode, _installed_versions(py), note)
    (path / MARKER).write_text(json.dumps({"python": py, "version": interp.version, "build": interp.build,
                                           "interpreter": interp.path, "source": source,
                                           "source_sha256": digest, "mode": mode, "note": note,
                                           "packages": venv.packages}, indent=2))
    log(f"ready: {path} ({mode})")
    return venv


def _pip(py: str, args: list[str], log) -> str | None:
    """pip install, wheels only. None on success, else one line naming the package that failed.
    With uv at hand (on PATH, or the dev extra's beside the study's interpreter) uv installs first:
    the same requirements, pins and constraints, wheels only, in a few seconds where pip takes
    15-20 s for the client packages. When uv fails, pip runs the same install, so that the reason
    given is pip's, read below."""
    def install(command: list[str]) -> subprocess.CompletedProcess[str]:
        shown = len(command) - len(args) + 2   # the command and its first two arguments: the rest is long
        log("$ " + " ".join(command[:shown]) + (" ..." if len(command) > shown else ""))
        return subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=_clean_env())

    uv = _uv()
    if uv:
        if install([uv, "pip", "install", "--python", py, "--only-binary", ":all:", *args]).returncode == 0:
            return None
        log("uv could not install it; pip tries, and says why if it cannot")
    out = install([py, "-m", "pip", "install", "--only-binary=:all:", "--no-input", *args])
    if out.returncode == 0:
        return None
    text = out.stdout + "\n" + out.stderr
    m = re.search(r"No matching distribution found for ([^\s;]+)", text)
    if m:
        return f"package {m.group(1)} has no wheel (or no release) for this interpreter on the index"
    m = re.search(r"Could not find a version that satisfies the requirement ([^\s;]+)", text)
    if m:
        return f"package {m.group(1)} has no wheel (or no release) for this interpreter on the index"
    m = re.search(r"Cannot install ([^\s;]+?)(?: and|,| because)", text)
    if m:  # a pinned version the resolver cannot take: no wheel of that version for this interpreter
        name = m.group(1)
        pin = re.search(rf"\(constraint\) ({re.escape(name)}==\S+)", text, re.IGNORECASE)
        return (f"package {pin.group(1) if pin else name} has no wheel (or no release) for this "
                f"interpreter on the index")
    errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("ERROR")]
    return (errors[-1] if errors else (text.strip().splitlines() or ["pip failed"])[-1])[:400]


def _installed_versions(py: str) -> dict[str, str]:
    names = ["pymongo", "motor", "asyncpg", "psycopg", "psycopg-binary", "psycopg-pool", "uvloop", "psutil",
             "pandas", "numpy", "pyarrow"]
    code = ("import json; from importlib import metadata as m\n"
            "def v(n):\n    try: return m.version(n)\n    except Exception: return None\n"
            f"print(json.dumps({{n: v(n) for n in {names!r}}}))")
    out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60, env=_clean_env())
    return json.loads(out.stdout) if out.returncode == 0 else {}


# ------------------------------------------------------------------------------------ pinned venvs

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN_VERSION = re.compile(r"^[0-9][0-9A-Za-z.!+-]*?(\.\*)?$")


def canonical(name: str) -> str:
    """A distribution's name as pip compares them: `Psycopg_Pool` -> `psycopg-pool`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_pin(name: str, version: str) -> None:
    """HarnessError unless `version` is a release (`4.18.2`) or a release prefix (`4.15.*`)."""
    if not _PIN_VERSION.match(version) or "*" in version[:-2]:
        raise HarnessError(f"{name}={version}: expected a version such as 4.18.2 or 4.15.*")


def pin_matches(installed: str | None, version: str) -> bool:
    """Whether an installed version satisfies a pin (`4.15.*` is every 4.15 release)."""
    if installed is None:
        return False
    if version.endswith(".*"):
        return installed == version[:-2] or installed.startswith(version[:-1])
    return installed == version


def base_pins(interp: Interpreter) -> dict[str, str]:
    """name -> version every venv of this interpreter is built with: the lock's pins for it, or
    (without a lock) the study environment's versions."""
    if LOCK_FILE.exists():
        return lock_pins(interp)
    return {canonical(p.split("==")[0]): p.split("==")[1] for p in _study_pins()}


def is_locked(interp: Interpreter, pins: dict[str, str]) -> bool:
    """True when every pin is exactly the version the interpreter's own venv has (no second venv)."""
    base = base_pins(interp)
    return all(base.get(canonical(n)) == v for n, v in pins.items())


def pinned_tag(interp: Interpreter, pins: dict[str, str]) -> str:
    """`py3.11-pymongo-4.18.2`, `py3.11-asyncpg-0.31.0_psycopg-3.3.6`: the pinned venv's directory."""
    return interp.tag + "-" + "_".join(f"{canonical(n)}-{v.replace('*', 'x')}" for n, v in sorted(pins.items()))


def _pins_text(pins: dict[str, str]) -> str:
    return ", ".join(f"{n}=={v}" for n, v in sorted(pins.items()))


def _pinned_constraints(interp: Interpreter, pins: dict[str, str]) -> list[str]:
    """The lock's lines (or the study's pins) with the pinned packages' lines replaced by the pins."""
    lines = _lock_constraints() if LOCK_FILE.exists() else _study_pins()
    keep = []
    for line in lines:
        m = _NAME.match(line)
        if m and canonical(m.group(1)) in pins:
            continue
        keep.append(line)
    return keep + [f"{n}=={v}" for n, v in sorted(pins.items())]


def ensure_pinned_venv(interp: Interpreter, pins: dict[str, str], cache_dir: Path | None = None, *,
                       build: bool = True, log=None) -> Venv:
    """A venv for `interp` with the client packages under the lock's pins, `pins` overriding some
    (see the module docstring): built once, outside any measurement. `build=False` only looks it up:
    PinUnavailable if building it failed (the reason recorded then), HarnessError if it was never built.
    Pins equal to the lock's give the interpreter's own venv (`ensure_venv`)."""
    pins = {canonical(n): v for n, v in pins.items()}
    for n, v in pins.items():
        check_pin(n, v)
    if not pins or is_locked(interp, pins):
        return ensure_venv(interp, cache_dir, build=build, log=log)
    log = log or (lambda msg: None)
    source, digest = _source()
    tag = pinned_tag(interp, pins)
    cache = Path(cache_dir or CACHE_DIR)
    cache.mkdir(parents=True, exist_ok=True)
    path, failed = cache / tag, cache / f".{tag}.failed.json"
    wanted = {"version": interp.version, "source_sha256": digest, "pins": pins}
    with open(cache / f".{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = path / MARKER
        m = json.loads(marker.read_text()) if marker.exists() else None
        if m and all(m.get(k) == v for k, v in wanted.items()) and Path(m["python"]).exists():
            return Venv(interp, m["python"], str(path), m["source"], digest, m["mode"], m["packages"],
                        m.get("note", ""), pins)
        if not build:
            f = json.loads(failed.read_text()) if failed.exists() else None
            if f and all(f.get(k) == v for k, v in wanted.items()):
                raise PinUnavailable(f["reason"])
            raise HarnessError(f"no ready virtual environment for Python {interp.label} with "
                               f"{_pins_text(pins)} at {path} (built from {source}); build it first, outside "
                               f"any measurement: python -m harness.core.interpreters "
                               + " ".join(f"--pin {n}=={v}" for n, v in sorted(pins.items()))
                               + f" {interp.request}")
        failed.unlink(missing_ok=True)
        try:
            return _build_pinned(interp, path, pins, source, digest, log)
        except PinUnavailable as e:
            failed.write_text(json.dumps({**wanted, "reason": str(e), "interpreter": interp.path}, indent=2))
            raise


def _build_pinned(interp: Interpreter, path: Path, pins: dict[str, str], source: str, digest: str,
                  log) -> Venv:
    py = _new_venv(interp, path, log, f", {_pins_text(pins)}")
    constraints = path / "constraints.txt"
    constraints.write_text("\n".join(_pinned_constraints(interp, pins)) + "\n")
    names = {canonical(p.split("[")[0]) for p in CLIENT_PACKAGES}
    err = _pip(py, ["-c", str(constraints), *CLIENT_PACKAGES, *(n for n in sorted(pins) if n not in names)], log)
    if err is None:
        check = subprocess.run([py, "-c", "import " + ", ".join(CLIENT_IMPORTS)], capture_output=True,
                               text=True, timeout=300, env=_clean_env())
        if check.returncode != 0:
            err = f"the client packages do not import: {(check.stderr.strip().splitlines() or ['?'])[-1]}"
    packages = _installed_versions(py) if err is None else {}
    if err is None:
        wrong = [f"{n} {packages.get(n)}" for n, v in pins.items() if n in packages and not pin_matches(packages[n], v)]
        err = f"pip installed {', '.join(wrong)}" if wrong else None
    if err is not None:
        shutil.rmtree(path, ignore_errors=True)
        raise PinUnavailable(f"{_pins_text(pins)} cannot be installed on Python {interp.version} "
                             f"({interp.path}) from the package index: {err}")
    note = f"the client packages under {source}'s pins, with {_pins_text(pins)}"
    venv = Venv(interp, py, str(path), source, digest, "client", packages, note, pins)
    (path / MARKER).write_text(json.dumps({"python": py, "version": interp.version, "build": interp.build,
                                           "interpreter": interp.path, "source": source,
                                           "source_sha256": digest, "mode": "client", "note": note,
                                           "pins": pins, "packages": packages}, indent=2))
    log(f"ready: {path} (client, {_pins_text(pins)})")
    return venv


def installed_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed versions of `names` in this process, from their metadata (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def driver_versions() -> dict[str, str | None]:
    """The drivers' versions in this process, read back from their installed metadata."""
    return installed_versions(DRIVERS)


def prepare(requests: list[str] | tuple[str, ...], cache_dir: Path | None = None, *, build: bool = True,
            log=None, skip_missing: bool = False) -> list[Venv]:
    """Resolve every request and make its venv ready (duplicates by tag dropped, order kept).
    `skip_missing`: a request no installed interpreter answers is logged and skipped, not an error."""
    venvs: dict[str, Venv] = {}
    for r in requests:
        try:
            interp = resolve(r)
        except HarnessError as e:
            if not skip_missing:
                raise
            (log or (lambda msg: None))(f"skipped: {e}")
            continue
        if interp.tag not in venvs:
            venvs[interp.tag] = ensure_venv(interp, cache_dir, build=build, log=log)
    return list(venvs.values())


def main(argv: list[str]) -> int:
    """`python -m harness.core.interpreters [--installed] [--pin NAME==VERSION]... VERSION...`; --installed
    skips (with a line on stderr) a version this machine does not have, so set-up can prepare whatever
    is there; --pin builds, for each version, the venv with those pins (`ensure_pinned_venv`)."""
    pins: dict[str, str] = {}
    requests: list[str] = []
    args = iter(argv)
    for a in args:
        if a == "--installed":
            continue
        if a == "--pin" or a.startswith("--pin="):
            pin = a.split("=", 1)[1] if "=" in a and a.startswith("--pin=") else next(args, "")
            name, _, version = pin.partition("==")
            if not (name and version):
                print(f"error: --pin {pin!r}: expected NAME==VERSION, e.g. --pin pymongo==4.18.2", file=sys.stderr)
                return 2
            pins[canonical(name)] = version
        else:
            requests.append(a)
    requests = requests or ["current"]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        venvs = prepare(requests, log=log, skip_missing="--installed" in argv)
        if pins:
            venvs = [ensure_pinned_venv(v.interpreter, pins, log=log) for v in venvs]
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for v in venvs:
        print(json.dumps(v.record()))
    ft = free_threaded()
    print("free-threaded builds: " + (", ".join(f"{i.version} ({i.path})" for i in ft) if ft else
          "none installed on this machine (none downloaded)"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
