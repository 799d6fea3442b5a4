"""The loop-lateness probe sees a stall of known length, and none when nothing blocks; on a core
shared with another process it splits a stall into the loop thread's own CPU and its wait for the core.
The GIL probe waits about a switch interval beside a thread that never pauses Python, and only its
timer's latency alone.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from harness.core import stats
from harness.core.probe import GIL_COLUMNS, GilProbe, LoopProbe, gil_floor, gil_rows, measure_resolution


def test_probe_reports_a_blocking_call_of_known_length():
    async def main():
        async with LoopProbe() as probe:
            await asyncio.sleep(0.05)
            blocked_at = time.perf_counter() - probe.t0
            time.sleep(0.2)  # blocks the loop on purpose
            await asyncio.sleep(0.05)
        return probe, blocked_at

    probe, blocked_at = asyncio.run(main())
    offsets = [s[0] for s in probe.samples]
    late = [s[1] for s in probe.samples]
    worst = max(range(len(late)), key=late.__getitem__)
    assert 0.15 <= late[worst] < 1.0
    # the stall is stamped where it began: at the wake-up due just after the blocking call started
    assert abs(offsets[worst] - blocked_at) < 0.02
    assert offsets == sorted(offsets)
    assert sum(x > 0.05 for x in late) == 1
    # a sleep is no CPU: the stall's own run time is small beside its 0.2 s, and its span holds it
    _, _, span, run, _ = probe.samples[worst]
    assert run < 0.05 and span >= late[worst]


def test_probe_reports_no_stall_when_nothing_blocks():
    result = asyncio.run(measure_resolution(0.3))
    late = [s[1] for s in result["samples"]]
    assert result["wakeups"] == len(late) > 50
    assert max(late) < 0.05
    # the typical wake-up is on time to within a few intervals (the timer's resolution plus
    # scheduling: about 0.1 ms on an idle Linux machine); never early by more than the clock's step
    p50 = stats.percentiles(late, [50])[0]
    assert -1e-6 <= p50 < 5 * result["interval_s"], p50
    # with nothing blocking, a wake-up's own CPU is a small part of its span
    runs = [s[3] for s in result["samples"]]
    assert stats.percentiles(runs, [50])[0] < 0.5 * result["interval_s"]
    assert 0 <= result["cpu_fraction"] < 1.0 and result["cpu_us_per_wakeup"] > 0


def test_probe_rows_and_bad_interval():
    p = LoopProbe(t0=0.0)
    p.samples = [(0.001, 0.0002, 0.0012, 0.0001, 0.0), (0.002, 0.0001, 0.0011, 0.00005, 0.00002)]
    assert p.rows(variant="v") == [
        {"variant": "v", "seq": 0, "offset_s": 0.001, "lateness_s": 0.0002, "span_s": 0.0012, "run_s": 0.0001,
         "wait_s": 0.0},
        {"variant": "v", "seq": 1, "offset_s": 0.002, "lateness_s": 0.0001, "span_s": 0.0011, "run_s": 0.00005,
         "wait_s": 0.00002}]
    with pytest.raises(ValueError):
        LoopProbe(interval_s=0)


def _steal_s(core: int) -> float:
    """Seconds the hypervisor has taken from `core` since boot (0 where the kernel has no steal)."""
    return float(getattr(psutil.cpu_times(percpu=True)[core], "steal", 0.0) or 0.0)


BURNER = "import sys\nsys.stdout.write('burning\\n'); sys.stdout.flush()\nwhile True:\n    pass\n"


def _burn_cpu(seconds: float) -> None:
    """Block the calling thread with pure Python until it has used `seconds` of its own CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{os.getpid()}/schedstat")
                    or not hasattr(os, "sched_setaffinity"),
                    reason="needs Linux schedstat and CPU affinity")
def test_a_stall_on_a_busy_core_is_split_into_run_and_wait():
    """The loop's thread and a CPU-burning child pinned to one core: the loop blocked for BUSY_S of
    its own CPU stalls for about twice that wall-clock (the core is shared), and the probe reports
    run ~ BUSY_S, a wait > 0, and span ~ run + wait + the core's steal. The old probe had the
    wall-clock stall only. Steal is read for that core, not assumed: on a VM the hypervisor can
    take the vCPU mid-stall (0.12 s of a 0.73 s span in one CI run), time that is neither run nor
    wait."""
    busy_s = 0.2
    mask = os.sched_getaffinity(0)
    core = min(mask)
    child = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    try:
        os.sched_setaffinity(child.pid, {core})
        assert child.stdout is not None and child.stdout.readline() == "burning\n"
        os.sched_setaffinity(0, {core})   # this thread only: it runs the event loop below

        async def main():
            async with LoopProbe() as probe:
                await asyncio.sleep(0.05)
                _burn_cpu(busy_s)         # blocks the loop on purpose, for a known CPU length
                await asyncio.sleep(0.05)
            return probe

        steal_before = _steal_s(core)
        probe = asyncio.run(main())
        stolen = _steal_s(core) - steal_before
    finally:
        os.sched_setaffinity(0, mask)
        child.kill()
        child.wait()
    offset, late, span, run, wait = max(probe.samples, key=lambda s: s[1])
    assert not math.isnan(wait)
    # the loop's own CPU during the stall: the busy loop's, plus at most the probe's interval
    assert 0.9 * busy_s <= run <= busy_s + 0.05, (late, span, run, wait)
    # the rest of the stall was the wait for the core the child held
    assert wait > 0.1 * busy_s, (late, span, run, wait)
    assert late > run + 0.5 * wait - 0.01, (late, span, run, wait)
    assert abs(span - (run + wait)) < 0.02 + 0.1 * span + stolen, (late, span, run, wait, stolen)


# -- the GIL probe ---------------------------------------------------------------------------------

def _spin(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():   # pure Python: holds the GIL but for the interpreter's forced switches
        x += 1


def test_the_gil_probe_waits_a_switch_interval_beside_a_spinning_thread_and_its_floor_alone():
    """Alone, the probe's wake-ups cost the timer's latency (tens of microseconds); beside one thread
    that runs Python without pause, each wake-up waits for that thread to be made to drop the lock,
    about the interpreter's switch interval (5 ms). The run-queue wait is taken out, so a busy
    machine does not count as the lock."""
    floor = stats.gil_wait_summary(*zip(*[(late, wait) for *_, late, wait in gil_floor(0.3)]))
    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,), daemon=True)
    spinner.start()
    try:
        with GilProbe(seed=1) as gil:
            time.sleep(0.5)
    finally:
        stop.set()
        spinner.join()
    held_above_s = floor["gil_wait_p99_ms"] / 1e3
    spun = stats.gil_wait_summary([s[2] for s in gil.samples], [s[3] for s in gil.samples], held_above_s)
    switch_ms = sys.getswitchinterval() * 1e3
    assert floor["gil_samples"] >= 10 and spun["gil_samples"] >= 10
    assert spun["gil_wait_ms"] >= 0.5 * switch_ms, (spun, floor)
    assert floor["gil_wait_ms"] < 0.2 * switch_ms, floor
    assert spun["gil_wait_ms"] > 10 * floor["gil_wait_ms"], (spun, floor)
    # a thread that never lets go holds the lock all the time: (nearly) every wake-up finds it held
    assert spun["gil_found_held"] >= 0.9, (spun, floor)


def test_gil_probe_samples_in_a_window_and_as_rows():
    with GilProbe(interval_s=0.002, seed=2) as gil:
        time.sleep(0.05)
        open_at = time.perf_counter()
        time.sleep(0.1)
        close_at = time.perf_counter()
        time.sleep(0.05)
    inside = gil.between(open_at, close_at)
    assert 0 < len(inside) < len(gil.samples)
    assert all(open_at <= start and due + late <= close_at for start, due, late, _ in inside)
    starts = [s[0] for s in gil.samples]
    assert starts == sorted(starts) and all(due > start for start, due, *_ in gil.samples)
    rows = gil_rows(inside, open_at, cell="c1")
    assert [r["seq"] for r in rows] == list(range(len(inside)))
    assert set(rows[0]) == {"cell", *GIL_COLUMNS}
    assert all(0 <= r["offset_s"] <= close_at - open_at for r in rows)
    with pytest.raises(ValueError, match="interval_s"):
        GilProbe(interval_s=0)


def test_gil_wait_summary_takes_the_run_queue_out():
    got = stats.gil_wait_summary([0.003, 0.002, 0.001], [0.001, float("nan"), 0.001])
    assert got["gil_samples"] == 3
    assert got["gil_wait_ms"] == pytest.approx((2 + 2 + 0) / 3)         # a missing reading counts 0
    assert math.isnan(stats.gil_wait_summary([], [])["gil_wait_ms"])
    assert math.isnan(got["gil_found_held"])                            # no threshold, no share


def test_gil_found_held_counts_the_wake_ups_beyond_the_threshold():
    late = [0.0001, 0.0002, 0.004, 0.006]
    got = stats.gil_wait_summary(late, [0.0] * 4, held_above_s=0.0003)
    assert got["gil_found_held"] == 0.5
    assert stats.gil_wait_summary(late, [0.0] * 4, held_above_s=0.01)["gil_found_held"] == 0.0
    # the run-queue wait is not the lock: a wake-up late only for want of a core is not counted
    assert stats.gil_wait_summary(late, [0.0, 0.0, 0.0039, 0.0059], held_above_s=0.0003)["gil_found_held"] == 0.0
