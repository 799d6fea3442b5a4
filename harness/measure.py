"""The measurement toolkit every experiment family stands on (ground floor: imports nothing above it).

- `Window`: wall time, this process's CPU time and its run-queue wait of one measured window;
- `thread_waits()`/`waited_s()`: how long a process's threads were runnable but waiting for a core
  (Linux schedstat): the CPU a client wanted and did not get on a shared machine;
- `TreeCPU`: CPU seconds of a process tree: a root and its descendants, including descendants that
  exited and were reaped by a member (the kernel moves their CPU into the reaper's `children_*`
  times). A PostgreSQL server is `TreeCPU(postmaster_pid)`; a client is `TreeCPU(os.getpid())`;
- `CPUSampler`: cumulative CPU of several roles' process trees, sampled in a thread over time;
- `machine_busy_s()`: busy CPU seconds of the whole machine (every process, all cores);
- `find_postmaster()`: the pid of a local PostgreSQL server's postmaster;
- `ProcessTimes`: one process's CPU times and run-queue wait, keeping the last reading once it exits;
- `completions_in_window()`: the one definition of a window's throughput count (`window_completed()`
  reads it from a stored window row, old runs included);
- `error_text()`: the one way to turn an exception into the short text stored with a failed row.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def error_text(e: BaseException, limit: int = 300) -> str:
    """`TypeName: message`, cut at `limit` characters (just the type name if there is no message)."""
    msg = str(e).strip()
    return (f"{type(e).__name__}: {msg}" if msg else type(e).__name__)[:limit]


# How a window row's throughput count was taken (`window_completed`): the one definition, or the
# count of old runs that predate it (requests that both started and ended inside the window).
RPS_DEFINITION = "ended in window"
RPS_DEFINITION_OLD = "started and ended in window (old run)"


def completions_in_window(end_times: Any, ok: Any, open_at: float, close_at: float) -> int:
    """Throughput's numerator, the same for every family: successful operations whose END lies in
    [open_at, close_at], wherever they started. Divided by the window's wall time it is the
    throughput.

    Counting only operations that also started inside the window loses, in a closed loop of N
    clients, up to N completions per window (those in flight when it opened): ~N/T per second.
    Latency percentiles are another matter: they use the operations that STARTED inside the window,
    so that no warm-up operation counts."""
    return sum(1 for end, good in zip(end_times, ok, strict=True)
               if good and open_at <= end <= close_at)


def window_completed(row: Any) -> tuple[int, str]:
    """A stored window row's throughput count and its definition: `completed` where the run
    recorded it, else `ops` (old runs: operations that started and ended inside the window)."""
    completed = row.get("completed", math.nan)
    if completed is None or completed != completed:  # missing column, or NaN beside newer rows
        return int(row["ops"]), RPS_DEFINITION_OLD
    return int(completed), RPS_DEFINITION


class Window:
    """A measured window: wall time, this process's CPU time and its threads' run-queue wait
    (`cpu_wait_s`, see `thread_waits`) between `open()` and `close()`.

    Used as a context manager by experiments; a monitor thread that must not block a saturated
    event loop calls `open()`/`close()` itself.
    """

    def __init__(self, variant: str, fields: dict[str, Any] | None = None):
        self.variant = variant
        self.fields = dict(fields or {})
        self.ops = 0           # set by the experiment: operations completed inside the window
        self.t0 = 0.0          # perf_counter() at open; samples' start_s are relative to it
        self.wall_s = self.cpu_s = self.cpu_user_s = self.cpu_system_s = self.cpu_wait_s = float("nan")

    def open(self) -> Window:
        self._wait0 = thread_waits()
        self._proc = psutil.Process()
        self._cpu0 = self._proc.cpu_times()
        self._pt0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def close(self) -> None:
        self.wall_s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self._pt0
        cpu1 = self._proc.cpu_times()
        self.cpu_user_s = cpu1.user - self._cpu0.user
        self.cpu_system_s = cpu1.system - self._cpu0.system
        self.cpu_wait_s = waited_s(self._wait0, thread_waits())

    @property
    def close_at(self) -> float:
        """perf_counter() when the window closed."""
        return self.t0 + self.wall_s

    def __enter__(self) -> Window:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def row(self) -> dict[str, Any]:
        return {"variant": self.variant, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
                "cpu_user_s": self.cpu_user_s, "cpu_system_s": self.cpu_system_s,
                "cpu_wait_s": self.cpu_wait_s, "ops": self.ops, **self.fields}


def thread_waits(pid: int | str = "self") -> dict[str, int]:
    """Nanoseconds each thread of `pid` has so far spent runnable but waiting for a core: the second
    field of Linux's /proc/<pid>/task/<tid>/schedstat. psutil does not read it. {} where the
    kernel does not expose it (another OS, or the process is gone).

    CPU time says how much a thread ran; this says how much more it would have run had a core been
    free. A loop thread that ran 65% of a window and waited 35% was never idle: on its own core it
    would have been saturated."""
    out: dict[str, int] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out[task.name] = int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread exited between listing and reading
    return out


def waited_s(before: dict[str, int], after: dict[str, int]) -> float:
    """Run-queue wait (s) between two `thread_waits` reads, over the threads alive at the second:
    one started in between counts from zero; one that exited in between is lost. NaN when either
    read found nothing."""
    if not before or not after:
        return math.nan
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


class TreeCPU:
    """CPU seconds (user + system) of a process tree: `root_pid` and every descendant.

    Descendants that exit between two reads still count: whoever reaps them (the root, for
    PostgreSQL's backends) has their CPU added to its `children_user`/`children_system`, which are
    read for every member. Descendants that start between two reads count from zero, as they should.
    `available` is False (and `read()` NaN) when the root is not a readable local process.
    """

    def __init__(self, root_pid: int | None):
        self.pid = root_pid
        self.available = False
        self.source = "none"
        self.processes = 0       # members seen by the last read()
        if root_pid:
            try:
                psutil.Process(root_pid).cpu_times()
                self.available = True
                self.source = "process tree"
            except (psutil.Error, OSError):
                self.source = f"pid {root_pid} not readable"

    def read(self) -> float:
        if not self.available:
            return float("nan")
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return float("nan")
        total, n = 0.0, 0
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue  # exited between listing and reading
            total += t.user + t.system + t.children_user + t.children_system
            n += 1
        self.processes = n
        return total


class ProcessTimes:
    """CPU times (user, system) and threads' run-queue wait of one process, read on demand. A
    process that has exited keeps its last reading instead of raising (a monitor racing a tool's
    exit, such as pgbench at the end of its -T): read it often enough that the last reading is
    recent."""

    def __init__(self, pid: int):
        self.pid = pid
        self._proc = psutil.Process(pid)
        self.user_s = self.system_s = 0.0
        self.waits: dict[str, int] = {}
        self.exited = False
        self.read()

    def read(self) -> ProcessTimes:
        if not self.exited:
            try:
                t = self._proc.cpu_times()
                self.user_s, self.system_s = t.user, t.system
                self.waits.update(thread_waits(self.pid))  # exited threads keep theirs
            except psutil.NoSuchProcess:
                self.exited = True
        return self

    def snapshot(self) -> tuple[float, float, dict[str, int]]:
        """(user_s, system_s, waits) as last read."""
        return self.user_s, self.system_s, dict(self.waits)


class ServerCPU(TreeCPU):
    """A PostgreSQL server's CPU: its postmaster and every backend and worker (reaped ones too).
    Any other client of the same cluster (FerretDB when it shares it) is counted too."""

    def __init__(self, postmaster_pid: int | None):
        super().__init__(postmaster_pid)
        if self.available:
            self.source = "postmaster+descendants"
        elif postmaster_pid:
            self.source = f"postmaster pid {postmaster_pid} not readable"


def machine_busy_s() -> float:
    """CPU seconds all processes of this machine have been busy (all cores: not idle, not iowait)."""
    t = psutil.cpu_times()
    # guest time is already counted in user/nice
    return (sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0)
            - getattr(t, "guest_nice", 0.0))


class CPUSampler:
    """Samples, in a thread, the cumulative CPU time (user + system) of each role's process trees,
    and how long their threads have been runnable but waiting for a core (`wait_s`, as
    `thread_waits`).

    A role is a list of root pids; their descendants are found at every sample. A process or thread
    that exits keeps counting with what it had used when last seen, so a role's totals never drop.
    """

    def __init__(self, roles: dict[str, list[int]], interval: float):
        self.roles = roles
        self.interval = interval
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._last: dict[int, float] = {}
        self._waits: dict[int, dict[str, int]] = {}   # pid -> {tid: ns waited}, as last seen
        self._members: dict[str, set[int]] = {}
        self.t0 = time.perf_counter()

    def sample(self) -> None:
        t = time.perf_counter() - self.t0
        for role, pids in self.roles.items():
            members = self._members.setdefault(role, set())
            for pid in pids:
                try:
                    root = self._procs.setdefault(pid, psutil.Process(pid))
                    for proc in (root, *root.children(recursive=True)):
                        members.add(proc.pid)
                        self._procs.setdefault(proc.pid, proc)
                except psutil.Error:
                    pass
            alive = 0
            for pid in members:
                try:
                    ct = self._procs[pid].cpu_times()
                    self._last[pid] = ct.user + ct.system
                    alive += 1
                except psutil.Error:
                    pass
                self._waits.setdefault(pid, {}).update(thread_waits(pid))  # exited threads keep theirs
            # a role with no process here (a remote or Docker server) is not measured: NaN, never 0
            cpu = sum(self._last.get(m, 0.0) for m in members) if pids else float("nan")
            waits = [ns for m in members for ns in self._waits.get(m, {}).values()]
            wait = sum(waits) / 1e9 if pids and waits else float("nan")
            self.rows.append({"t_s": t, "role": role, "cpu_s": cpu, "wait_s": wait, "procs": alive})

    def __enter__(self) -> CPUSampler:
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def used(self, role: str) -> float:
        """CPU seconds the role used between the first and the last sample."""
        vals = [r["cpu_s"] for r in self.rows if r["role"] == role]
        return vals[-1] - vals[0] if vals else float("nan")


def find_postmaster(dsn: str | None, known_pids: list[int] | None = None) -> tuple[int | None, str]:
    """The postmaster pid of the server at `dsn`, if it runs on this machine, and how it was found.

    The harness's local cluster records it (`Server.pids[0]`); otherwise, for a loopback DSN, a
    process named postgres whose command line carries `-p <port>` and has no postgres parent.
    """
    if known_pids:
        return known_pids[0], "harness server pid"
    if not dsn:
        return None, "no DSN"
    try:
        parts = urlsplit(dsn)
        host, port = parts.hostname, parts.port or 5432
    except ValueError:
        return None, "unparsable DSN"
    if host not in LOOPBACK:
        return None, f"server not on this machine ({host})"
    for p in psutil.process_iter(["name", "cmdline", "ppid"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["name"] != "postgres" or "-p" not in cmd:
                continue
            if cmd[cmd.index("-p") + 1] == str(port):
                return p.pid, "found by port"
        except (psutil.Error, IndexError, ValueError):
            continue
    return None, f"no local postmaster found for port {port} (docker or remote server)"
