"""CPU read at the window's edges (issue 32): client + server <= machine <= cores x wall.

The readings of a window used to be taken by the measured process's own monitor thread, which
queued for the GIL behind the clients; divided by the window's wall time they read up to 5 cores on
a 2-core machine. `measure.EdgeCPU` reads from a process the load does not hold up and
interpolates at the window's edges; `measure.cpu_consistency` rejects a window whose readings do
not fit the machine.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from harness.core import measure

BURN = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 3: pass\n"


def test_a_window_whose_readings_exceed_the_machine_is_rejected():
    wall, cores = 2.0, 2
    assert measure.cpu_consistency(1.0, 0.5, 1.8, wall, cores) == ""
    # a machine reading taken late: 4.6 s of busy CPU over a 2 s window on 2 cores
    assert "machine CPU 4.600 s above 2 cores" in measure.cpu_consistency(1.0, 0.5, 4.6, wall, cores)
    # client and server read over a longer span than the machine
    assert "client + server CPU 2.300 s above the machine's 1.800 s" in \
        measure.cpu_consistency(1.5, 0.8, 1.8, wall, cores)
    # within the documented tolerance: kept
    tol = measure.CPU_TOLERANCE_S + measure.CPU_TOLERANCE_SHARE * cores * wall
    assert measure.cpu_consistency(1.0, 0.8, 1.8 + 0.9 * tol, wall, cores) == ""
    assert measure.cpu_consistency(float("nan"), float("nan"), 1.0, wall, cores) == ""


def test_edge_readings_of_a_busy_process_fit_its_window():
    """A process burning one core for 3 s, read from this process and interpolated at the edges of
    a 1 s window inside its run: its CPU is at most the window (it cannot use more than one core)
    and at least a fifth of it (it shares two cores with the suite), the machine's at least the
    process's, and the tree read of its parent (a shell) counts it too."""
    shell = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "$0"; true', BURN])
    try:
        time.sleep(0.3)
        burner = [c for c in measure._descendants(shell.pid)]
        assert burner, "the burning process was not found under its shell"
        with measure.EdgeCPU({"burner": (burner[0], False), "tree": (shell.pid, True)}, interval=0.05) as edge:
            time.sleep(0.3)
            open_at = time.perf_counter()
            time.sleep(1.0)
            close_at = time.perf_counter()
            time.sleep(0.2)
        read = edge.window(open_at, close_at)
    finally:
        shell.kill()
        shell.wait(10)
    wall = close_at - open_at
    burn, tree, machine = sum(read["burner"]), sum(read["tree"]), read["machine"][0]
    tol = measure.CPU_TOLERANCE_S
    assert 0.2 * wall <= burn <= wall + tol, (burn, wall)
    assert abs(tree - burn) <= tol, (tree, burn)
    assert burn <= machine + tol <= (os.cpu_count() or 1) * wall + 2 * tol, (burn, machine, wall)
    assert measure.cpu_consistency(burn, 0.0, machine, wall, os.cpu_count() or 1) == ""


def test_outside_the_read_span_the_edges_are_not_measured():
    edge = measure.EdgeCPU({}, interval=0.05)
    with edge:
        time.sleep(0.15)
    before = edge.samples["machine"][0][0] - 1.0
    assert all(math.isnan(x) for x in edge.at("machine", before))   # NaN, never a guess
    assert not any(math.isnan(x) for x in edge.at("machine", edge.samples["machine"][1][0]))


@pytest.mark.parametrize("experiment", ["pg_models", "pg_ceiling", "verify_postgres"])
def test_every_window_of_the_smoke_run_fits_the_machine(smoke_run, experiment):
    windows = smoke_run.table(experiment, "windows", ok_only=False)
    assert len(windows), f"{experiment} recorded no window"
    cores = os.cpu_count() or 1
    bad = windows[windows["cpu_check"] != ""]
    assert bad.empty, bad[["variant", "cpu_check"]].to_dict("records")
    tol = measure.CPU_TOLERANCE_S + measure.CPU_TOLERANCE_SHARE * cores * windows["wall_s"]
    assert (windows["machine_busy_s"] <= cores * windows["wall_s"] + tol).all()
    assert (windows["cpu_s"] + windows["server_cpu_s"] <= windows["machine_busy_s"] + tol).all()
