"""A loop-lateness probe: how long the event loop was unable to run a ready task.

A probe task sleeps `interval_s` (1 ms) in a loop and records, for every wake-up, when it was due
and how late it woke up. While nothing blocks the loop, lateness is the timer's own resolution (a
fraction of a millisecond on Linux); while something holds the loop -- decoding a large BSON batch,
a synchronous call -- the next wake-up is late by the length of that stall. So the largest lateness
is the longest stall the loop suffered, and every other task on the loop would have waited as long.

    async with LoopProbe() as probe:
        async for doc in cursor: ...
    probe.samples          # [(offset_s, lateness_s, span_s, run_s, wait_s), ...], offsets from `t0`

On two cores shared with the servers part of a stall can be the loop's thread waiting for a core
rather than running. So at every wake-up (and once before the first sleep) the probe, on the loop's
own thread, reads that thread's CPU clock (`time.thread_time_ns`) and its run-queue wait (the second
field of `/proc/self/task/<tid>/schedstat`: ns runnable but waiting for a core; one `pread` of a
file kept open, under a microsecond), and each sample carries the differences since the previous
read: `run_s` (the loop thread's own CPU time), `wait_s` (its run-queue wait) and `span_s` (the
wall-clock time from before the previous reads to after these, so it holds both readings). The
CPU comes from the thread clock, not schedstat's first field, which the kernel brings up to date for
a running thread only at scheduler ticks and switches, not when it is read. A sample's
reads bracket its stall: the previous read is the previous wake-up, a scheduled interval before
this one was due, so `run_s` is the stall's own CPU plus at most that interval's (an upper bound of
what the blocking code cost), and span_s >= run_s + wait_s. The rest is the time the thread
slept, the reads themselves, and on a virtual machine the hypervisor's steal: while the vCPU is
taken away the thread counts as neither running (its CPU clock leaves steal out) nor waiting (it
is still the core's current task), so a stall on a VM can exceed run + wait by the steal of its
core. Without schedstat (not Linux) wait_s is NaN.

`measure_resolution()` runs the probe with nothing else on the loop and returns its samples and its
own CPU cost, so every figure measured with it can state the probe's floor and overhead.

`GilProbe` asks the same question of the interpreter lock instead of the loop: a thread of its own
sleeps for random (exponential, seeded) intervals, and at every wake-up records how late after its
timer was due it ran Python again, and how much of that it spent runnable but waiting for a core
(the same schedstat field). `time.sleep` releases the GIL, so after the kernel wakes the thread it
must take the GIL back before the next line runs: lateness minus run-queue wait is the wait for the
GIL, plus the timer's own latency. That latency is the probe's floor: `gil_floor()` measures it
with the process otherwise idle (an upper estimate: a core woken from idle adds its exit latency,
tens of microseconds on the project's VMs). With one thread spinning in Python the probe waits
about the interpreter's switch interval (5 ms) at every wake-up; with the process idle, its floor.
The wake-ups are exponential so that they sample the lock's state at random moments, not in step
with the workload's own period. Linux only for the run-queue part (NaN elsewhere); the thread sets
its timer slack to 1 ns (prctl), so the kernel does not add its default 50 us.

Statistics of the samples belong to `harness.core.stats`; this module only records.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import random
import threading
import time
from typing import Any

DEFAULT_INTERVAL_S = 0.001
GIL_INTERVAL_S = 0.005      # the GIL probe's mean wake-up interval: ~200 lock acquisitions a second,
                            # beside the thousands a second of a threads client (several per request)
GIL_FLOOR_S = 0.2           # how long `gil_floor` runs the probe alone
PR_SET_TIMERSLACK = 29      # linux/prctl.h
NAN = math.nan


class ThreadWait:
    """The calling thread's run-queue wait so far (ns runnable but waiting for a core): the second
    field of its `/proc/self/task/<tid>/schedstat`, kept open, so each `read()` is one `pread`.
    Only meaningful in the thread that opened it. `open()` gives None where the kernel does not
    expose the file."""

    def __init__(self, fd: int):
        self.fd = fd

    @classmethod
    def open(cls) -> ThreadWait | None:
        try:
            fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            return None
        reader = cls(fd)
        try:
            reader.read()
        except (OSError, ValueError, IndexError):
            reader.close()
            return None
        return reader

    def read(self) -> int:
        return int(os.pread(self.fd, 128, 0).split()[1])

    def close(self) -> None:
        os.close(self.fd)


class LoopProbe:
    """Async context manager recording (offset_s, lateness_s, span_s, run_s, wait_s) of each
    wake-up of a sleeping task (the module docstring says what each is).

    `t0` (a `time.perf_counter()` value) is where offsets start: pass a measured window's `t0` so
    probe samples line up with the operations recorded in that window. Default: when entered.
    """

    def __init__(self, *, interval_s: float = DEFAULT_INTERVAL_S, t0: float | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = interval_s
        self.t0 = t0
        self.samples: list[tuple[float, float, float, float, float]] = []
        self._task: asyncio.Task | None = None
        self._started: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"LoopProbe(interval_s={self.interval_s}, samples={len(self.samples)})"

    async def __aenter__(self) -> LoopProbe:
        if self.t0 is None:
            self.t0 = time.perf_counter()
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._started = started
        self._task = asyncio.create_task(self._run(), name="loop-probe")
        await started  # the probe's first sleep is armed before the block starts
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        perf = time.perf_counter
        sleep = asyncio.sleep
        interval = self.interval_s
        append = self.samples.append
        t0 = self.t0
        started = self._started
        assert t0 is not None and started is not None  # set by __aenter__
        # This task runs on the loop's thread, so its thread CPU clock and its schedstat are the loop's.
        cpu = time.thread_time_ns
        waits = ThreadWait.open()
        try:
            run0, wait0 = cpu(), waits.read() if waits else 0
            read_at = perf()
            first = True
            while True:
                due = perf() + interval
                if first:
                    started.set_result(None)
                    first = False
                await sleep(interval)
                now = perf()
                run1 = cpu()
                wait1 = waits.read() if waits else 0
                # The sample is stamped with the moment the wake-up was due, so a stall shows at the
                # time it began, with its length as the lateness; run and wait cover the span since
                # the previous read (the previous wake-up), which holds the whole stall. The span runs
                # from before the previous wake-up's reads to after this one's: a preemption between
                # the clock and the schedstat read is then inside it, whichever reading it lands in.
                append((due - t0, now - due, perf() - read_at, (run1 - run0) / 1e9,
                        (wait1 - wait0) / 1e9 if waits else NAN))
                run0, wait0, read_at = run1, wait1, now
        finally:
            if waits:
                waits.close()

    def rows(self, **fields: Any) -> list[dict[str, Any]]:
        """The samples as table rows (seq, offset_s, lateness_s, span_s, run_s, wait_s) plus the
        given fields."""
        return sample_rows(self.samples, **fields)


def sample_rows(samples: list[tuple[float, float, float, float, float]], **fields: Any) -> list[dict[str, Any]]:
    """Probe samples as table rows: the given fields, then seq, offset_s, lateness_s, span_s, run_s,
    wait_s (the columns of every probe table; `SAMPLE_COLUMNS`)."""
    return [{**fields, "seq": i, "offset_s": off, "lateness_s": late, "span_s": span, "run_s": run, "wait_s": wait}
            for i, (off, late, span, run, wait) in enumerate(samples)]


SAMPLE_COLUMNS = {"seq": "int", "offset_s": "float", "lateness_s": "float", "span_s": "float", "run_s": "float",
                  "wait_s": "float"}


async def measure_resolution(duration_s: float = 1.0, *,
                             interval_s: float = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """Run the probe alone for `duration_s`: its floor (lateness with nothing blocking) and cost.

    Returns {"samples": [(offset_s, lateness_s, span_s, run_s, wait_s), ...], "wakeups", "duration_s", "cpu_s",
    "cpu_us_per_wakeup", "cpu_fraction"}: the process CPU the probe used while idle, per wake-up
    and as a fraction of one core. Summaries of `samples` are left to `harness.core.stats`.
    """
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    async with LoopProbe(interval_s=interval_s, t0=t0) as probe:
        await asyncio.sleep(duration_s)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    n = len(probe.samples)
    return {"samples": probe.samples, "wakeups": n, "interval_s": interval_s, "duration_s": wall,
            "cpu_s": cpu, "cpu_us_per_wakeup": cpu / n * 1e6 if n else float("nan"),
            "cpu_fraction": cpu / wall if wall > 0 else float("nan")}


class GilProbe:
    """Context manager: a thread recording (start_s, due_s, late_s, wait_s) at each wake-up (the
    module docstring): `start_s` the perf_counter() before it slept, `due_s` when its timer was due,
    `late_s` how long after that it ran Python again, `wait_s` its run-queue wait over the same span
    (NaN without schedstat). `late_s - wait_s` is the wait for the GIL plus the timer's latency.

        with GilProbe(seed=1) as gil:
            run_the_workload()
        gil.between(open_at, close_at)     # the wake-ups inside a measured window
    """

    def __init__(self, *, interval_s: float = GIL_INTERVAL_S, seed: int = 0):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float, float]] = []
        self._rng = random.Random(f"gil-probe:{seed}")
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"GilProbe(interval_s={self.interval_s}, samples={len(self.samples)})"

    def __enter__(self) -> GilProbe:
        self._thread = threading.Thread(target=self._run, name="gil-probe", daemon=True)
        self._thread.start()
        self._started.wait()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        _set_timer_slack_ns(1)
        waits = ThreadWait.open()
        perf, sleep, append = time.perf_counter, time.sleep, self.samples.append
        # capped at 10 means: the exponential's tail would otherwise delay the probe's exit
        longest, mean = 10 * self.interval_s, self.interval_s
        self._started.set()
        try:
            while not self._stop.is_set():
                pause = min(self._rng.expovariate(1.0 / mean), longest)
                wait0 = waits.read() if waits else 0
                start = perf()
                sleep(pause)
                woke = perf()
                wait1 = waits.read() if waits else 0
                due = start + pause
                append((start, due, woke - due, (wait1 - wait0) / 1e9 if waits else NAN))
        finally:
            if waits:
                waits.close()

    def between(self, open_at: float, close_at: float) -> list[tuple[float, float, float, float]]:
        """The wake-ups that slept and woke inside [open_at, close_at] (perf_counter() values)."""
        return [s for s in self.samples if s[0] >= open_at and s[1] + s[2] <= close_at]


def _set_timer_slack_ns(ns: int) -> bool:
    """The calling thread's timer slack (Linux prctl); False where it cannot be set."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def gil_floor(duration_s: float = GIL_FLOOR_S, *, seed: int = 0) -> list[tuple[float, float, float, float]]:
    """The GIL probe's samples with the calling thread asleep and nothing else running Python: the
    timer's latency, what a lock nobody holds costs the probe."""
    with GilProbe(seed=seed) as probe:
        time.sleep(duration_s)
    return probe.samples


def gil_rows(samples: list[tuple[float, float, float, float]], t0: float, **fields: Any) -> list[dict[str, Any]]:
    """GIL probe samples as table rows: the given fields, then seq, offset_s (the wake-up's due time
    from t0), late_s, wait_s (`GIL_COLUMNS`)."""
    return [{**fields, "seq": i, "offset_s": due - t0, "late_s": late, "wait_s": wait}
            for i, (_start, due, late, wait) in enumerate(samples)]


GIL_COLUMNS = {"seq": "int", "offset_s": "float", "late_s": "float", "wait_s": "float"}
