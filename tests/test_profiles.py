"""Where the CPU goes (core/profiles.py): the categories read from hand-made stacks, and from real
py-spy profiles of small programs whose answer is known."""

from __future__ import annotations

import sys
import textwrap

import pytest

from harness.core import profiles
from harness.core.errors import HarnessError


@pytest.mark.parametrize(("stack", "category"), [
    (["<module> (app.py:1)", "decode (bson/__init__.py:1127)", "get_value (bson/_cbsonmodule.c:2290)"], profiles.BSON),
    (["main (app.py:1)", "execute (psycopg/cursor.py:720)", "PQexec (libpq.so.5)"], profiles.DRIVER_C),
    (["main (app.py:1)", "find_one (pymongo/asynchronous/collection.py:1700)"], profiles.DRIVER_PY),
    (["main (app.py:1)", "execute (psycopg/cursor.py:720)", "__libc_recv (libc.so.6)"], profiles.SYSCALLS),
    (["run (threading.py:982)", "spin (app.py:4)", "pthread_cond_timedwait (libc.so.6)", "0x7f3a (libc.so.6)"],
     profiles.GIL),
    (["BaseEventLoop._run_once (asyncio/base_events.py:1922)", "Handle._run (asyncio/events.py:80)"], profiles.LOOP),
    (["Handle._run (asyncio/events.py:80)", "task_step (_asynciomodule.c:2100)"], profiles.LOOP),
    (["run (harness/core/openloop.py:90)", "_PyEval_EvalFrameDefault (libpython3.11.so.1.0)"], profiles.HARNESS),
    # the program's own code claims its samples: the event loop that called it does not
    (["Handle._run (asyncio/events.py:80)", "worker (app.py:4)", "PyObject_Malloc (libpython3.11.so.1.0)"],
     profiles.OTHER),
    (["gc_collect_main (libpython3.11.so.1.0)"], profiles.OTHER),
    # a pool's waiting thread: the lock's native frames decide, the unnamed address below them does not
    (["getconn (psycopg_pool/pool.py:190)", "wait (threading.py:320)",
      "lock_PyThread_acquire_lock (libpython3.11.so.1.0)", "PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
      "0x7f2c3caa3f16 (libc.so.6)"], profiles.LOCKS),
    (["get (queue.py:171)", "wait (threading.py:320)"], profiles.LOCKS),
])
def test_a_sample_goes_to_its_leaf_most_frame_of_code(stack, category):
    assert profiles.category_of(stack) == category


def test_shares_add_up_and_name_every_category(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text("a (x.py:1);decode (bson/__init__.py:3) 3\na (x.py:1) 1\nnot a stack line\n")
    stacks = profiles.read_collapsed(raw)
    assert stacks == [(("a (x.py:1)", "decode (bson/__init__.py:3)"), 3), (("a (x.py:1)",), 1)]
    got = profiles.shares(stacks)
    assert set(got) == set(profiles.NAMES) and got[profiles.BSON] == 0.75 and got[profiles.OTHER] == 0.25
    assert abs(sum(got.values()) - 1) < 1e-12


KNOWN = {
    "bson": ("""
        import bson, time
        doc = {"customer": "c1", "items": [{"sku": i, "qty": i % 5, "price": i * 1.5} for i in range(50)]}
        stop = time.monotonic() + 1.5
        while time.monotonic() < stop:
            bson.decode(bson.encode(doc))
        """, profiles.BSON, 0.6),
    "event loop": ("""
        import asyncio, time
        async def worker(stop):
            while time.monotonic() < stop:
                await asyncio.sleep(0)
        async def main():
            stop = time.monotonic() + 1.5
            await asyncio.gather(*(worker(stop) for _ in range(1000)))
        asyncio.run(main())
        """, profiles.LOOP, 0.5),
    "the interpreter lock": ("""
        import threading, time
        def spin():
            stop, s = time.monotonic() + 1.5, 0
            while time.monotonic() < stop:
                s += 1
        threads = [threading.Thread(target=spin) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        """, profiles.GIL, 0.2),
    # two threads handing a value back and forth through queues: their time is in the queues' locks
    "threads' locks": ("""
        import queue, threading, time
        there, back = queue.Queue(), queue.Queue()
        def pong():
            while (x := there.get()) is not None:
                back.put(x)
        t = threading.Thread(target=pong)
        t.start()
        stop = time.monotonic() + 1.5
        while time.monotonic() < stop:
            there.put(1)
            back.get()
        there.put(None)
        t.join()
        """, profiles.LOCKS, 0.6),
    "plain Python": ("""
        import time
        stop, s = time.monotonic() + 1.5, 0
        while time.monotonic() < stop:
            s += sum(i * i for i in range(1000))
        """, profiles.OTHER, 0.9),
}


@pytest.mark.parametrize("name", KNOWN)
def test_a_program_whose_answer_is_known_reads_so(tmp_path, name):
    source, category, at_least = KNOWN[name]
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(source))
    stacks = profiles.profile_program([sys.executable, str(program)], tmp_path / "profile.txt", rate=200)
    got = profiles.shares(stacks)
    assert sum(n for _, n in stacks) >= 100, "py-spy took too few samples to say"
    assert got[category] >= at_least, {k: round(v, 2) for k, v in got.items() if v}


def test_a_program_that_cannot_be_profiled_is_one_line(tmp_path):
    with pytest.raises(HarnessError, match="py-spy could not profile"):
        profiles.profile_program([str(tmp_path / "no-such-program")], tmp_path / "p.txt")


# -- Linux perf --------------------------------------------------------------------------------------

# `perf script -F ip,sym,dso` prints each sample's frames leaf first, a blank line after each sample
GIL_SAMPLE = """\
\t      ffff8001 schedule ([kernel.kallsyms])
\t          7f02 pthread_cond_timedwait@@GLIBC_2.3.2 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t          7f01 take_gil (/opt/py/lib/libpython3.13.so.1.0)
"""
DRIVER_SAMPLE = """\
\t          7f03 PyObject_Vectorcall (/opt/py/lib/libpython3.13.so.1.0)
\t            85 py::Connection.wait:/venv/lib/python3.13/site-packages/psycopg/connection.py (/tmp/jitted-1-2.so)
\t          7f04 py_trampoline_evaluator (/opt/py/lib/libpython3.13.so.1.0)
\t          7f05 _PyEval_EvalFrameDefault (/opt/py/lib/libpython3.13.so.1.0)
\t            85 py::request_sync:/work/main/harness/experiments/postgres/workload.py (/tmp/jitted-1-1.so)
\t          7f06 [unknown] ([unknown])
\t          7f07 start_thread (/usr/lib/x86_64-linux-gnu/libc.so.6)
"""
# a sample whose unwinding found nothing it could name (a clock read in the vDSO)
VDSO_SAMPLE = "\t             b66 [unknown] ([vdso])\n"
PERF_SCRIPT = "\n".join((GIL_SAMPLE, DRIVER_SAMPLE, DRIVER_SAMPLE, VDSO_SAMPLE))   # the driver's stack twice


def test_perf_s_samples_fold_as_py_spy_writes_them(monkeypatch):
    monkeypatch.setattr(profiles, "REPO_ROOT", profiles.Path("/work/main"))
    stacks = dict(profiles.fold_perf_script(PERF_SCRIPT))
    assert len(stacks) == 3 and stacks[("[unknown] ([vdso])",)] == 1   # every sample counts, named or not
    # a sample without a Python frame keeps every frame, root first: the kernel's named so, glibc's
    # symbol version dropped
    gil = ("take_gil (libpython3.13.so.1.0)", "pthread_cond_timedwait (libc.so.6)", "schedule (kernel)")
    assert stacks[gil] == 1
    # two samples of one stack count twice; the interpreter's frames between Python frames are left out,
    # those a Python frame calls kept; paths as py-spy writes them; unknown frames dropped
    assert stacks[("start_thread (libc.so.6)", "request_sync (harness/experiments/postgres/workload.py)",
                   "Connection.wait (psycopg/connection.py)", "PyObject_Vectorcall (libpython3.13.so.1.0)")] == 2
    assert profiles.category_of(gil) == profiles.GIL
    assert profiles.category_of(("request_sync (harness/experiments/postgres/workload.py)",
                                 "Connection.wait (psycopg/connection.py)")) == profiles.DRIVER_PY


def test_perf_needs_the_trampolines_of_a_newer_python(tmp_path):
    from harness.core.measure import Window

    out = profiles.profile_path(tmp_path, "v", profiles.PERF, 100)
    with Window("v", profile=out) as w:
        sum(i * i for i in range(10_000))
    assert w.wall_s > 0 and "\n" not in (w.profile_error or "")
    if sys.version_info[:2] < profiles.PERF_PYTHON:
        assert "CPython 3.13" in w.profile_error
    else:   # a 3.13 started without them
        assert profiles.PERF_ENV in w.profile_error
    assert not out.exists() and not list(tmp_path.iterdir())


# A hundred threads, each running in short bursts: events on each thread would sample hardly any
# (each runs less than 1/rate s of CPU in the window); per-core sampling sees them as they run. The
# threads run only inside the window, so its CPU and the samples cover the same time.
PERF_PROGRAM = """
import os, sys, threading, time
from pathlib import Path
from harness.core.measure import Window

def burst(stop):
    while not stop.is_set():
        end = time.monotonic() + 0.0001
        while time.monotonic() < end:
            pass
        time.sleep(0.02)

stop = threading.Event()
with Window("v", profile=Path(sys.argv[1])) as w:
    threads = [threading.Thread(target=burst, args=(stop,)) for _ in range(100)]
    [t.start() for t in threads]
    time.sleep(1.5)
    stop.set()
    [t.join() for t in threads]
print(os.getpid(), w.cpu_s, w.profile_error or "")
"""


def test_perf_samples_many_threads_as_often_as_they_run(tmp_path):
    import glob
    import subprocess

    from harness.core import interpreters

    venv = interpreters.ensure_venv(interpreters.resolve("3.13"), build=False)
    program, out = tmp_path / "program.py", profiles.profile_path(tmp_path, "v", profiles.PERF, 100)
    program.write_text(PERF_PROGRAM)
    done = subprocess.run([venv.python, str(program), str(out)], capture_output=True, text=True, timeout=120,
                          env=interpreters.child_env(profiles.perf_env(out)))
    assert done.returncode == 0, done.stderr[-2000:]
    pid, cpu_s, *error = done.stdout.split()
    assert not error, error
    stacks = profiles.read_collapsed(out)
    samples = sum(n for _, n in stacks)
    assert 0.5 <= samples / (float(cpu_s) * 100) <= 1.5, (samples, cpu_s)
    in_burst = sum(n for s, n in stacks if "burst (program.py)" in s)
    assert in_burst >= 0.5 * samples, sorted(stacks, key=lambda x: -x[1])[:3]
    # nothing left behind: perf's folder, the JIT's code files, a build-id cache
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([program.name, out.name])
    assert not glob.glob(f"/tmp/jitted-{pid}-*.so") and not glob.glob(f"/tmp/jit-{pid}.dump")
