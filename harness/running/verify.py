"""`harness verify WORKLOAD.toml`: the seeds' checks on a user's own server and queries.

1. Read and check the workload file (`harness.core.workload_file`): schema, read-only statements,
   placeholders with generators, the target's scheme. Nothing has connected anywhere yet.
2. Refuse a target off loopback unless each such host is named with `--confirm-host`.
3. Check that the target answers (one line naming it otherwise), and on PostgreSQL run the
   pre-flight: each statement once, in a read-only transaction rolled back
   (`harness.experiments.verify.postgres.preflight`); a statement the server refuses stops the
   command in one line naming it, before any repeat. (A `local` target's server exists only once
   the run starts it: there the pre-flight opens the first repeat.)
4. Run `verify_postgres` or `verify_mongo` through `study.run`, like any experiment: the profile
   `full` with the file's `[load]` as parameter overrides and `load.repeats` repeats, paired and
   interleaved, warm-up excluded, client and server CPU, the in-run calibration, the manifest.
   The target reaches the servers as STUDY_POSTGRES_DSN / STUDY_MONGODB_URI for this call only; the
   run stores the workload without its target (the manifest's server entry is redacted).
5. Build the one-page report (`notebooks/06_workload.ipynb`) into the run.

`target = "local"` runs on the harness's own servers (an explicit STUDY_* variable is set aside for
the call) and loads the named dataset first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core import servers, store, workload_file
from ..core.errors import HarnessError
from . import study

ROLE_VARIABLE = {"postgres": "STUDY_POSTGRES_DSN", "mongodb": "STUDY_MONGODB_URI"}
# [load] keys that are the verify experiments' parameters, per family (the rest are judgement
# thresholds the analysis reads from the stored workload)
LOAD_PARAMETERS = {"postgres": ("clients", "pools", "duration_s", "warmup_s", "models"),
                   "mongodb": ("tasks", "threads", "pools", "duration_s", "warmup_s")}


@dataclass(frozen=True)
class Permissions:
    """What the user allows on the command line beyond the defaults (PostgreSQL targets only)."""
    trusted_functions: tuple[str, ...] = ()   # --trust-function: bodies not walked
    writable_role_ok: bool = False            # --writable-role-ok: a role that can write, off the study's cluster
    idle_target: bool = False                 # --idle-target: nothing else writes, so row counters are watched

    def overrides(self, family: str) -> dict[str, Any]:
        if family != "postgres":
            if self != Permissions():
                raise HarnessError("--trust-function, --writable-role-ok and --idle-target apply to a [postgres] "
                                   "workload only")
            return {}
        return asdict(self)


def plan(path: str | Path, confirmed_hosts: tuple[str, ...] = (),
         permissions: Permissions = Permissions()) -> tuple[workload_file.Workload, dict[str, Any], Any]:
    """The checked workload, the experiment's parameter overrides, and its parameters as the run will
    resolve them (their own checks passed); nothing is contacted."""
    w = workload_file.load(path)
    workload_file.confirm_target(w, confirmed_hosts, str(path))
    load = w.load.model_dump()
    overrides: dict[str, Any] = {k: load[k] for k in LOAD_PARAMETERS[w.family]}
    overrides["workload"] = json.dumps(w.body(), sort_keys=True)
    overrides.update(permissions.overrides(w.family))
    params = study.plan([w.experiment], "full", overrides, w.load.repeats)[0].params
    return w, overrides, params


@contextmanager
def _target(w: workload_file.Workload) -> Iterator[None]:
    """STUDY_* set to the file's target (or unset for `local`) for the duration of the run."""
    var = ROLE_VARIABLE[w.family]
    before = os.environ.get(var)
    if w.target == "local":
        os.environ.pop(var, None)
    else:
        os.environ[var] = w.target
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = before


def check_reachable(w: workload_file.Workload) -> None:
    if w.target == "local":
        return
    if w.family == "postgres":
        servers.check_postgres(w.target, "target")
    else:
        servers.check_mongodb(w.target, "target")


def preflight(w: workload_file.Workload, planned: Any) -> None:
    """The PostgreSQL guards and pre-flight on the file's target (a MongoDB workload is a find,
    nothing to try): the role's rights, what the statements reach, the pre-flight, the row counters."""
    if w.target == "local" or w.postgres is None:
        return
    from ..experiments.verify import postgres as verify_postgres

    params = {name: g.model_dump() for name, g in w.postgres.params.items()}
    gens = verify_postgres.generators(w.target, params, w.seed)
    assert isinstance(planned, verify_postgres.VerifyPostgresParams)
    verify_postgres.guarded_preflight(w.target, w.body(), gens, planned)


def prepare(path: str | Path, confirmed_hosts: tuple[str, ...] = (), data_dir: Path | None = None,
            permissions: Permissions = Permissions()) -> tuple[workload_file.Workload, dict[str, Any]]:
    """`plan()`, then the data directory, the target, the guards and the pre-flight: every input
    error, and every statement the server or the guards refuse, before a run starts."""
    w, overrides, planned = plan(path, confirmed_hosts, permissions)
    store.check_writable(data_dir)
    check_reachable(w)
    preflight(w, planned)
    return w, overrides


def run(path: str | Path, confirmed_hosts: tuple[str, ...] = (), *, data_dir: Path | None = None,
        repeat: int | None = None, on_event: Callable[[str, dict], None] | None = None,
        permissions: Permissions = Permissions()) -> Path:
    """Check, run and store the workload; returns the run's directory (`report.build` makes its page)."""
    w, overrides = prepare(path, confirmed_hosts, data_dir, permissions)
    return execute(w, overrides, data_dir=data_dir, repeat=repeat, on_event=on_event)


def execute(w: workload_file.Workload, overrides: dict[str, Any], *, data_dir: Path | None = None,
            repeat: int | None = None, on_event: Callable[[str, dict], None] | None = None) -> Path:
    """Run a workload `prepare()` has checked."""
    with _target(w):
        return study.run([w.experiment], "full", repeat or w.load.repeats, overrides, data_dir, on_event=on_event,
                         read_only_servers=True)


def verdict_lines(run_: store.Run) -> list[str]:
    """One line per check: verdict, check, subject, figure [interval], advice."""
    from ..experiments.verify import analysis

    out = []
    for _, c in analysis.checks(run_).iterrows():
        if c["unit"] == "share of repeats":
            figure = f"{c['figure']} ({c['estimate']:.0%} of {c['n']} repeats)"
        else:
            figure = f"{c['figure']} {c['estimate']:.3g}"
        if c["ci_low"] == c["ci_low"]:   # not NaN
            figure += f" [{c['ci_low']:.3g}, {c['ci_high']:.3g}]"
        out.append(f"{c['verdict'].upper():13} {c['check']:15} {c['subject']}: {figure} -- {c['advice']}")
    if not out:
        raise HarnessError(f"run {run_.id} holds no verify experiment")
    return out
