"""harness.core.measure's run-queue wait: the CPU a process wanted and did not get (Linux schedstat)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from harness.core.measure import (
    CPUSampler,
    ProcessTimes,
    Window,
    completions_in_window,
    thread_waits,
    waited_s,
    window_completed,
)

pytestmark = pytest.mark.skipif(not thread_waits(), reason="this kernel exposes no /proc/<pid>/task/*/schedstat")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_window_counts_the_time_its_thread_waited_for_a_shared_core():
    core = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c",
                                f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})   # this thread and the spinner now share one core
    try:
        time.sleep(0.2)
        with Window("contended") as contended:
            _spin(0.6)
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.wait()
    # two CPU-bound threads on one core: each runs about half the time and waits the other half
    assert contended.cpu_wait_s / contended.wall_s > 0.2
    assert contended.cpu_s / contended.wall_s < 0.8


def test_a_sleeping_thread_does_not_wait_for_a_core():
    with Window("idle") as idle:
        time.sleep(0.3)
    assert 0.0 <= idle.cpu_wait_s < 0.1 * idle.wall_s
    assert idle.row()["cpu_wait_s"] == idle.cpu_wait_s


def test_unreadable_processes_give_nan_not_zero():
    assert thread_waits(2**22 + 12345) == {}
    assert math.isnan(waited_s({}, thread_waits()))
    assert math.isnan(waited_s(thread_waits(), {}))


def test_the_sampler_adds_up_a_role_s_waits_and_never_drops_them():
    core = min(os.sched_getaffinity(0))
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    try:
        with CPUSampler({"spinners": [s.pid for s in spinners], "nobody": []}, 0.1) as sampler:
            time.sleep(0.6)
            spinners[1].kill()   # its threads' waits must stay in the role's total
            spinners[1].wait()
            time.sleep(0.3)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    waits = [r["wait_s"] for r in sampler.rows if r["role"] == "spinners"]
    assert all(b >= a for a, b in zip(waits, waits[1:]))
    # two spinners on one core: while both ran, each waited about half of the time
    assert waits[-1] - waits[0] > 0.2
    assert all(math.isnan(r["wait_s"]) for r in sampler.rows if r["role"] == "nobody")


def test_throughput_counts_successes_that_end_inside_the_window_wherever_they_started():
    ends = [0.5, 1.0, 1.5, 2.0, 3.5, 4.0]     # window [1, 3]: 1.0, 1.5 and 2.0 end inside
    ok = [True, True, False, True, True, True]
    assert completions_in_window(ends, ok, 1.0, 3.0) == 2


def test_old_runs_fall_back_to_ops_and_say_so():
    assert window_completed({"ops": 5, "completed": 7}) == (7, "ended in window")
    assert window_completed({"ops": 5})[0] == 5
    assert window_completed({"ops": 5, "completed": math.nan})[1].startswith("started and ended")


BUSY = ("import sys, time\nwhile time.process_time() < 0.2:\n    pass\n"
        "print('burnt', flush=True)\nsys.stdin.read()\n")   # 0.2 s of CPU, then waits for its stdin to close


def test_a_process_that_exits_keeps_its_last_reading():
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    times = ProcessTimes(child.pid)
    assert child.stdout.readline().strip() == "burnt"
    user, system, _ = last = times.read().snapshot()   # after its busy loop, before it exits
    wall = time.monotonic() - started
    # one thread busy for 0.2 s of CPU (by its own count): about that much CPU, never more than the wall time
    assert 0.15 <= user + system <= wall + 0.05, (user, system, wall)
    child.stdin.close()
    child.wait()
    kept = times.read().snapshot()   # reaped: NoSuchProcess inside, the last reading stays
    assert times.exited and kept == last and times.read().snapshot() == last
