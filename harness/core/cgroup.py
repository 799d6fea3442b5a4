"""A CPU quota for this process and its children (Linux cgroups, v1 `cpu` or v2 `cpu.max`).

Affinity gives a client whole cores; a quota gives it part of one. pg_models' split cells use it
when a whole core would let the client outrun the server on the other core: the share
is chosen before measuring, set here, and read back by the client itself (`capacity_cores`), so
the figure its analysis uses as the client's capacity is what the kernel enforced, not what was
asked for.

Kept free of heavy imports: the workload children import `capacity_cores`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROC = Path("/proc")


class QuotaError(RuntimeError):
    """No CPU quota can be set or read here (no cgroup CPU controller this process may write)."""


def _hierarchy(proc: Path = PROC) -> tuple[str, Path, str] | None:
    """(version 'v1' or 'v2', the directory of this process's CPU cgroup, the mount's directory) or
    None when no CPU controller is mounted."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
        mounts = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        paths["v2" if controllers == "" else controllers] = path
    mounted = []   # (root, mountpoint, fstype, super options) of each mount
    for line in mounts:   # fields: id parent major:minor root mountpoint options ... - fstype source super
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            mounted.append((fields[3], fields[4], tail[0], tail[2].split(",")))
    v1 = next((k for k in paths if "cpu" in k.split(",")), None)
    for root, mountpoint, fstype, supers in mounted:
        if fstype == "cgroup" and "cpu" in supers and v1 is not None:
            return "v1", _inside(Path(mountpoint), root, paths[v1]), mountpoint
    for root, mountpoint, fstype, _ in mounted:
        if fstype == "cgroup2" and "v2" in paths:
            try:
                enabled = (Path(mountpoint) / "cgroup.controllers").read_text().split()
            except OSError:
                continue
            if "cpu" in enabled:
                return "v2", _inside(Path(mountpoint), root, paths["v2"]), mountpoint
    return None


def _inside(mountpoint: Path, root: str, path: str) -> Path:
    """A cgroup path as /proc/self/cgroup gives it, under a mount of the hierarchy's `root`."""
    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return mountpoint if rel in (".", "") else mountpoint / rel


def _quota_of(version: str, directory: Path) -> float:
    """One cgroup's own quota in cores (inf when it sets none)."""
    try:
        if version == "v1":
            quota = int((directory / "cpu.cfs_quota_us").read_text())
            period = int((directory / "cpu.cfs_period_us").read_text())
        else:
            quota_text, period_text = (directory / "cpu.max").read_text().split()
            if quota_text == "max":
                return math.inf
            quota, period = int(quota_text), int(period_text)
    except (OSError, ValueError):
        return math.inf
    return quota / period if quota > 0 and period > 0 else math.inf


def quota_cores(proc: Path = PROC) -> float:
    """The CPU quota this process runs under, in cores: the tightest of its cgroup and every
    ancestor up to the hierarchy's mount (inf when none sets one, or no CPU controller is mounted)."""
    found = _hierarchy(proc)
    if found is None:
        return math.inf
    version, directory, mountpoint = found
    tightest = math.inf
    for d in (directory, *directory.parents):
        tightest = min(tightest, _quota_of(version, d))
        if str(d) == mountpoint or d == d.parent:
            break
    return tightest


def capacity_cores() -> float:
    """The CPU this process may use, in cores: its cores (affinity), capped by its CPU quota."""
    return min(float(len(os.sched_getaffinity(0))), quota_cores())


@contextmanager
def quota(cores: float, period_us: int = 10_000, proc: Path = PROC) -> Iterator[dict[str, Any]]:
    """Run this process, and every child it starts meanwhile, under a CPU quota of `cores` (a new
    cgroup below its own, which this process joins). On exit the process goes back to its cgroup
    and the new one is removed. Raises QuotaError, before changing anything, when no CPU
    controller is mounted or its cgroup cannot be made here; the record says what was set and
    what the process reads back (`capacity_cores`)."""
    if not cores > 0:
        raise QuotaError(f"a CPU quota must be positive, got {cores!r} cores")
    found = _hierarchy(proc)
    if found is None:
        raise QuotaError("no cgroup CPU controller is mounted here")
    version, home, _ = found
    group = home / f"harness-quota-{os.getpid()}"
    period_us = max(period_us, math.ceil(1000 / cores))   # the kernel's smallest quota is 1 ms: a longer period
    quota_us = round(cores * period_us)
    try:
        group.mkdir(exist_ok=True)
        if version == "v1":
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            (group / "cpu.max").write_text(f"{quota_us} {period_us}")
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as e:
        _remove(group)
        raise QuotaError(f"cannot set a CPU quota in {group} ({e.strerror or e})") from None
    try:
        yield {"cgroup": version, "path": str(group), "period_us": period_us, "quota_us": quota_us,
               "cores_set": quota_us / period_us, "cores_read_back": capacity_cores()}
    finally:
        try:
            (home / "cgroup.procs").write_text(str(os.getpid()))
        finally:
            _remove(group)


def _remove(group: Path) -> None:
    """rmdir a cgroup once its last process has left (a child may take a moment to be reaped)."""
    for _attempt in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
