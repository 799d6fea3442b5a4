"""One run end to end: validate, provision, load, measure (each repeat in a worker), store.

The plan (profile + overrides -> validated parameters, and repeats per experiment) is made once,
here, before anything starts; workers get it as it is. Repeats run round-robin across
experiments (A B C A B C, not A A A B B B), so drift on a shared machine spreads over all of them;
datasets load before the first round; after loading, and after any repeat of an experiment that
writes, PostgreSQL is checkpointed and vacuumed so one experiment's writes do not land in the next
one's window. Manifest keys written here: `schedule` (the order repeats ran in), per experiment
`status`, `cells` (counts), `reasons`, `repeats`, `network`; `timing`, `calibration`, `placement`,
`prepared`, `server_resets`, `server_restarts`, `has_failures` (see `store.Manifest`).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..core import config, environment, processes, servers, store
from ..core.config import PROFILES
from ..core.errors import HarnessError
from ..core.measure import error_text
from ..core.servers import ServerStack
from ..core.store import RunWriter, experiment_status, new_run_id, write_json_atomic
from ..experiments import registry
from ..experiments.base import Experiment, Params
from .worker import RepeatSpec, failed_cells

Emit = Callable[[str, dict], None]


@dataclass
class Planned:
    experiment: Experiment
    params: Params
    repeats: int


def repeats_for(exp: Experiment, profile: str, repeat: int | None) -> int:
    """`--repeat N` if given, else the experiment's own count for the profile."""
    if repeat is not None:
        if repeat < 1:
            raise HarnessError(f"--repeat must be at least 1, got {repeat}")
        return 1 if exp.after_repeats else repeat
    return max(1, int(exp.repeats.get(profile, 1)))


def plan(names: list[str], profile: str, overrides: dict[str, Any] | None = None,
         repeat: int | None = None) -> list[Planned]:
    """Resolve names, parameters and repeats before anything starts: bad input fails in milliseconds.

    `overrides` keys may be `param` (applied to every experiment that has it) or
    `experiment.param` (applied to that experiment only).
    """
    if not names:
        raise HarnessError("no experiment named; `python -m harness list` shows them")
    if profile not in PROFILES:
        raise HarnessError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    exps = [registry.get(n) for n in dict.fromkeys(names)]
    overrides = overrides or {}
    names_of = {e.name: {f.name for f in fields(e.params_type)} for e in exps}
    for key in overrides:
        target = key.split(".", 1)[0] if "." in key else None
        if target is not None and target not in names_of:
            raise HarnessError(f"--set {key}: {target!r} is not among the experiments of this run")
        if target is None and not any(key in known for known in names_of.values()):
            raise HarnessError(f"--set {key}: no experiment of this run has a parameter {key!r}")
    planned = []
    for e in exps:
        mine = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(f"{e.name}.")}
        shared = {k: v for k, v in overrides.items() if "." not in k and k in names_of[e.name]}
        try:
            planned.append(Planned(e, e.params(profile, {**shared, **mine}), repeats_for(e, profile, repeat)))
        except HarnessError as err:
            raise HarnessError(f"{e.name}: {err}") from None
    return planned


def schedule(planned: list[Planned]) -> list[tuple[Planned, int]]:
    """Round-robin: repeat 0 of every experiment, then repeat 1 of those that have one, ...; an
    experiment that runs `after_repeats` comes last."""
    later = [p for p in planned if p.experiment.after_repeats]
    rounds = max((p.repeats for p in planned if p not in later), default=0)
    return [(p, k) for k in range(rounds) for p in planned if k < p.repeats and p not in later] + \
        [(p, k) for p in later for k in range(p.repeats)]


def repeat_seconds(planned: list[Planned], reference: Mapping[str, Any] | None = None) -> dict[str, float]:
    """About how long one repeat of each planned experiment takes, for the progress bar's ETA: the
    median repeat of that experiment in `reference` (a run's manifest; default: the committed
    reference run's, which records every repeat's seconds), else the median over that run's
    experiments, else 1 (every repeat alike). Repeats differ tenfold (mongo_client 16 s, departures
    150 s on the reference machine), so a bar that counts repeats mistakes the short ones' pace for
    the run's. Only the ratios matter: the bar measures how fast this machine gets through the
    reference's seconds."""
    if reference is None:
        committed = store.list_runs(config.REPO_ROOT / "data", where=("reference",))
        try:
            reference = store.Run(Path(committed[-1]["path"])).manifest if committed else {}
        except HarnessError:
            reference = {}
    medians = {}
    for name, entry in (reference.get("experiments") or {}).items():
        seconds = [float(r["seconds"]) for r in entry.get("repeats") or []
                   if isinstance(r.get("seconds"), (int, float)) and r["seconds"] > 0]
        if seconds:
            medians[name] = statistics.median(seconds)
    default = statistics.median(medians.values()) if medians else 1.0
    return {p.experiment.name: medians.get(p.experiment.name, default) for p in planned}


def run_repeat(p: Planned, stack: ServerStack, out_dir: Path, repeat: int, *,
               known_variants: list[str] | None = None, python: str | None = None) -> dict[str, Any]:
    """One repeat in a fresh worker process, bounded by the experiment's `timeout_s`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = RepeatSpec(experiment=p.experiment.name, module=type(p.experiment).__module__,
                      params=p.params.to_dict(), servers=stack.to_json(),
                      out_dir=str(out_dir), repeat=repeat, known_variants=list(known_variants or []))
    result_path = out_dir / "result.json"
    child = processes.run_child(f"worker:{p.experiment.name}:r{repeat}", "harness.running.worker", spec,
                                result_path=result_path, log_path=out_dir / "worker.log",
                                timeout_s=p.params.timeout_s,
                                python=python,  # --python: the worker (and its clients) on that venv's python
                                # ... while Locust and other tools stay on the study's (interpreters.study_python)
                                env=dict(os.environ, HARNESS_STUDY_PYTHON=sys.executable) if python else None)
    result = dict(child.result or {})
    if child.timed_out:
        reason = f"timed out after {p.params.timeout_s:g} s (parameter timeout_s)"
    elif "cells" not in result:
        reason = f"worker failed before reporting its cells: {child.error}"
    else:
        reason = None
    if reason is not None:  # a repeat that crashes or times out fails all its cells
        variants = [c["variant"] for c in result.get("cells", [])] or list(known_variants or [])
        result.update(status="failed", error=reason, cells=failed_cells(variants, reason))
        result["cell_status"] = "failed"
    result.setdefault("experiment", p.experiment.name)
    result.setdefault("repeat", repeat)
    result.setdefault("measured_s", 0.0)
    write_json_atomic(result_path, result)
    return result


def reset_server_state(stack: ServerStack) -> dict[str, Any]:
    """CHECKPOINT and VACUUM ANALYZE the study's PostgreSQL databases (the PostgreSQL role's, and
    the cluster FerretDB stores its data in), so one experiment's writes (dirty pages, dead rows,
    stale statistics) are not paid for inside the next one's window."""
    import psycopg

    out: dict[str, Any] = {}
    targets = []
    if stack.postgres is not None:
        targets.append(("postgres", stack.postgres.uri))
    if stack.mongodb is not None and stack.mongodb.backend_uri:
        targets.append(("mongodb_backend", stack.mongodb.backend_uri))
    for role, dsn in targets:
        t0 = time.perf_counter()
        info: dict[str, Any] = {}
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                for statement in ("CHECKPOINT", "VACUUM ANALYZE"):
                    try:
                        conn.execute(statement)
                        info[statement] = "done"
                    except psycopg.Error as e:  # e.g. no privilege on a server given by DSN
                        info[statement] = error_text(e, 200)
        except psycopg.Error as e:
            info["error"] = error_text(e, 200)
        info["seconds"] = round(time.perf_counter() - t0, 3)
        out[role] = info
    return out


@contextmanager
def _route(p: Planned, stack: ServerStack) -> Iterator[tuple[ServerStack, dict | None]]:
    """The experiment's network path (`harness.core.network.route`, contract C4), or the stack as it is."""
    from ..core import network

    with network.route(stack, p.experiment.needs, via_proxy=getattr(p.params, "via_proxy", False),
                       rtt_ms=getattr(p.params, "rtt_ms", 0.0),
                       jitter_ms=getattr(p.params, "jitter_ms", 0.0)) as route:
        yield route.stack, route.record


def _calibrate(stack: ServerStack, profile: str, pgbench: bool, normalised: bool) -> dict[str, Any]:
    """In-run ceilings (`harness.core.calibration`, contract C3); smoke takes one short repeat, not three;
    no pgbench on servers the run may only read (`run(read_only_servers=True)`). A run whose
    experiments divide nothing by a ceiling (`normalised` False: `harness verify`) keeps them as
    context, one repeat (3 s less before and after each verify)."""
    t0 = time.perf_counter()
    try:
        from ..core import calibration

        if profile == "smoke":
            out = dict(calibration.measure(stack, repeats=1, cpu_seconds=0.25, pgbench_warmup=False,
                                           pgbench=pgbench))
        else:
            out = dict(calibration.measure(stack, repeats=calibration.REPEATS if normalised else 1,
                                           pgbench=pgbench))
    except Exception as e:  # recorded, not fatal: the experiments' own figures stand without it
        out = {"error": error_text(e, 2000)}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def run(names: list[str], profile: str = "quick", repeat: int | None = None,
        overrides: dict[str, Any] | None = None, data_dir: Path | None = None,
        on_event: Emit | None = None, python: str | None = None, placement: str = "shared",
        read_only_servers: bool = False) -> Path:
    """Run the named experiments; returns the run's directory. Raises HarnessError on bad input,
    on an unusable data directory (before any server starts) and when the run cannot be written.

    `python`: the interpreter (version or path) the workers and client processes run on, in its own
    venv (`harness.core.interpreters`); `placement`: shared | split (`harness.core.placement`);
    `read_only_servers`: the servers may be a user's (harness verify), so the run does nothing to
    them beyond its experiments' own reads (no pgbench ceiling: its table is a write)."""
    from ..core import interpreters
    from ..core import placement as placement_mod

    processes.install_signal_handlers()
    planned = plan(names, profile, overrides, repeat)
    placement_mod.check(placement)
    store.check_writable(data_dir)
    servers.check_targets()  # a bad STUDY_* URI fails here, before a run directory exists
    # venvs are built here, before any server starts and outside every measurement
    venv = interpreters.prepare([python])[0] if python else None
    prepared = {p.experiment.name: p.experiment.prepare(p.params) for p in planned
                if hasattr(p.experiment, "prepare")}
    emit = on_event or (lambda kind, info: None)
    needs = tuple(sorted({r for p in planned for r in p.experiment.needs}))
    if any(getattr(p.params, "via_proxy", False) for p in planned):
        needs += (servers.PROXY,)   # one Toxiproxy for the run, not one per repeat
    order = schedule(planned)
    pgbench = not read_only_servers
    normalised = any(p.experiment.ceiling for p in planned)   # a throughput divided by a ceiling
    writer = RunWriter(data_dir, new_run_id(profile), {
        "profile": profile, "repeat": repeat, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": sys.argv, "overrides": overrides or {},
        "experiments": {p.experiment.name: {"title": p.experiment.title, "needs": list(p.experiment.needs),
                                            "params": p.params.to_dict(), "repeats_planned": p.repeats,
                                            "version": registry.version(p.experiment.name, p.params),
                                            "status": "pending"}
                        for p in planned},
        "schedule": [[p.experiment.name, k] for p, k in order],
        "timing": {p.experiment.name: {"wall_s": 0.0, "measured_s": 0.0} for p in planned},
        "environment": environment.collect(),
        "interpreter": (venv.record() if venv else interpreters.ensure_venv(interpreters.resolve(None)).record()),
        "prepared": prepared,
        # format 3: present from the start (store.Manifest), filled in as the run goes
        "placement": None, "server_resets": [], "server_restarts": [],
    })
    emit("run_started", {"run_id": writer.run_id, "path": str(writer.path), "repeats": len(order)})
    stack = None
    t_run = time.perf_counter()
    try:
        t0 = time.perf_counter()
        with servers.provision(needs) as stack:
            writer.manifest["servers_provision_s"] = round(time.perf_counter() - t0, 2)
            writer.manifest["servers"] = environment.identify_servers(stack)
            writer.save()
            emit("servers", writer.manifest["servers"])
            emit("calibration", {"when": "before"})
            writer.manifest["calibration"] = {"before": _calibrate(stack, profile, pgbench, normalised)}
            with placement_mod.applied(stack, placement) as where:
                writer.manifest["placement"] = where
                _study(planned, order, stack, writer, emit,
                       python=venv.python if venv and venv.mode != "study" else None)
            emit("calibration", {"when": "after"})
            writer.manifest["calibration"]["after"] = _calibrate(stack, profile, pgbench, normalised)
            _keep_server_logs(stack, writer.path / "servers")
        writer.manifest["wall_s"] = round(time.perf_counter() - t_run, 2)
        _summarise(writer)
        statuses = [e["status"] for e in writer.manifest["experiments"].values()]
        status = "complete" if any(s in ("ok", "partial") for s in statuses) else "failed"
        path = writer.commit(status)
        emit("timing", {"timing": writer.manifest["timing"], "wall_s": writer.manifest["wall_s"]})
        return path
    except store.RunWriteError as e:  # a full disk...: say so, keep `latest`
        writer.abandon("incomplete", str(e))
        raise
    except BaseException as e:
        if stack is not None:
            try:
                _keep_server_logs(stack, writer.path / "servers")
            except HarnessError:
                pass
        kind = "interrupted" if isinstance(e, (KeyboardInterrupt, SystemExit)) else "failed"
        writer.abandon(kind, error_text(e, 2000))
        raise


def _study(planned: list[Planned], order: list[tuple[Planned, int]], stack: ServerStack,
           writer: RunWriter, emit: Emit, python: str | None = None) -> None:
    m = writer.manifest
    runnable = {p.experiment.name for p in planned}
    loaded_any = False
    for p in planned:  # every dataset before the first round
        name, entry = p.experiment.name, m["experiments"][p.experiment.name]
        entry["server_labels"] = {r: m["servers"].get(r, {}).get("label") for r in p.experiment.needs}
        entry["repeats"] = []
        t0 = time.perf_counter()
        try:
            entry["datasets"] = [d.ensure(stack) for d in p.experiment.datasets(p.params)]
            loaded_any |= any(d["loaded"] for d in entry["datasets"])
        except Exception as e:  # a dataset that cannot load fails this experiment, not the run
            _fail_experiment(writer, p, f"loading datasets: {error_text(e)}", emit)
            runnable.discard(name)
        m["timing"][name]["wall_s"] += time.perf_counter() - t0
        writer.save()
    if loaded_any:
        _reset(writer, stack, "after loading datasets")
    for p, k in order:
        name = p.experiment.name
        if name not in runnable:
            continue
        entry = m["experiments"][name]
        t0 = time.perf_counter()
        # A local server that died is started again (recorded), before the check: a FerretDB whose
        # PostgreSQL died still answers ping. A server given by URI fails the check, and this repeat.
        restarted = servers.restart_dead(stack)
        if restarted:
            m["server_restarts"].append({"before": f"{name} r{k}", "what": restarted})
            emit("servers_restarted", {"experiment": name, "restarted": restarted})
        dead = servers.not_answering(stack, p.experiment.needs)
        result: dict[str, Any]
        if dead:
            result = {"status": "failed", "error": dead, "measured_s": 0.0,
                      "cells": failed_cells(_known_variants(entry), dead)}
        else:
            emit("repeat_started", {"experiment": name, "repeat": k, "of": p.repeats})
            with _route(p, stack) as (route_stack, record):
                if record is not None:
                    entry["network"] = record
                result = run_repeat(p, route_stack, writer.repeat_dir(name, k), k,
                                    known_variants=_known_variants(entry), python=python)
        seconds = time.perf_counter() - t0
        entry["repeats"].append(_repeat_summary(k, result, seconds))
        m["timing"][name]["wall_s"] += seconds
        m["timing"][name]["measured_s"] += float(result.get("measured_s") or 0.0)
        _update_experiment(entry)
        if p.experiment.writes:
            _reset(writer, stack, f"after {name} r{k}")
            m["timing"][name]["wall_s"] += m["server_resets"][-1]["seconds"]
        writer.save()
        emit("repeat_finished", {"experiment": name, **entry["repeats"][-1]})


def _known_variants(entry: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in entry.get("repeats", []):
        for c in r.get("cells", []):
            if c["variant"] != "*":
                seen.setdefault(c["variant"])
    return list(seen)


def _repeat_summary(k: int, result: dict[str, Any], seconds: float) -> dict[str, Any]:
    cells = result.get("cells", [])
    out = {"repeat": k, "status": experiment_status(cells), "seconds": round(seconds, 2),
           "measured_s": round(float(result.get("measured_s") or 0.0), 3),
           "cells": [{key: c.get(key) for key in ("variant", "status", "reason", "ops", "failed_ops")}
                     for c in cells]}
    if result.get("error"):
        out["error"] = result["error"]
    return out


def _update_experiment(entry: dict[str, Any]) -> None:
    """Status, cell counts and distinct reasons of an experiment from all its repeats so far."""
    cells = [c for r in entry["repeats"] for c in r["cells"]]
    entry["status"] = experiment_status(cells)
    entry["cells"] = {s: sum(c["status"] == s for c in cells) for s in store.CELL_STATUSES}
    reasons: dict[str, None] = {}
    for c in cells:
        if c["status"] != "ok" and c.get("reason"):
            reasons.setdefault(f"{c['status']}: {c['variant']}: {str(c['reason']).splitlines()[0][:300]}")
    entry["reasons"] = list(reasons)[:5]
    if entry["status"] == "failed":
        entry["error"] = next((r.get("error") for r in reversed(entry["repeats"]) if r.get("error")),
                              entry["reasons"][0] if entry["reasons"] else None)
    else:
        entry.pop("error", None)


def _fail_experiment(writer: RunWriter, p: Planned, error: str, emit: Emit) -> None:
    entry = writer.manifest["experiments"][p.experiment.name]
    entry.update(status="failed", error=error, cells={"ok": 0, "failed": 0, "skipped": 0}, reasons=[error])
    emit("experiment_failed", {"experiment": p.experiment.name, "error": error})


def _reset(writer: RunWriter, stack: ServerStack, when: str) -> None:
    t0 = time.perf_counter()
    info = reset_server_state(stack)
    writer.manifest["server_resets"].append({"when": when, "seconds": round(time.perf_counter() - t0, 3),
                                             **info})


def _summarise(writer: RunWriter) -> None:
    """`harness.judging.summary.write(run_path)` (contract C3), if present; a failure is recorded, not fatal."""
    for entry in writer.manifest["timing"].values():
        entry["wall_s"], entry["measured_s"] = round(entry["wall_s"], 2), round(entry["measured_s"], 3)
    writer.save()  # the summary reads the manifest from disk
    try:
        from ..judging import summary

        summary.write(writer.path)
        writer.manifest["summary"] = {"path": "summary.json"}
    except Exception as e:
        writer.manifest["summary"] = {"error": error_text(e, 2000)}


def _keep_server_logs(stack: ServerStack, dest: Path) -> None:
    for server in (stack.mongodb, stack.postgres):
        if server and server.log_path and Path(server.log_path).exists():
            try:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy(server.log_path, dest / Path(server.log_path).name)
            except OSError as e:
                raise store.RunWriteError(f"could not write {dest}: {e.strerror or type(e).__name__}; the run "
                                          "is left incomplete and data/runs/latest is unchanged") from None


def timing_lines(manifest: Mapping[str, Any]) -> list[str]:
    """Per experiment wall and measured time, and the run's measured/wall ratio."""
    timing = manifest.get("timing") or {}
    lines = []
    for name, t in timing.items():
        ratio = t["measured_s"] / t["wall_s"] if t.get("wall_s") else 0.0
        lines.append(f"  {name:16} wall {t['wall_s']:8.1f} s  measured {t['measured_s']:8.1f} s  ({ratio:.0%})")
    wall = manifest.get("wall_s") or sum(t["wall_s"] for t in timing.values())
    measured = sum(t["measured_s"] for t in timing.values())
    if wall:
        lines.append(f"  {'run':16} wall {wall:8.1f} s  measured {measured:8.1f} s  ({measured / wall:.0%})")
    return lines



# -- committing a run: as the reference, or to the pool ------------------------------------------------

def promote(run_ref: str, data_dir: Path | None = None, force: bool = False) -> list[str]:
    """Make run `run_ref` the reference (`store.promote`), one line per move: first the old
    reference's summary written if it has none (history keeps only its summary), then the moves,
    then its report's figures adopted as the citable ones (`figures.adopt`) and its executed notebooks
    left out (the page holds their outputs; `harness report` executes them again). Refused, before
    anything moves, when it measured the reference's experiment versions, unless `force`."""
    new = store.open_run(run_ref, data_dir)   # by id from here: a path to it moves with it
    current = store.list_runs(data_dir, where=("reference",))
    if current and not force and store.experiment_versions(new.manifest) \
            == store.experiment_versions(store.load_manifest(Path(current[0]["path"]))):
        raise HarnessError(f"run {new.id} measured the same experiment versions as the reference "
                           f"{current[0]['run_id']}: not promoted (`harness keep {new.id}` adds it to the "
                           "pool); --force promotes it anyway")
    from ..core import figures
    from ..judging import summary
    from ..writing import report

    for d in current:
        if not d["has_summary"]:
            summary.write(Path(d["path"]))
    lines = list(store.promote(new.id, data_dir))
    reference = store.open_run(new.id, data_dir)
    if figures.is_repository_reference(reference):
        adopted = figures.adopt(reference.path / figures.RUN_FIGURES, reference.path, report.FIGURES_DIR)
        lines += adopted or [f"{reference.id} has no report figures yet: `harness report {reference.id}` "
                             f"writes them to {report.FIGURES_DIR}"]
    executed = reference.path / "report" / "notebooks"
    if executed.is_dir():   # each fact once: the report's page holds what they show
        shutil.rmtree(executed)
        lines.append(f"{reference.id}: executed notebooks left out of the reference (its report page holds them)")
    return lines


def keep(run_ref: str, data_dir: Path | None = None, force: bool = False) -> list[str]:
    """Commit run `run_ref` to history (`store.keep`), saying what it adds to the pool
    (`pooling.what_it_adds`); refused when it adds only another run of a boot already pooled
    `pooling.POOLED_ENOUGH` times, unless `force`."""
    from ..core import pooling

    run_ = store.open_run(run_ref, data_dir)
    adds = pooling.what_it_adds(run_.manifest, store.committed_manifests(data_dir))
    if not adds and not force:
        raise HarnessError(f"run {run_.id} adds only another run of boot {(store.boot_id(run_.manifest) or '?')[:8]}, "
                           f"which the pool already holds {pooling.POOLED_ENOUGH} times or more (its runs count "
                           "once between them): not kept; --force keeps it anyway")
    dest = store.keep(run_.id, data_dir)
    return [f"{dest.name} adds " + ("; ".join(adds) if adds else "another run of a boot already pooled (--force)"),
            f"{dest.name}: manifest.json.gz and summary.json.gz -> {dest} (`git add {dest}` commits it)"]
