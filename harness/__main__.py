"""Command line: `python -m harness list | run | study | verify | report | runs | show | compare |
history | power | findings | docs | summarise | promote | keep | servers`.

Argument parsing and calls into the floors below. Every HarnessError becomes a one-paragraph message
on stderr and exit status 2; no traceback for problems the user can fix. `compare` and `history
--changed` exit 1 when they find a difference, `docs` when a generated block is stale; `show`,
`compare`, `history` and `findings` take `--json`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click

from .core import servers, store
from .core.config import PROFILES
from .core.errors import HarnessError
from .experiments import registry


def _parse_sets(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v:
            raise click.BadParameter(f"expected NAME=VALUE (or EXPERIMENT.NAME=VALUE), got {v!r}",
                                     param_hint="--set")
        k, val = v.split("=", 1)
        out[k.strip()] = val.strip()
    return out


class _Progress:
    """Progress bar over a run's repeats, plus one line per finished or failed repeat. Given the
    schedule (`order`: experiment and repeat) and `seconds` (`study.repeat_seconds`), the bar counts
    planned seconds, not repeats: each finished repeat advances it by its experiment's typical
    repeat, so the ETA weighs a long repeat as long. Without them, `total` repeats count alike."""

    def __init__(self, total: int = 0, *, order: list[tuple[str, int]] | None = None,
                 seconds: dict[str, float] | None = None):
        from tqdm import tqdm

        self.seconds = seconds or {}
        self.left = Counter(name for name, _ in order) if order is not None else None   # repeats to go
        self.done, self.repeats = 0, len(order) if order is not None else total
        planned = sum(self.seconds.get(name, 1.0) for name, _ in order) if order is not None else total
        self.bar = tqdm(total=planned, desc="study", file=sys.stderr, leave=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")

    def _advance(self, name: str, repeats: int) -> None:
        if self.left is not None:
            repeats = min(repeats, self.left[name])
            self.left[name] -= repeats
        self.done += repeats
        self.bar.update(repeats * self.seconds.get(name, 1.0))

    def __call__(self, kind: str, info: dict) -> None:
        if kind == "run_started":
            self.bar.write(f"run {info['run_id']} (writing to {info['path']})")
        elif kind == "servers":
            for role, ident in info.items():
                self.bar.write(f"  {role}: {ident.get('label')} [{ident.get('source')}] {ident.get('uri')}")
        elif kind == "repeat_started":
            self.bar.set_description(f"{info['experiment']} r{info['repeat']} ({self.done}/{self.repeats} repeats)")
        elif kind == "repeat_finished":
            self._advance(info["experiment"], 1)
            line = (f"  {info['experiment']} r{info['repeat']}: {info['status']} in {info['seconds']} s"
                    f" ({_cell_counts(info.get('cells', []))})")
            why = info.get("error") or next((f"{c['variant']}: {c['reason']}" for c in info.get("cells", [])
                                             if c["status"] != "ok" and c.get("reason")), None)
            if why:
                line += f" -- {str(why).splitlines()[0][:300]}"
            self.bar.write(line)
        elif kind == "servers_restarted":
            for line in info["restarted"]:
                self.bar.write(f"  before {info['experiment']}: {line}")
        elif kind == "experiment_failed":   # its repeats will not run
            self._advance(info["experiment"], self.left[info["experiment"]] if self.left is not None else 0)
            self.bar.write(f"  {info['experiment']}: FAILED -- {info['error']}")

    def close(self) -> None:
        self.bar.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    """A reproducible performance study of async database access in Python.

    Runs the measurements of the study's three seed documents against real servers (local
    PostgreSQL and FerretDB by default; Docker or your own servers by URI), stores raw samples
    under data/runs/, and builds notebooks, figures and an HTML report from them.
    """


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> None:
    """List the registered experiments, the servers they need and their parameters."""
    exps = registry.all_experiments()
    committed = store.committed_manifests()
    # the committed full runs of this code: the runs a new full run would pool with across boots
    versions = {n: registry.version(n, e.params("full")) for n, e in exps.items()}
    pool = {n: store.runs_of_version(committed, n, v) for n, v in versions.items()}
    if as_json:
        click.echo(json.dumps({n: {"title": e.title, "needs": list(e.needs), "repeats": dict(e.repeats),
                                   "params": {p: e.params(p).to_dict() for p in PROFILES},
                                   "version_full": versions[n],
                                   "committed_runs_of_version": [m.get("run_id") for m in pool[n]]}
                               for n, e in exps.items()}, indent=2))
        return
    if not exps:
        click.echo("no experiments registered yet")
        return
    for name, e in exps.items():
        click.echo(f"{name:16} {e.title}  [needs: {', '.join(e.needs)}]")
        full = e.params("full").to_dict()
        click.echo(f"{'':16} parameters (full): " + ", ".join(f"{k}={v}" for k, v in full.items()))
        seed = {k: v for k, v in e.params("seed").to_dict().items() if full.get(k) != v}
        if seed:
            click.echo(f"{'':16} seed profile differs in: " + ", ".join(f"{k}={v}" for k, v in seed.items()))
        if e.in_study:
            click.echo(f"{'':16} {_version_line(versions[name], pool[name])}")


def _version_line(version: str, runs: list[store.Manifest]) -> str:
    """Which committed full runs measured this code: a new full run pools with them across boots."""
    if not runs:
        return (f"version (full) {version}: no committed run of it; a new full run starts its pool "
                f"across boots (docs/METHODS.md)")
    boots = len({store.boot_id(m) for m in runs} - {None})
    ids = ", ".join(str(m.get("run_id") or "").rsplit("-", 1)[-1] for m in runs)
    return (f"version (full) {version}: {len(runs)} committed run{'s' * (len(runs) != 1)} of it from "
            f"{boots} boot{'s' * (boots != 1)} ({ids})")


def _run(names, profile, repeat, sets, data_dir, python=None, placement="shared") -> Path:
    from .running import study

    overrides = _parse_sets(sets)
    planned = study.plan(list(names), profile, overrides, repeat)  # fail fast, before the progress bar
    servers.check_targets()
    store.check_writable(data_dir)
    progress = _Progress(order=[(p.experiment.name, k) for p, k in study.schedule(planned)],
                         seconds=study.repeat_seconds(planned))
    try:
        return study.run(list(names), profile, repeat, overrides, data_dir, on_event=progress,
                         python=python, placement=placement)
    finally:
        progress.close()


_profile = click.option("--profile", type=click.Choice(PROFILES), default="quick", show_default=True,
                        help="Sizes and repeats: smoke (tests, seconds), quick (one repeat), full (the reference: "
                             "the seeds' concurrency, shorter windows, repeated), seed (the seeds' own sizes "
                             "and windows, repeated). The README gives their durations.")
_repeat = click.option("--repeat", type=click.IntRange(min=1), default=None,
                       help="Run every experiment N times (default: each experiment's own count for the "
                            "profile, see `list`), round-robin across experiments, each in a fresh process.")
_set = click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
                    help="Override a parameter, e.g. --set duration_s=2 or --set mongo_pool.pool_size=20. "
                         "Repeatable. `list` shows the parameters.")
_data_dir = click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                         help="Where runs are stored (default: data/, or $STUDY_DATA_DIR).")
_python = click.option("--python", "pythons", multiple=True, metavar="VERSION_OR_PATH",
                       help="Run the workers and client processes on this interpreter (3.12, 3.13t, or a "
                            "path; found on PATH, under pyenv or by `uv python find`, never downloaded), "
                            "in its own venv from requirements.lock. Repeatable: one run per interpreter.")
_placement = click.option("--placement", type=click.Choice(("shared", "split")), default="shared",
                          show_default=True,
                          help="split: pin the servers to half the cores and the client to the other half "
                               "(CPU affinity, recorded); it halves the cores each side has.")


@cli.command()
@click.argument("experiments", nargs=-1, required=True)
@_profile
@_repeat
@_set
@_data_dir
@_python
@_placement
def run(experiments, profile, repeat, sets, data_dir, pythons, placement) -> None:
    """Run EXPERIMENTS (names from `list`, or `all`) and store the raw data as a new run."""
    names = list(registry.all_experiments()) if list(experiments) == ["all"] else list(experiments)
    for python in pythons or (None,):
        path = _run(names, profile, repeat, sets, data_dir, python, placement)
        _print_outcome(path)


def _print_outcome(path: Path) -> None:
    run_ = store.Run(path)
    _print_outcome_lines(run_)
    if run_.manifest["status"] != "complete":
        sys.exit(1)


@cli.command()
@click.argument("run_ref", required=False, metavar="[RUN]")
@click.option("--keep-code", is_flag=True, help="Show the notebooks' code cells in the HTML report.")
@_data_dir
def report(run_ref, keep_code, data_dir) -> None:
    """Execute the notebooks on RUN (default: latest) and export the HTML report into it."""
    run_ = store.open_run(run_ref, data_dir)   # a wrong RUN is said before the notebook stack loads
    from .writing import report as report_mod

    out = report_mod.build(run_, keep_code=keep_code)
    click.echo(f"report: {out}")
    click.echo(f"figures: {report_mod.figures_dir(run_)}")


@cli.command("study")
@_profile
@_repeat
@_set
@_data_dir
@click.option("--keep-code", is_flag=True, help="Show code cells in the HTML report.")
@_python
@_placement
def study_cmd(profile, repeat, sets, data_dir, keep_code, pythons, placement) -> None:
    """The main job: provision servers, run every experiment of the study, build the report."""
    from .writing import report as report_mod

    names = [n for n, e in registry.all_experiments().items() if e.in_study]
    if not names:
        raise HarnessError("no experiments registered yet")
    for python in pythons or (None,):
        path = _run(names, profile, repeat, sets, data_dir, python, placement)
        run_ = store.Run(path)
        _print_outcome_lines(run_)
        out = report_mod.build(run_, keep_code=keep_code)
        click.echo(f"report: {out}")
        click.echo(f"figures: {report_mod.figures_dir(run_)} (`harness promote {run_.id}` makes them "
                   "the committed figures/)")


@cli.command("verify")
@click.argument("workload", type=click.Path(path_type=Path), metavar="WORKLOAD.toml")
@click.option("--confirm-host", "confirm_hosts", multiple=True, metavar="HOST",
              help="Allow the load to reach HOST, a target that is not on loopback. Repeatable.")
@_repeat
@_data_dir
@click.option("--no-report", is_flag=True, help="Store the run without building its report page.")
@click.option("--trust-function", "trusted_functions", multiple=True, metavar="NAME",
              help="PostgreSQL: run a function that builds SQL at run time (EXECUTE), without walking its body. "
                   "Repeatable.")
@click.option("--writable-role-ok", is_flag=True,
              help="PostgreSQL: connect as a role that can write, on a server that is not the study's own.")
@click.option("--idle-target", is_flag=True,
              help="PostgreSQL: nothing else writes to the target, so a changed row counter stops the run.")
def verify_cmd(workload, confirm_hosts, repeat, data_dir, no_report, trusted_functions, writable_role_ok,
               idle_target) -> None:
    """Run the seeds' "Verify" checks on your own database and queries (a workload file: see
    examples/workloads/) and build a one-page decision report."""
    from .experiments.verify import analysis as verify_analysis
    from .running import verify
    from .writing import report as report_mod

    permissions = verify.Permissions(tuple(trusted_functions), writable_role_ok, idle_target)
    w, overrides = verify.prepare(workload, tuple(confirm_hosts), data_dir, permissions)   # every input error first
    progress = _Progress(total=repeat or w.load.repeats)
    try:
        path = verify.execute(w, overrides, data_dir=data_dir, repeat=repeat, on_event=progress)
    finally:
        progress.close()
    run_ = store.Run(path)
    _print_outcome_lines(run_)
    for line in verify_analysis.guard_lines(run_):
        click.echo(line)
    if run_.manifest["status"] == "complete":
        for line in verify.verdict_lines(run_):
            click.echo(line)
    if not no_report:
        click.echo(f"report: {report_mod.build(run_)}")
    if run_.manifest["status"] != "complete":
        sys.exit(1)


def _cell_counts(cells: list[dict] | dict) -> str:
    counts = cells if isinstance(cells, dict) else {s: sum(c["status"] == s for c in cells)
                                                    for s in ("ok", "failed", "skipped")}
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "skipped"))


def _print_outcome_lines(run_: store.Run) -> None:
    from .running.study import timing_lines

    for name, e in run_.experiments.items():
        click.echo(f"{name}: {e.get('status')} (cells: {_cell_counts(e.get('cells', {}))})")
        for reason in e.get("reasons") or ([e["error"]] if e.get("error") else []):
            click.echo(f"    {str(reason).splitlines()[0][:300]}")
    if run_.manifest.get("timing"):
        click.echo("time (wall, inside measured windows):")
        for line in timing_lines(run_.manifest):
            click.echo(line)
    from .judging.summary import stability_line

    unstable = stability_line(run_)
    if unstable:
        click.echo(unstable)
    flag = " (with failures)" if run_.manifest.get("has_failures") else ""
    click.echo(f"run {run_.id}: {run_.manifest['status']}{flag} -> {run_.path}")


@cli.command("compare")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--json", "as_json", is_flag=True, help="Print the runs, their verdicts and those that moved as JSON.")
@_data_dir
def compare_cmd(run_a, run_b, as_json, data_dir) -> None:
    """Headline figures of RUN_A and RUN_B side by side: absolute and normalised by each run's
    in-run ceiling, with 95% intervals, CV and repeats; every piece of metadata on which the runs
    differ (interpreter, lock hash, drivers, servers, experiment versions, machine, placement) and
    which experiments that makes incomparable; the verdicts that moved. From summary.json and
    manifest.json alone (runs by path, id, a unique part of one, or `latest`).

    Exit status: 0 when every verdict is the same and every experiment comparable, 1 when a verdict
    moved or an experiment cannot be compared, 2 on an error."""
    a, b = store.open_run(run_a, data_dir), store.open_run(run_b, data_dir)
    from .reading import compare

    if as_json:
        outcome = compare.compare_json(a, b)
        click.echo(json.dumps(outcome, indent=2, default=str))
    else:
        text, outcome = compare.compare_report(a, b)
        click.echo(text)
    if compare.differ(outcome):
        sys.exit(1)


@cli.command("show")
@click.argument("run_ref", metavar="RUN")
@click.option("--experiment", default=None, help="Only this experiment's figures and bottlenecks.")
@click.option("--json", "as_json", is_flag=True, help="Print the run's headline figures and verdicts as JSON.")
@_data_dir
def show_cmd(run_ref, experiment, as_json, data_dir) -> None:
    """Print a stored run from its summary.json and manifest.json: headline figures with interval, CV
    and stability warnings, verdicts per seed, bottlenecks, the machine and servers (RUN: a path, an
    id or a unique part of one, or `latest`)."""
    run_ = store.open_run(run_ref, data_dir)
    from .reading import show

    if as_json:
        if experiment:
            raise click.UsageError("--json prints the whole run: drop --experiment")
        click.echo(json.dumps(show.show_json(run_), indent=2, default=str))
        return
    click.echo(show.show_text(run_, experiment))


@cli.command("history")
@click.option("--figure", default=None, metavar="TEXT", help="Only figures whose name contains TEXT.")
@click.option("--changed", is_flag=True,
              help="Only figures with a change beyond the runs' own spread; exit 1 when there is one.")
@click.option("--all", "include_new", is_flag=True, help="Add the complete runs of data/runs.")
@click.option("--lessons", is_flag=True, help="The findings table's lessons instead: figure and verdict per run.")
@click.option("--pool-by", type=click.Choice(["version", "rules"]), default="version", show_default=True,
              help="With --lessons: pool runs of the same experiment versions and rules, or of the same rules only.")
@click.option("--processor", default=None, metavar="TEXT",
              help="Only runs whose CPU model contains TEXT (e.g. Intel, AMD): lessons pooled over one kind of CPU.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the runs, their verdicts and the figures that changed as JSON.")
@_data_dir
def history_cmd(figure, changed, include_new, lessons, pool_by, processor, as_json, data_dir) -> None:
    """Headline figures across the committed runs (data/reference, data/history), by commit and
    machine, absolute and normalised with intervals; flags a change beyond the runs' own spread.
    --lessons: the lessons across the runs instead, flagging verdicts that moved.

    Exit status: 0, or 1 with --changed when a figure changed beyond the runs' spread; 2 on an error."""
    from .reading import history

    if lessons and (figure or changed):
        raise click.UsageError("--lessons shows the lessons only: drop --figure and --changed")
    if as_json:
        if lessons:
            raise click.UsageError("--json gives every run's verdicts already: drop --lessons")
        outcome = history.history_json(data_dir, include_new=include_new, figure=figure, processor=processor)
        click.echo(json.dumps(outcome, indent=2, default=str))
        n_changed = len(outcome["changed"])
    else:
        text, n_changed = history.history_report(data_dir, include_new=include_new, figure=figure,
                                                 changed_only=changed, lessons=lessons, pool_by=pool_by,
                                                 processor=processor)
        click.echo(text)
    if changed and n_changed:
        sys.exit(1)


@cli.command("power")
@click.option("--write", "write_doc", is_flag=True, help="Also write the table to docs/POWER.md.")
@click.option("--processor", default=None, metavar="TEXT",
              help="Plan from the runs on one kind of processor only (CPU model or kind contains TEXT, "
                   "e.g. 'Intel Xeon', 'AMD').")
def power_cmd(write_doc, processor) -> None:
    """The repeats each lesson's primary row needs to be decided (the rule in harness/core/power.py),
    from the committed full runs' spread, beside the repeats the full profile plans."""
    from .core import pooling
    from .reading import power

    if write_doc and processor:
        raise click.UsageError("docs/POWER.md plans from every processor's runs: drop --write or --processor")
    if write_doc:
        runs = pooling.committed_runs()   # read once: the plans and the check use the same runs
        tables = power.by_processor(runs)
        click.echo(power.power_text(tables[power.ALL_PROCESSORS]))
        click.echo(f"written: {power.write_doc(tables, power.forecast_checks(runs))}")
        return
    click.echo(power.power_text(power.power_table(processor=processor)))


@cli.command("findings")
@click.argument("run_ref", metavar="[RUN]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the lessons as JSON.")
@_data_dir
def findings_cmd(run_ref, as_json, data_dir) -> None:
    """The twelve lessons as RUN judged them (default: the reference), each with what to do, the
    figure beside the seed's, and the lesson pooled across the committed runs (the README's table)."""
    from .core import pooling
    from .judging import answer, findings

    run_ = store.open_run(run_ref, data_dir) if run_ref else None
    if run_ is None:
        ref = findings.reference_summary(data_dir)
        if ref is None:
            raise HarnessError("no reference run under data/reference: name a RUN")
        run_ = store.open_run(str(ref.parent), data_dir)
    summary = store.load_summary(run_.path)
    runs = pooling.committed_runs(data_dir=data_dir)
    rows = answer.rows(summary, findings.committed_pooled(runs=runs), answer.kinds_pooled(runs))
    if as_json:
        click.echo(json.dumps({"run_id": run_.id, "lessons": rows}, indent=2, default=str))
        return
    click.echo(f"{run_.id}: {len(rows)} lessons")
    for r in rows:
        text = {k: str(r[k] or "—").replace("**", "") for k in ("here", "across", "do")}
        click.echo(f"{r['id']:14} {r['lesson']}\n    this run: {text['here']}\n"
                   f"    across machines: {text['across']}\n    do: {text['do']}")


@cli.command("docs")
@click.option("--write", "write_docs", is_flag=True, help="Rewrite the blocks instead of checking them.")
def docs_cmd(write_docs) -> None:
    """Check the generated blocks of README.md and docs/RESULTS.md against the committed runs (exit 1
    naming each block that differs), or rewrite them with --write."""
    from .writing import generated

    stale = generated.check_or_write(write_docs)
    if write_docs:
        click.echo("written: README.md and docs/RESULTS.md's generated blocks")
        return
    for line in stale:
        click.echo(f"differs: {line} (`harness docs --write` regenerates it)", err=True)
    if stale:
        sys.exit(1)
    click.echo("every generated block matches the committed runs")


@cli.command("summarise")
@click.argument("run_ref", metavar="RUN")
@_data_dir
def summarise_cmd(run_ref, data_dir) -> None:
    """Re-judge RUN from its raw data and rewrite its summary.json (atomically)."""
    run_ = store.open_run(run_ref, data_dir)
    from .judging import summary

    if not run_.has_raw_data():
        raise HarnessError(f"run {run_.id} has no raw data ({run_.path} keeps only its manifest and summary): "
                           "nothing to re-judge")
    out = summary.write(run_.path)
    click.echo(f"{run_.path / 'summary.json'}: {len(out.get('metrics', []))} figures, "
               f"{len(out.get('claims', []))} claim rows (summary version {out.get('summary_version')})")


@cli.command("promote")
@click.argument("run_ref", metavar="RUN")
@click.option("--force", is_flag=True, help="Promote it even if its experiment versions are the reference's.")
@_data_dir
def promote_cmd(run_ref, data_dir, force) -> None:
    """Make RUN (a complete run of data/runs) the reference: the current reference's manifest and
    summary go to data/history (its raw data to data/runs), RUN moves to data/reference. Only a run
    whose experiment versions differ from the reference's is promoted without --force: the
    reference's raw data serve the report as long as its code is current (docs/METHODS.md)."""
    from .running import study

    for line in study.promote(run_ref, data_dir, force):
        click.echo(line)


@cli.command("keep")
@click.argument("run_ref", metavar="RUN")
@click.option("--force", is_flag=True, help="Keep it even if it only adds another run of a boot already pooled twice.")
@_data_dir
def keep_cmd(run_ref, data_dir, force) -> None:
    """Commit RUN (a complete run of data/runs) to history: its manifest and summary are copied to
    data/history/<id>/, where `history --lessons` and the README's pooled column read it. Says what
    RUN adds to the pool (a new machine, a new kind of processor, new experiment versions); a run
    that only adds another run of a boot the pool already holds twice needs --force."""
    from .running import study

    for line in study.keep(run_ref, data_dir, force):
        click.echo(line)


@cli.command("runs")
@_data_dir
def runs_cmd(data_dir) -> None:
    """List stored runs (newest last) and where they live (reference, history, runs): status, and per
    experiment its status, cells and why."""
    for r in store.list_runs(data_dir):
        flag = " (with failures)" if r.get("has_failures") else ""
        click.echo(f"{r['run_id']:40} {r['where']:9} {r['status'] + flag:26} {r['profile'] or '':6}"
                   + ("" if r.get("has_summary") else " (no summary.json)"))
        for name, e in r["experiments"].items():
            click.echo(f"    {name:16} {e['status'] or '?':9} {_cell_counts(e.get('cells') or {})}")
            for reason in e.get("reasons", [])[:3]:
                click.echo(f"        {str(reason).splitlines()[0][:200]}")


@cli.group("servers")
def servers_group() -> None:
    """Start, inspect or stop a server stack that later commands reuse."""


@servers_group.command("up")
def servers_up() -> None:
    """Start the servers in the background (until `servers down`) and print where they listen."""
    stack = servers.servers_up()
    click.echo(json.dumps(stack.public(), indent=2))


@servers_group.command("status")
@click.option("--json", "as_json", is_flag=True,
              help="Print {mongodb_uri, postgres_dsn, toxiproxy: {api, version}, ...} as JSON.")
def servers_status(as_json) -> None:
    """Show the stack `servers up` started, if it is running."""
    stack = servers.running_stack()
    if stack is None:
        if as_json:
            click.echo(json.dumps({"running": False}))
        else:
            click.echo("no servers running (start them with `python -m harness servers up`)")
        sys.exit(1)
    click.echo(json.dumps({"running": True, **stack.public()}, indent=None if as_json else 2))


@servers_group.command("down")
def servers_down() -> None:
    """Stop the stack `servers up` started."""
    pids = servers.servers_down()
    click.echo(f"stopped {len(pids)} process(es)" if pids else "no servers were running")


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except HarnessError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted: the run was left in data/runs/.incomplete-*, `latest` is unchanged",
                   err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
