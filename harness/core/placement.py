"""Where client and servers run: `shared` (every core for everyone) or `split` (CPU affinity).

`split` gives the servers the first half of this process's allowed cores and the client the
other half, so client CPU per request is measured without the servers competing for its cores.
It also halves the cores each side has: a server that needed both cores is slower under `split`.

Affinity is per thread on Linux, so every thread (`/proc/PID/task/*`) of every server process and
all their descendants is pinned. Processes spawned later inherit it: PostgreSQL forks a backend
per connection from the postmaster, Go's runtime (FerretDB) starts threads from pinned threads.
Go sizes GOMAXPROCS at start, so FerretDB keeps its thread count; only where they run changes.
Every setting is read back and recorded; a read-back that differs from what was set is an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from .errors import HarnessError
from .servers import ServerStack

PLACEMENTS = ("shared", "split")


def check(placement: str) -> str:
    if placement not in PLACEMENTS:
        raise HarnessError(f"--placement {placement}: choose one of {', '.join(PLACEMENTS)}")
    return placement


def allowed_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def split_cpus(cpus: Iterable[int] | None = None) -> tuple[list[int], list[int]]:
    """(server cores, client cores): the first half to the servers, the rest to the client."""
    cpus = sorted(cpus if cpus is not None else allowed_cpus())
    if len(cpus) < 2:
        raise HarnessError(f"--placement split needs at least 2 cores; this process may use {cpus}")
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def server_pids(stack: ServerStack) -> list[int]:
    """Root pids of every server process of this machine the stack knows (servers, FerretDB's
    PostgreSQL, the network proxy when there is one); a server given by a loopback URI (not started
    by the harness) is found by the process listening on its port."""
    pids: list[int] = []
    for role in ("postgres", "mongodb", "toxiproxy"):
        server = getattr(stack, role, None)
        if server is None:
            continue
        pids.extend(server.pids or listening_pids(server.uri))
        if getattr(server, "backend_uri", None):
            pids.extend(listening_pids(server.backend_uri))
    pids.extend(int(pid) for _, pid in stack.owned)
    return [p for p in dict.fromkeys(pids) if psutil.pid_exists(p)]


def listening_pids(uri: str) -> list[int]:
    """The pid listening on a loopback URI's port ([] for another host or a port nobody here owns)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri.split(",")[0])
        host, port = parts.hostname, parts.port
    except ValueError:
        return []
    if host not in ("127.0.0.1", "localhost", "::1") or port is None:
        return []
    return sorted({c.pid for c in psutil.net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid})


def _tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _tree(roots: Iterable[int]) -> list[int]:
    """Roots first, then their descendants: a child forked while we work inherits the root's mask."""
    out: list[int] = []
    for pid in roots:
        out.append(pid)
        try:
            out.extend(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return list(dict.fromkeys(out))


def pin(roots: Iterable[int], cpus: Iterable[int]) -> dict[str, list[int]]:
    """Pin every thread of `roots` and their descendants to `cpus`; returns {pid: affinity read
    back}. A thread that exits meanwhile is skipped; one that reads back differently is an error."""
    want = set(cpus)
    readback: dict[str, list[int]] = {}
    for pid in _tree(roots):
        got = None
        for _attempt in range(3):  # a thread started by a not-yet-pinned thread needs another pass
            for tid in _tids(pid):
                try:
                    os.sched_setaffinity(tid, want)
                except ProcessLookupError:
                    continue
                except PermissionError as e:
                    raise HarnessError(f"cannot set the CPU affinity of process {pid} ({e}); "
                                       "split placement needs the right to pin the servers") from None
            got = affinity(pid)
            if got is None or set(got) == want:
                break
        if got is None:
            continue
        if set(got) != want:
            raise HarnessError(f"process {pid} reads back affinity {got} after being pinned to {sorted(want)}")
        readback[str(pid)] = got
    return readback


def affinity(pid: int) -> list[int] | None:
    """A process's affinity as every one of its threads has it (None if it is gone); threads that
    disagree are reported as their union, which `pin` then flags."""
    masks = set()
    for tid in _tids(pid):
        try:
            masks.add(tuple(sorted(os.sched_getaffinity(tid))))
        except ProcessLookupError:
            continue
    if not masks:
        return None
    return sorted(set().union(*masks))


def proc_status_affinity(pid: int) -> list[int]:
    """`Cpus_allowed_list` from /proc/PID/status: the kernel's own account, independent of the
    syscall used to set it (what tests compare against)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return _parse_list(line.split(":", 1)[1].strip())
    raise HarnessError(f"/proc/{pid}/status has no Cpus_allowed_list")


def _parse_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def servers_affinity(stack: ServerStack) -> dict[str, list[int]]:
    return {str(pid): a for pid in _tree(server_pids(stack)) if (a := affinity(pid)) is not None}


def apply(stack: ServerStack, placement: str, cpus: Iterable[int] | None = None) -> dict[str, Any]:
    """Set the servers' affinity for `placement` (shared: every allowed core). Returns the record:
    placement, server and client cores, and the servers' affinity read back per pid."""
    check(placement)
    cpus = sorted(cpus if cpus is not None else allowed_cpus())
    roots = server_pids(stack)
    if placement == "split":
        server_cpus, client_cpus = split_cpus(cpus)
        if not roots:
            raise HarnessError("--placement split: the servers are not processes on this machine "
                               "(Docker or external servers): their cores cannot be set")
    else:
        server_cpus, client_cpus = cpus, cpus
    readback = pin(roots, server_cpus) if roots else {}
    return {"placement": placement, "cpus": cpus, "server_cpus": server_cpus, "client_cpus": client_cpus,
            "server_affinity": readback, "server_root_pids": roots,
            "note": ("split halves the cores each side has" if placement == "split" else
                     "client and servers share every core")}


def set_client(cpus: Iterable[int], pid: int = 0) -> list[int]:
    """Pin a client process (this one by default) before it starts threads; returns the read-back."""
    os.sched_setaffinity(pid, set(cpus))
    return sorted(os.sched_getaffinity(pid))


@contextmanager
def applied(stack: ServerStack, placement: str) -> Iterator[dict[str, Any]]:
    """For a whole run: `shared` changes nothing and records the affinities as they are; `split`
    pins the servers and this process (so the workers and clients it starts inherit the client
    cores), and restores both on exit."""
    check(placement)
    before_self = allowed_cpus()
    if placement == "shared":
        yield {"placement": "shared", "cpus": before_self, "server_cpus": before_self,
               "client_cpus": before_self, "server_affinity": servers_affinity(stack),
               "server_root_pids": server_pids(stack), "study_process_affinity": before_self,
               "note": "client and servers share every core (affinities left as they were)"}
        return
    with client_alone(stack, before_self) as record:
        record["study_process_affinity"] = record.pop("client_affinity")
        yield record


@contextmanager
def client_alone(stack: ServerStack, cpus: Iterable[int] | None = None) -> Iterator[dict[str, Any]]:
    """Split for as long as the context lasts (a whole run, `applied`; pg_models' `split` cells):
    the servers on the first half of `cpus` (default: every core this process and the servers may
    use now), this process (and every child it starts) on the other half. On exit this process and
    each server's process tree get back the affinity they had; a server started meanwhile (a
    restart) gets every core of `cpus`. Raises HarnessError when split cannot be set here (servers
    that are not processes on this machine, or fewer than 2 cores: before pinning anything; a
    server that cannot be pinned: after restoring those already pinned)."""
    before_self = allowed_cpus()
    before_roots = {pid: affinity(pid) for pid in server_pids(stack)}
    if cpus is None:
        cpus = set(before_self).union(*(set(a) for a in before_roots.values() if a))
    cpus = sorted(cpus)
    try:
        record = apply(stack, "split", cpus)   # may fail after pinning some servers: restored below
        record["client_affinity"] = set_client(record["client_cpus"])
        yield record
    finally:
        os.sched_setaffinity(0, set(before_self))
        for pid in dict.fromkeys([*before_roots, *server_pids(stack)]):
            try:
                pin([pid], before_roots.get(pid) or cpus)
            except HarnessError:
                pass  # a server that stopped meanwhile has nothing to restore
