"""One run end to end: validate, provision, load, measure (each repeat in a worker), store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import environment, processes, registry, servers
from .errors import HarnessError
from .experiments.base import Experiment, Params
from .servers import ServerStack
from .store import RunWriter, new_run_id, write_json_atomic


@dataclass
class Planned:
    experiment: Experiment
    params: Params


def plan(names: list[str], profile: str, overrides: dict[str, Any] | None = None) -> list[Planned]:
    """Resolve names and parameters before anything starts, so bad input fails in milliseconds.

    `overrides` keys may be `param` (applied to every experiment that has it) or
    `experiment.param` (applied to that experiment only).
    """
    if not names:
        raise HarnessError("no experiment named; `python -m harness list` shows them")
    exps = [registry.get(n) for n in dict.fromkeys(names)]
    overrides = overrides or {}
    for key in overrides:
        target = key.split(".", 1)[0] if "." in key else None
        if target is not None and target not in {e.name for e in exps}:
            raise HarnessError(f"--set {key}: {target!r} is not among the experiments of this run")
        if target is None and not any(key in e.params_type.__dataclass_fields__ for e in exps):
            raise HarnessError(f"--set {key}: no experiment of this run has a parameter {key!r}")
    planned = []
    for e in exps:
        mine = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(f"{e.name}.")}
        shared = {k: v for k, v in overrides.items()
                  if "." not in k and k in e.params_type.__dataclass_fields__}
        try:
            planned.append(Planned(e, e.params(profile, {**shared, **mine})))
        except HarnessError as err:
            raise HarnessError(f"{e.name}: {err}") from None
    return planned


def run_repeat(p: Planned, stack: ServerStack, out_dir: Path, repeat: int, profile: str) -> dict:
    """One repeat in a fresh worker process, bounded by the experiment's timeout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {"experiment": p.experiment.name, "params": p.params.to_dict(), "profile": profile,
            "servers": stack.to_json(), "out_dir": str(out_dir), "repeat": repeat}
    spec_path = out_dir / ".spec.json"  # holds un-redacted URIs: removed after the worker ends
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = processes.start(f"worker:{p.experiment.name}", [sys.executable, "-m", "harness.worker",
                                                          str(spec_path)],
                           out_dir / "worker.log", env=env, cwd=Path(__file__).resolve().parent.parent)
    timed_out = False
    try:
        proc.popen.wait(timeout=p.params.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        proc.stop()
        spec_path.unlink(missing_ok=True)
    result_path = out_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    if timed_out:
        result.update(status="failed", error=f"timed out after {p.params.timeout_s:g} s "
                                             f"(parameter timeout_s)")
    elif not result:
        result = {"status": "failed",
                  "error": f"worker exited with code {proc.poll()} before recording a result:\n"
                           f"{proc.log_tail(15)}"}
    result.setdefault("experiment", p.experiment.name)
    result.setdefault("repeat", repeat)
    write_json_atomic(result_path, result)
    return result


def _servers_alive(stack: ServerStack, needs: tuple[str, ...]) -> str | None:
    try:
        if "mongodb" in needs:
            servers.check_mongodb(stack.mongodb_uri, "MongoDB server")
        if "postgres" in needs:
            servers.check_postgres(stack.postgres_dsn, "PostgreSQL server")
    except HarnessError as e:
        return str(e)
    return None


def run(names: list[str], profile: str = "quick", repeat: int = 1,
        overrides: dict[str, Any] | None = None, data_dir: Path | None = None,
        on_event: Callable[[str, dict], None] | None = None) -> Path:
    """Run the named experiments; returns the run's directory. Raises HarnessError on bad input."""
    if repeat < 1:
        raise HarnessError(f"--repeat must be at least 1, got {repeat}")
    planned = plan(names, profile, overrides)
    emit = on_event or (lambda kind, info: None)
    needs = tuple(sorted({r for p in planned for r in p.experiment.needs}))
    writer = RunWriter(data_dir, new_run_id(profile), {
        "profile": profile, "repeat": repeat, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": sys.argv, "overrides": overrides or {},
        "experiments": {p.experiment.name: {"title": p.experiment.title, "needs": list(p.experiment.needs),
                                            "params": p.params.to_dict(), "status": "pending"}
                        for p in planned},
        "environment": environment.collect(),
    })
    emit("run_started", {"run_id": writer.run_id, "path": str(writer.path)})
    stack = None
    try:
        t0 = time.perf_counter()
        with servers.provision(needs) as stack:
            writer.manifest["servers_provision_s"] = round(time.perf_counter() - t0, 2)
            writer.manifest["servers"] = environment.identify_servers(stack)
            writer.save()
            emit("servers", writer.manifest["servers"])
            for p in planned:
                _run_experiment(p, stack, writer, repeat, profile, emit)
            _keep_server_logs(stack, writer.path / "servers")
        statuses = [e["status"] for e in writer.manifest["experiments"].values()]
        status = "complete" if any(s in ("ok", "partial") for s in statuses) else "failed"
        return writer.commit(status)
    except BaseException as e:
        if stack is not None:
            _keep_server_logs(stack, writer.path / "servers")
        kind = "interrupted" if isinstance(e, (KeyboardInterrupt, SystemExit)) else "failed"
        writer.abandon(kind, f"{type(e).__name__}: {e}")
        raise


def _run_experiment(p: Planned, stack: ServerStack, writer: RunWriter, repeat: int, profile: str,
                    emit: Callable[[str, dict], None]) -> None:
    name = p.experiment.name
    entry = writer.manifest["experiments"][name]
    entry["server_labels"] = {r: writer.manifest["servers"].get(r, {}).get("label") for r in p.experiment.needs}
    dead = _servers_alive(stack, p.experiment.needs)
    if dead:
        entry.update(status="failed", error=dead)
        writer.save()
        emit("experiment_failed", {"experiment": name, "error": dead})
        return
    try:
        entry["datasets"] = [d.ensure(stack) for d in p.experiment.datasets(p.params)]
    except Exception as e:  # a dataset that cannot load fails this experiment, not the run
        entry.update(status="failed", error=f"loading datasets: {type(e).__name__}: {e}")
        writer.save()
        emit("experiment_failed", {"experiment": name, "error": entry["error"]})
        return
    entry["repeats"] = []
    for k in range(repeat):
        emit("repeat_started", {"experiment": name, "repeat": k, "of": repeat})
        t0 = time.perf_counter()
        result = run_repeat(p, stack, writer.repeat_dir(name, k), k, profile)
        summary = {"repeat": k, "status": result["status"], "seconds": round(time.perf_counter() - t0, 2)}
        if result.get("error"):
            summary["error"] = result["error"]
        if result.get("operation_errors"):
            summary["operation_errors"] = (f"{result['operation_errors']} of {result['operations']} "
                                           f"operations failed, first: {result.get('first_operation_error')}")
        entry["repeats"].append(summary)
        writer.save()
        emit("repeat_finished", {"experiment": name, **summary})
    oks = sum(r["status"] == "ok" for r in entry["repeats"])
    entry["status"] = "ok" if oks == repeat else ("partial" if oks else "failed")
    if entry["status"] == "failed":
        entry["error"] = entry["repeats"][-1].get("error")
    writer.save()


def _keep_server_logs(stack: ServerStack, dest: Path) -> None:
    for server in (stack.mongodb, stack.postgres):
        if server and server.log_path and Path(server.log_path).exists():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(server.log_path, dest / Path(server.log_path).name)
