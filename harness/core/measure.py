"""The measurement toolkit every experiment family stands on (ground floor: imports nothing above it).

- `Window`: wall time, this process's CPU time, its run-queue wait and its context switches of one
  measured window, optionally with py-spy attached to this process for the window (`profile`);
- `process_switches()`: a process's context switches, voluntary and involuntary, over its threads;
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
import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import psutil

from . import profiles
from .errors import HarnessError

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
    """A measured window: wall time, this process's CPU time, its threads' run-queue wait
    (`cpu_wait_s`, see `thread_waits`) and its context switches between `open()` and `close()`.

    Context switches come from getrusage(RUSAGE_SELF), which sums every thread of the process,
    those that exited during the window included: `ctx_voluntary` counts a thread giving up its
    core to wait (a socket read, a lock, a sleep), `ctx_involuntary` one preempted while it could
    still run.

    With `profile` (a file), a profiler samples this process for the window as the file's name asks
    (`profiles.sampling_of`: py-spy or perf; else py-spy's native frames at `profile_rate` Hz), as
    collapsed stacks; it is stopped after the window's readings, so its shutdown is not in them, but
    its sampling is: a profiled window is never a measured one. A profiler that cannot attach leaves
    the window unprofiled, `profile_error` saying why.

    Used as a context manager by experiments; a monitor thread that must not block a saturated
    event loop calls `open()`/`close()` itself.
    """

    def __init__(self, variant: str, fields: dict[str, Any] | None = None, profile: Path | None = None,
                 profile_rate: int = profiles.RATE_HZ):
        self.variant = variant
        self.fields = dict(fields or {})
        self.ops = 0           # set by the experiment: operations completed inside the window
        self.t0 = 0.0          # perf_counter() at open; samples' start_s are relative to it
        self.wall_s = self.cpu_s = self.cpu_user_s = self.cpu_system_s = self.cpu_wait_s = float("nan")
        self.ctx_voluntary = self.ctx_involuntary = -1
        self.profile, self.profile_rate = profile, profile_rate
        self._spy: profiles.Sampler | None = None
        self.profile_error: str | None = None   # why no profile was written, when one was asked for

    def open(self) -> Window:
        if self.profile is not None:
            try:
                self._spy = profiles.attach(os.getpid(), self.profile, self.profile_rate)
            except HarnessError as e:
                self.profile_error = str(e)
        self._wait0 = thread_waits()
        self._proc = psutil.Process()
        self._cpu0 = self._proc.cpu_times()
        self._ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self._pt0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def close(self) -> None:
        self.wall_s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self._pt0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu1 = self._proc.cpu_times()
        self.cpu_user_s = cpu1.user - self._cpu0.user
        self.cpu_system_s = cpu1.system - self._cpu0.system
        self.cpu_wait_s = waited_s(self._wait0, thread_waits())
        self.ctx_voluntary = ru1.ru_nvcsw - self._ru0.ru_nvcsw
        self.ctx_involuntary = ru1.ru_nivcsw - self._ru0.ru_nivcsw
        if self._spy is not None:
            self.profile_error = profiles.detach(self._spy, self.profile)
            self._spy = None

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
                "cpu_wait_s": self.cpu_wait_s, "ctx_voluntary": self.ctx_voluntary,
                "ctx_involuntary": self.ctx_involuntary, "ops": self.ops, **self.fields}


def process_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches so far of every live thread of `pid`, from
    /proc/<pid>/task/<tid>/status (psutil reads only the main thread's). A thread that exited is
    lost; (0, 0) when the process is gone."""
    vol = invol = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0, 0
    for task in tasks:
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread exited between listing and reading
    return vol, invol


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

    def switches(self) -> tuple[int, int]:
        """(voluntary, involuntary) context switches so far of the tree's live processes
        (`process_switches`): unlike the CPU, a member that exited takes its count with it."""
        if not self.available:
            return -1, -1
        try:
            root = psutil.Process(self.pid)
            pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return -1, -1
        counts = [process_switches(pid) for pid in pids]
        return sum(v for v, _ in counts), sum(i for _, i in counts)


class ProcessTimes:
    """CPU times (user, system), threads' run-queue wait and context switches of one process, read
    on demand. A process that has exited keeps its last reading instead of raising (a monitor racing
    a tool's exit, such as pgbench at the end of its -T): read it often enough that the last reading
    is recent."""

    def __init__(self, pid: int):
        self.pid = pid
        self._proc = psutil.Process(pid)
        self.user_s = self.system_s = 0.0
        self.waits: dict[str, int] = {}
        self.switches = (0, 0)   # (voluntary, involuntary) context switches, `process_switches`
        self.exited = False
        self.read()

    def read(self) -> ProcessTimes:
        if not self.exited:
            try:
                t = self._proc.cpu_times()
                self.user_s, self.system_s = t.user, t.system
                self.waits.update(thread_waits(self.pid))  # exited threads keep theirs
                if any(got := process_switches(self.pid)):   # (0, 0): gone between two reads
                    self.switches = got
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
    """CPU seconds this machine's cores were busy (all cores: every state but idle and iowait).
    On a virtual machine that includes `steal`, the time the hypervisor ran something else on its
    cores: capacity the machine did not have (what the `machine CPU` label asks), but no process's
    work (docs/METHODS.md). Left out, the client's and server's own CPU exceeded the machine's in
    some windows (a process's CPU time counts the time stolen while it ran), so it stays in."""
    t = psutil.cpu_times()
    # guest time is already counted in user/nice
    return (sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0)
            - getattr(t, "guest_nice", 0.0))


class _Periodic:
    """Calls `sample()` on entry, every `interval` seconds in a daemon thread, and on exit."""

    interval: float
    _stop: threading.Event
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._pause()):
            self.sample()

    def _pause(self) -> float:
        return self.interval

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


class CPUSampler(_Periodic):
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


    def used(self, role: str) -> float:
        """CPU seconds the role used between the first and the last sample."""
        vals = [r["cpu_s"] for r in self.rows if r["role"] == role]
        return vals[-1] - vals[0] if vals else float("nan")


# A window's CPU readings must fit the machine: client + server <= machine <= cores x wall. The
# kernel counts process and machine CPU in ticks of 10 ms (USER_HZ) and each edge is interpolated
# between two samples, so each reading may be off by a few ticks at each edge, plus a share of the
# window for the accounting differences between /proc/<pid>/stat and /proc/stat.
CPU_TOLERANCE_S = 0.06
CPU_TOLERANCE_SHARE = 0.03      # of cores x wall
EDGE_SAMPLE_S = 0.05            # EdgeCPU's sampling interval
READER_DUTY = 0.05              # EdgeCPU's reader: at most this share of one core, whatever the load
READER_NICE = -20               # EdgeCPU's reader thread: it preempts the load on waking (nice -20 is
                                # the highest ordinary priority; a real-time class is not needed)


def cpu_consistency(client_s: float, server_s: float, machine_s: float, wall_s: float, cores: int) -> str:
    """'' when a window's CPU readings fit the machine (client + server <= machine <= cores x wall,
    within CPU_TOLERANCE_S + CPU_TOLERANCE_SHARE x cores x wall); else the broken inequality, in
    words. A reading that is NaN (not measured) is left out of the comparison."""
    tol = CPU_TOLERANCE_S + CPU_TOLERANCE_SHARE * cores * wall_s
    parts = [x for x in (client_s, server_s) if x == x]
    if parts and machine_s == machine_s and sum(parts) > machine_s + tol:
        return (f"client + server CPU {sum(parts):.3f} s above the machine's {machine_s:.3f} s "
                f"(tolerance {tol:.3f} s)")
    for name, value in (("machine", machine_s), ("client + server", sum(parts) if parts else math.nan)):
        if value == value and value > cores * wall_s + tol:
            return (f"{name} CPU {value:.3f} s above {cores} cores x {wall_s:.3f} s wall "
                    f"(tolerance {tol:.3f} s)")
    return ""


class EdgeCPU(_Periodic):
    """CPU read at a window's edges by a reader that the load does not hold up.

    A thread of the controlling process (one that only waits for the measured child, or for
    pgbench) reads, every `interval`, the cumulative CPU (user, system) of each role (`roles`: name
    -> (pid, tree); a tree counts every descendant too, as `TreeCPU` does, listed again at every
    reading from the kernel's `children` files: two small /proc files per process) and the machine's busy
    time, stamping each reading with the midpoint of perf_counter() taken just before and after it
    (CLOCK_MONOTONIC: one clock for every process of the machine, so the child's window edges are
    on it). `window()` interpolates every series linearly at the window's edges, so client, server
    and machine CPU cover the same interval as the window's wall time.

    Readings taken inside the measured process could not: its monitor thread queues for the GIL
    behind the clients, so a reading meant "just outside" the window came tens of milliseconds
    late, and server and machine CPU divided by the window's wall time read up to 5 cores on a
    2-core machine. The reader thread also asks for a higher priority
    (`raise_thread_priority`; what it got is `priority`): at nice 0 it queued behind 200 backends
    between its reads. As it preempts the load, it spaces its readings so as to use at most
    READER_DUTY of a core (`_pause`). Each reading's duration is kept (`read_s`, `edge_read_s()`).
    A lone process that has gone is not read (what it used after its last reading is unknown, so
    an edge past that reading is NaN); a tree keeps its last reading."""

    def __init__(self, roles: dict[str, tuple[int | None, bool]], interval: float = EDGE_SAMPLE_S):
        self.interval = interval
        self._readers: dict[str, _CPUReader] = {role: _CPUReader(pid, tree) for role, (pid, tree) in roles.items()
                                                if pid}
        self.samples: dict[str, list[tuple[float, tuple[float, float]]]] = {"machine": []}
        self.read_s: dict[str, list[float]] = {"machine": []}   # how long each reading took, beside samples
        self.priority = "not raised yet"
        self._stop = threading.Event()
        self._sampling = threading.Lock()
        self._at_exit: list[int] = []     # children whose exit reading this reader asked for

    def _loop(self) -> None:
        self.priority = raise_thread_priority()
        super()._loop()

    def _pause(self) -> float:
        """`interval`, or longer when one round of readings takes more than READER_DUTY of it: a
        reader that preempts the load must not take much from it (at 200 backends one round takes
        about 10 ms, which every 50 ms was a fifth of a core)."""
        last_round = sum(durations[-1] for durations in self.read_s.values() if durations)
        return max(self.interval, last_round / READER_DUTY)

    def add(self, role: str, pid: int) -> None:
        """A role started after the reader (the measured child): read from the next tick on, and
        once more when it has exited, before it is reaped (`read_at_exit`): a child that exits
        within one pause of its window's close would otherwise leave that edge unread (2 of 192
        pg_models windows of one full run lost their CPU so)."""
        self._readers[role] = _CPUReader(pid, tree=False)
        read_at_exit(pid, self.sample)
        self._at_exit.append(pid)

    def sample(self) -> None:
        # the reader thread and the owner's last reading (`add`) must not interleave: each role's
        # readings stay in time order for `_bracket`
        with self._sampling:
            for role, read in [("machine", lambda: (machine_busy_s(), 0.0)),
                               *((r, reader.read) for r, reader in list(self._readers.items()))]:
                t0 = time.perf_counter()
                value = read()
                t1 = time.perf_counter()
                if value is None:  # a lone process gone: its CPU since the last reading is unknown
                    continue
                self.samples.setdefault(role, []).append(((t0 + t1) / 2, value))
                self.read_s.setdefault(role, []).append(t1 - t0)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for pid in self._at_exit:   # a child not waited for by `run_child`: nothing left to call
            readings_at_exit(pid)

    def edge_read_s(self, open_at: float, close_at: float) -> float:
        """The longest any reading took among those a window's edges are interpolated between: a
        reading stamped at its midpoint may be off by half of it, at the CPU's rate (NaN when an
        edge lies outside the read span)."""
        longest = 0.0
        for role, pts in self.samples.items():
            for t in (open_at, close_at):
                i = _bracket(pts, t)
                if i is None:
                    return math.nan
                longest = max(longest, *self.read_s[role][i:i + 2])
        return longest


    def at(self, role: str, t: float) -> tuple[float, float]:
        """The role's cumulative (user, system) CPU at perf_counter() time `t`, interpolated between
        the two readings around it; NaN outside the read span or for a role never read."""
        pts = self.samples.get(role, [])
        i = _bracket(pts, t)
        if i is None:
            return math.nan, math.nan
        (ta, va), (tb, vb) = pts[i], pts[i + 1]
        f = (t - ta) / (tb - ta) if tb > ta else 0.0
        return va[0] + f * (vb[0] - va[0]), va[1] + f * (vb[1] - va[1])

    def window(self, open_at: float, close_at: float) -> dict[str, tuple[float, float]]:
        """Each role's (user, system) CPU seconds between `open_at` and `close_at` (perf_counter()
        times); the machine's busy seconds under "machine", in the user slot."""
        out = {}
        for role in self.samples:
            (u0, s0), (u1, s1) = self.at(role, open_at), self.at(role, close_at)
            out[role] = (u1 - u0, s1 - s0)
        return out


# pid -> readings to take once that child has exited and before it is reaped: a zombie's /proc
# entry still holds its final CPU times. `processes.run_child` takes them; `EdgeCPU.add` asks.
_AT_EXIT: dict[int, list[Callable[[], None]]] = {}


def read_at_exit(pid: int, reading: Callable[[], None]) -> None:
    """Have `reading` called when child `pid` has exited, before it is reaped (by
    `processes.run_child`, which waits for its children so)."""
    _AT_EXIT.setdefault(pid, []).append(reading)


def readings_at_exit(pid: int) -> list[Callable[[], None]]:
    """The readings asked for at child `pid`'s exit, handed over once (to its waiter)."""
    return _AT_EXIT.pop(pid, [])


def _bracket(pts: list[tuple[float, Any]], t: float) -> int | None:
    """The index of the first of the two timed readings `t` lies between; None outside them."""
    return next((k for k in range(len(pts) - 1) if pts[k][0] <= t <= pts[k + 1][0]), None)


def raise_thread_priority(nice: int = READER_NICE) -> str:
    """Give the calling thread a higher CPU priority (Linux: the nice value is a thread's own), so
    that a reader of CPU times runs when it wakes instead of queueing behind the load it measures:
    at 200 PostgreSQL backends on two cores, a reader at the load's priority waited long enough
    between its /proc reads that a window's server CPU read above the machine's. A
    negative nice needs CAP_SYS_NICE (root, or RLIMIT_NICE): without it the thread keeps its
    priority and the readings' own durations (`EdgeCPU.read_s`) say how late they were.
    Returns what was done, in words."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError) as e:
        return f"nice {os.getpriority(os.PRIO_PROCESS, 0)} (raising it was refused: {e.__class__.__name__})"
    return f"nice {nice}"


def reader_priority_here() -> str:
    """The priority `EdgeCPU`'s reader thread gets on this machine (as `raise_thread_priority`
    says it), tried in a thread that ends at once: recorded with every run's environment."""
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(raise_thread_priority()), name="priority-probe")
    t.start()
    t.join()
    return got[0]


def _descendants(pid: int) -> list[int]:
    """Every descendant of `pid`, from the kernel's per-thread `children` lists (one small file
    per process, where psutil's `children()` reads every process of the machine): cheap enough to
    list a server's backends at each reading, so that none born before a window is first seen
    inside it with all its earlier CPU. Plain `os` calls: with pathlib, listing 200 backends took
    7 ms of every 50 ms reading, against 3 ms."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


class _CPUReader:
    """(user, system) CPU of one process, or of a process tree. A lone process that has gone reads
    None (a zombie still reads: its final times); a tree drops an exited member, whose CPU its
    reaper (a member: the postmaster for PostgreSQL's backends) then counts in its `children_*`
    times, as in `TreeCPU`, and keeps the root's last reading."""

    def __init__(self, pid: int, tree: bool):
        self.root = psutil.Process(pid)
        self.tree = tree
        self._members: dict[int, psutil.Process] = {pid: self.root}
        self._last: dict[int, tuple[float, float]] = {}

    def read(self) -> tuple[float, float] | None:
        if not self.tree:
            try:
                t = self.root.cpu_times()
            except psutil.Error:
                return None
            return t.user, t.system
        for pid in _descendants(self.root.pid):
            if pid not in self._members:
                try:
                    self._members[pid] = psutil.Process(pid)
                except psutil.Error:
                    continue
        for pid, proc in self._members.items():
            try:
                t = proc.cpu_times()
                self._last[pid] = (t.user + t.children_user, t.system + t.children_system)
            except psutil.Error:
                if pid != self.root.pid:
                    self._last.pop(pid, None)
        for pid in [p for p in self._members if p not in self._last and p != self.root.pid]:
            del self._members[pid]
        if not self._last:
            return math.nan, math.nan
        return sum(u for u, _ in self._last.values()), sum(s for _, s in self._last.values())


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
