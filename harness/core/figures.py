"""Saving figures so that an article can cite them and anyone can regenerate them.

`save_figure()` writes `<figures_dir>/<name>.<fmt>` for each format, stamps the run's provenance
(run id, servers, machine, git sha) on the figure itself, and records in
`<figures_dir>/manifest.json` which run, raw data files, notebook, parameters and code version
produced it. Names are stable (`mongo_pool_latency`, not `figure3`), so a rerun replaces a figure
in place and its citation stays valid.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import config
from .store import Run, write_json_atomic

DEFAULT_FORMATS = ("png", "svg", "pdf")
UNDATED = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}
RUN_FIGURES = Path("report") / "figures"       # any run's figures but the reference's, inside the run


def is_repository_reference(run: Run) -> bool:
    """Whether `run` is the reference run of the repository's own data/ (not of another data dir)."""
    return run.path.resolve().parent == (config.REPO_ROOT / "data" / "reference").resolve()


def default_dir(run: Run) -> Path:
    """Where `run`'s figures go when nobody says: $STUDY_FIGURES_DIR, else the committed figures/ for
    the repository's reference run, else `<run>/report/figures/`. So a report or a notebook opened
    on a smoke or an old run never replaces the citable figures; `harness promote` copies a new
    reference's figures into figures/ (`adopt`)."""
    chosen = config.figures_override()
    if chosen is None:
        chosen = config.CITABLE_FIGURES if is_repository_reference(run) else run.path / RUN_FIGURES
    return Path(chosen).expanduser().resolve()


def provenance(run: Run, roles: Iterable[str] = ("mongodb", "postgres")) -> str:
    """One line naming what produced a run: servers, cores, Python, run id and git sha."""
    env = run.manifest.get("environment", {})
    machine = env.get("machine", {})
    git = env.get("git", {})
    servers = [run.server_label(r) for r in roles if r in run.manifest.get("servers", {})]
    sha = (git.get("sha") or "unknown")[:10] + ("+dirty" if git.get("dirty") else "")
    return (f"{'; '.join(servers) or 'no server'} | {machine.get('cpu_count_logical', '?')} cores, "
            f"Python {env.get('python', {}).get('version', '?')} | run {run.id} ({run.manifest.get('profile')}) "
            f"| git {sha}")


def parse_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    bad = [f for f in items if f not in ("png", "svg", "pdf")]
    if bad or not items:
        raise ValueError(f"figure formats must be among png, svg, pdf; got {formats!r}")
    return tuple(items)


def save_figure(fig, name: str, run: Run, *, notebook: str, experiments: Iterable[str],
                figures_dir: str | Path | None, formats: str | Iterable[str] = DEFAULT_FORMATS,
                parameters: dict[str, Any] | None = None, roles: Iterable[str] = ("mongodb", "postgres"),
                stamp: bool = True) -> list[Path]:
    """Save `fig` under a stable `name` and record its provenance. Returns the written paths.
    An empty `figures_dir` (a notebook's default) means `default_dir(run)`."""
    import matplotlib  # here, not at the top: the command line imports this module without drawing

    figures_dir = Path(figures_dir) if figures_dir else default_dir(run)
    figures_dir.mkdir(parents=True, exist_ok=True)
    experiments = list(experiments)
    if stamp:
        fig.text(0.005, 0.003, provenance(run, roles), fontsize=6, color="0.35", ha="left", va="bottom")
    written = []
    for fmt in parse_formats(formats):
        path = figures_dir / f"{name}.{fmt}"
        # No date and no random ids in the file: the same run redrawn gives the same bytes, so
        # rebuilding a report leaves the committed figures unchanged (the date is in manifest.json).
        with matplotlib.rc_context({"svg.hashsalt": name}):
            fig.savefig(path, dpi=150 if fmt == "png" else None, bbox_inches="tight",
                        metadata=UNDATED.get(fmt))
        written.append(path)
    raw = sorted(str(p.relative_to(run.path)) for e in experiments for _, d in run.repeat_dirs(e)
                 for p in d.glob("*.parquet"))
    git = run.manifest.get("environment", {}).get("git", {})
    entry = {
        "files": [p.name for p in written],
        "run_id": run.id,
        "run_path": os.path.relpath(run.path, figures_dir.resolve()) if run.path.is_absolute() else str(run.path),
        "profile": run.manifest.get("profile"),
        "experiments": experiments,
        "raw_data": raw,
        "servers": {r: run.server_label(r) for r in roles if r in run.manifest.get("servers", {})},
        "notebook": notebook,
        "parameters": parameters or {},
        "git_sha": git.get("sha"),
        "git_dirty": git.get("dirty"),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest_path = figures_dir / "manifest.json"
    with _locked(figures_dir):   # the report runs notebooks side by side, each adding its figures
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        manifest.setdefault("format_version", 1)
        manifest.setdefault("figures", {})[name] = entry
        write_json_atomic(manifest_path, manifest)
    return written


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` across processes (flock on the directory itself, so no
    lock file is left beside the figures)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock


def adopt(source_dir: str | Path, run_path: Path, figures_dir: str | Path) -> list[str]:
    """Make the figures a report saved in `source_dir` (`<run>/report/figures`) the citable set in
    `figures_dir`: copy every file its manifest names, drop the files the old set named that the
    new one lacks, write a manifest whose entries point at `run_path` (the run's home after
    `harness promote`), and only then remove `source_dir`, so the committed run does not hold the
    same figures twice (its report embeds its own). Returns one line per change; nothing when
    `source_dir` has no manifest."""
    source_dir, figures_dir = Path(source_dir), Path(figures_dir)
    source = source_dir / "manifest.json"
    if not source.is_file():
        return []
    new = json.loads(source.read_text())
    figures_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = figures_dir / "manifest.json"
    with _locked(figures_dir):
        old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        keep = {f for e in new.get("figures", {}).values() for f in e["files"]}
        gone = sorted({f for e in old.get("figures", {}).values() for f in e["files"]} - keep)
        for name in gone:
            (figures_dir / name).unlink(missing_ok=True)
        for name in sorted(keep):
            shutil.copy2(source_dir / name, figures_dir / name)
        rel = os.path.relpath(Path(run_path).resolve(), figures_dir.resolve())
        for entry in new.get("figures", {}).values():
            entry["run_path"] = rel
        write_json_atomic(manifest_path, new)
    shutil.rmtree(source_dir)
    return ([f"{len(new.get('figures', {}))} figures ({len(keep)} files) -> {figures_dir}"]
            + ([f"{len(gone)} files of the old set removed from {figures_dir}"] if gone else []))
