"""Checked metadata: what two runs must share for their figures to measure the same thing, and what
only differs between them, as pyperf keeps its `_CHECKED_METADATA`.

One table, `CHECKED`, one row per key: how to read it from a manifest, how much a difference
matters (`effect`), why, and whether runs that differ on it may be pooled. One function,
`differences`, applies it to two manifests; `harness compare` shows what it finds, and the pooling
across runs (`pooling.record`) keeps apart the runs that differ on a key that does not pool
(`apart`). A key is read per run, per experiment or per server role (`scope`); a row whose `what`
holds `{}` is one row per experiment, role or package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import store

INCOMPARABLE, MAYBE, DIFFERS = "INCOMPARABLE", "may be incomparable", "differs"
ROLES = ("mongodb", "postgres", "toxiproxy")


@dataclass(frozen=True)
class Key:
    what: str                            # the row's name; "{}" stands for the experiment, role or package
    read: Callable[..., Any]             # (manifest) or (manifest, experiment | role) -> the value, None if absent
    effect: str                          # INCOMPARABLE, MAYBE or DIFFERS
    why: str                             # why a difference matters (compare adds who it concerns)
    scope: str = "run"                   # "run", "experiment" or "role"
    pools: bool = True                   # False: runs that differ here are never pooled together


# -- how each key is read ---------------------------------------------------------------------------

def interpreter(m: Mapping[str, Any]) -> str | None:
    """`cpython 3.12.1 (gil)`: the client side's interpreter (for a run before interpreters were
    recorded, `store.upgrade_manifest` gives it from the study's own Python, without a build)."""
    rec = (m.get("interpreter") or {}).get("interpreter") or {}
    if not rec.get("version"):
        return None
    build = rec.get("build") or ("free-threaded" if rec.get("gil_disabled") else "")
    return f"{rec.get('implementation', 'python')} {rec['version']}" + (f" ({build})" if build else "")


def packages(m: Mapping[str, Any]) -> dict[str, Any]:
    """Package versions the run's workers ran (the interpreter's venv), over the study's own."""
    study = (m.get("environment") or {}).get("packages") or {}
    return {**study, **((m.get("interpreter") or {}).get("packages") or {})}


def placement(m: Mapping[str, Any]) -> str | None:
    p = m.get("placement")
    if not p:
        return None
    cpus = (f" (servers {p['server_cpus']}, client {p.get('client_cpus')})"
            if p.get("placement") != "shared" and p.get("server_cpus") else "")
    return f"{p.get('placement')}{cpus}"


def commit(m: Mapping[str, Any]) -> str | None:
    g = (m.get("environment") or {}).get("git") or {}
    if not g.get("sha"):
        return None
    return str(g["sha"])[:10] + (" (dirty)" if g.get("dirty") else "")


def server_product(m: Mapping[str, Any], role: str) -> str | None:
    return ((m.get("servers") or {}).get(role) or {}).get("product")


def server_label(m: Mapping[str, Any], role: str) -> str | None:
    """`FerretDB 1.24.2 on PostgreSQL 15.14`: a server's product and version."""
    ident = (m.get("servers") or {}).get(role) or {}
    product, version = ident.get("product"), ident.get("version")
    backend = (ident.get("backend_server") or {}).get("version")
    if backend:
        version = f"{version} on PostgreSQL {str(backend).split()[0]}"
    return f"{product} {version}" if product else None


def driver_levels(m: Mapping[str, Any]) -> dict[str, str]:
    """The departures experiment's driver levels, as `prepare()` recorded them in the manifest:
    `<python> <level>` -> the versions installed for its pins (`pymongo 4.15.5`), `skipped` or `the
    lock's`. A level such as `pymongo=4.15.*` may resolve to another release in another run."""
    prepared = ((m.get("prepared") or {}).get("departures") or {})
    out = {}
    for key, rec in prepared.items():
        if not isinstance(rec, dict) or not rec.get("pins"):
            continue
        if rec.get("skipped"):
            out[key] = "skipped (did not install)"
        elif rec.get("same_as"):
            out[key] = f"the {rec['same_as']}'s versions"
        else:
            installed = rec.get("packages") or {}
            out[key] = ", ".join(f"{n} {installed.get(n) or '?'}" for n in sorted(rec["pins"]))
    return out


def postgres_settings(m: Mapping[str, Any]) -> dict[str, Any]:
    return ((m.get("servers") or {}).get("postgres") or {}).get("settings") or {}


def _experiment(m: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return (m.get("experiments") or {}).get(name) or {}


def _machine(m: Mapping[str, Any], key: str) -> Any:
    return store.machine_record(m).get(key)


CHECKED: tuple[Key, ...] = (
    Key("parameters of {}", lambda m, e: _experiment(m, e).get("params") or {}, INCOMPARABLE,
        "its parameters differ: it measured other sizes", scope="experiment", pools=False),
    Key("experiment {}", store.experiment_version, INCOMPARABLE,
        "its code differs (another version, same parameters)", scope="experiment", pools=False),
    Key("server product {}", server_product, INCOMPARABLE,
        "a different server product: its figures are of another server", scope="role", pools=False),
    Key("profile", lambda m: m.get("profile"), DIFFERS, "sizes and repeats differ", pools=False),
    Key("server {}", server_label, DIFFERS, "server version (or presence) differs", scope="role"),
    Key("interpreter", interpreter, DIFFERS, "the figures are of different interpreters: a factor, not a repeat"),
    Key("driver {}", lambda m, p: packages(m).get(p), DIFFERS, "a driver under test", scope="driver"),
    Key("driver level {} (departures)", lambda m, level: driver_levels(m).get(level) or "not run", DIFFERS,
        "the departures driver factor's level ran other versions (or only in one run)", scope="level"),
    Key("other packages", lambda m, drivers: {n: v for n, v in packages(m).items() if n not in drivers}, DIFFERS,
        "not drivers under test", scope="others"),
    Key("lock hash (requirements.lock sha256)", lambda m: (m.get("environment") or {}).get("lock_sha256"),
        DIFFERS, "the pinned environment differs: see the package versions"),
    Key("repeats of {}", lambda m, e: _experiment(m, e).get("repeats_planned"), DIFFERS,
        "different numbers of repeats: intervals of different widths", scope="experiment"),
    Key("postgres settings", postgres_settings, DIFFERS, "server tuning differs"),
    Key("commit", commit, DIFFERS, "see the experiment versions for what it changed"),
    Key("machine", store.boot_id, DIFFERS, "another boot: another machine, or the same one restarted"),
    Key("kernel", lambda m: _machine(m, "kernel"), DIFFERS, "machine"),
    Key("cpu count logical", lambda m: _machine(m, "cpu_count_logical"), DIFFERS, "machine"),
    Key("placement", placement, DIFFERS, "client and servers placed differently on the cores"),
)


def key(what: str) -> Key:
    """The row of CHECKED named `what` (as written there, `{}` included)."""
    found = [k for k in CHECKED if k.what == what]
    if not found:
        raise KeyError(what)
    return found[0]


def differences(ma: Mapping[str, Any], mb: Mapping[str, Any],
                drivers: tuple[str, ...] = ()) -> Iterator[tuple[Key, str, Any, Any, str]]:
    """(key, what, A's value, B's value, subject) for every row of CHECKED on which the two
    manifests differ, in table order: per experiment both ran, per server role, per driver package
    (`drivers`, the packages the experiments declare) and per driver level either run prepared."""
    ea, eb = ma.get("experiments") or {}, mb.get("experiments") or {}
    subjects: dict[str, tuple[str, ...]] = {
        "experiment": tuple(sorted(set(ea) & set(eb))), "role": ROLES, "driver": tuple(drivers),
        "level": tuple(sorted(set(driver_levels(ma)) | set(driver_levels(mb))))}
    for k in CHECKED:
        if k.scope == "run":
            pairs = [(k.what, "", k.read(ma), k.read(mb))]
        elif k.scope == "others":
            a, b = k.read(ma, drivers), k.read(mb, drivers)
            names = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            pairs = [(k.what, "", {n: a.get(n) for n in names}, {n: b.get(n) for n in names})] if names else []
        else:
            pairs = [(k.what.format(s), s, k.read(ma, s), k.read(mb, s)) for s in subjects[k.scope]]
        for what, subject, a, b in pairs:
            if a != b:
                yield k, what, a, b, subject


def needs(m: Mapping[str, Any], experiment: str) -> tuple[str, ...]:
    return tuple(_experiment(m, experiment).get("needs") or ())


def apart(m: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """What keeps this run's figures apart from another run's in the pooling: per experiment, the
    values of every key that does not pool (its version and parameters, the product of each server
    it needs), and under "" those of the run (its profile). Two runs pool a row's figures only when
    these agree for every experiment the row reads."""
    out: dict[str, tuple[Any, ...]] = {"": tuple(k.read(m) for k in CHECKED if not k.pools and k.scope == "run")}
    for name in (m.get("experiments") or {}):
        values: list[Any] = []
        for k in CHECKED:
            if k.pools or k.scope == "run":
                continue
            subjects = (name,) if k.scope == "experiment" else needs(m, name)
            values += [(k.what.format(s), _hashable(k.read(m, s))) for s in subjects]
        out[name] = tuple(values)
    return out


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value
