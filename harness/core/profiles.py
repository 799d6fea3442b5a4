"""Where a process spends its CPU: a py-spy profile, its samples counted by category.

A profile is py-spy's collapsed stacks (`py-spy record --format raw`): one line per distinct stack,
its frames from the root to the leaf joined by `;`, then how many samples it had. A frame reads
`function (file:line)` for Python code and `symbol (library)` for native code (`--native`).

Each sample goes to one category, decided by its leaf-most frame that is code: a Python frame
(`file.py:N`) or a native one with its source (`file.c:N`). Native frames without a source (the
interpreter's own, `libpython`; an address in libc) are passed over to their caller, so time the
interpreter spends running a Python function counts for that function; a native frame a pattern
names (a system call, the lock) decides where it stands. A frame of code no category names is
`other` (the program's own code, the standard library): a sample counts the CPU a frame spends
itself, not what it calls. The categories and their patterns are
written here once, in the order they are tried on each frame: the interpreter lock before system
calls (a thread waiting for the lock sleeps in a condition variable), the driver's C part before
its Python code (asyncpg's protocol is compiled from files under `asyncpg/`).

py-spy counts a thread in a sample whenever it is running or waiting for a core (runnable), not
only while it runs: a share is of the threads' active time. On a saturated machine that includes
their run-queue wait (`measure.thread_waits`), which the profiled pass reads beside each profile.

Linux `perf` is the third way (`PERF`): the kernel samples each core every 1/rate s of its time,
without pausing anything, and the samples of this process's threads are kept, so a share is of CPU
time alone and a thread is sampled as often as it runs. (Events on the process's own threads would
sample a thread only after each 1/rate s of its own CPU: 200 threads of a pool-bound client, each
running a few milliseconds a second, gave one sample in 8 s.) Python's own
frames reach perf through CPython 3.13's `perf_jit` trampolines, which 3.13 turns on only at
start-up (`perf_env`: the profiled window's process starts with them); stacks are unwound from a copy of each
sample's stack (DWARF), then folded (`fold_perf_script`) into the same collapsed form, frames
reading `function (module/file.py)` and `symbol (library)`. The interpreter's own frames between
two Python frames are left out, as py-spy leaves them out.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import HarnessError

GIL = "waiting for or handing off the GIL"
LOCKS = "threads' locks and conditions"
SYSCALLS = "system calls"
BSON = "BSON"
DRIVER_C = "the driver's C part or libpq"
DRIVER_PY = "the driver's Python code"
LOOP = "the event loop"
HARNESS = "the harness's own code"
OTHER = "other"

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (GIL, (r"^(take_gil|drop_gil|PyEval_RestoreThread|PyEval_SaveThread|PyEval_AcquireThread|"
           r"pthread_cond_(timed)?wait|_PyMutex_LockTimed) \(",)),
    (LOCKS, (r"^(lock_)?PyThread_acquire_lock", r"^PyThread_release_lock", r"\(threading\.py[:)]", r"\(queue\.py[:)]",
             r"_queuemodule\.c", r"\(lib-dynload/_queue\.")),
    (SYSCALLS, (r"^(__GI_)?(__libc_|___?)?(epoll_wait|epoll_ctl|e?poll|select|recv|recvfrom|recvmsg|send|sendto|"
                r"sendmsg|read|write|readv|writev|futex|syscall|connect|accept4?|getsockopt|setsockopt)"
                r"(64)?(_nocancel)? \(",)),
    (BSON, (r"\(bson/", r"_cbson")),
    (DRIVER_C, (r"\(libpq\.so", r"psycopg_binary", r"psycopg_c", r"\(asyncpg/(protocol|pgproto)/.*\.(pyx|c|pxd|so)",
                r"_cmessage", r"\(pymongo/.*\.c:")),
    (DRIVER_PY, (r"\((pymongo|motor|psycopg|psycopg_pool|asyncpg)/",)),
    (LOOP, (r"\(asyncio/", r"uvloop", r"\(selectors\.py", r"_asynciomodule\.c", r"\(lib-dynload/_asyncio\.")),
    (HARNESS, (r"\(harness/",)),
)
_COMPILED = tuple((name, tuple(re.compile(p) for p in patterns)) for name, patterns in CATEGORIES)
# a frame of code: it names its source (`file.py:12`; perf's Python frames name the file alone)
_CODE = re.compile(r"\(([^()]*\.(py|pyx|pxd|c|cc|cpp|h)|<frozen [^<>()]*>)(:\d+)?\)$")
NAMES = (*(name for name, _ in CATEGORIES), OTHER)
# each category's short name, for metric names and table columns
KEYS = {GIL: "gil", LOCKS: "locks", SYSCALLS: "syscalls", BSON: "bson", DRIVER_C: "driver_c", DRIVER_PY: "driver_py",
        LOOP: "loop", HARNESS: "harness", OTHER: "other"}
RATE_HZ = 100   # py-spy's default; what it costs the client is measured per run (the profiled pass)
# How a profile is taken travels in its file's name (`profile_<variant>.native-100hz.collapsed`):
# the workloads pass a profile's path through to `measure.Window` unchanged, so the profiled pass
# can choose native frames or Python frames only, and the rate, without the workloads' code (and
# so the measured experiments' versions) knowing. Python frames only are read without pausing the
# process (`--nonblocking`): the way to profile a client of many threads that pausing slows down.
# The ways of sampling: py-spy with native frames (pausing the process), py-spy with Python frames
# only (not pausing it), Linux perf (on-CPU samples, native and Python frames, nothing paused).
NATIVE, PYTHON, PERF = "native", "python", "perf"
HOWS = (NATIVE, PYTHON, PERF)
_SAMPLING = re.compile(r"\.(native|python|perf)-(\d+)hz\.collapsed$")
PERF_PYTHON = (3, 13)          # the first CPython with perf_jit trampolines (DWARF-unwindable)
PERF_STACK_BYTES = 16384       # the stack copied per sample for DWARF unwinding
PERF_START_S = 10.0            # how long perf may take to attach before the window fails
PERF_ENV = "PYTHON_PERF_JIT_SUPPORT=1"
REPO_ROOT = Path(__file__).resolve().parents[2]


def profile_path(folder: Path, variant: str, how: str = NATIVE, rate: int = RATE_HZ) -> Path:
    """Where `variant`'s profile goes, its name saying how it is sampled (`sampling_of`)."""
    if how not in HOWS:
        raise ValueError(f"no way of sampling {how!r}: one of {', '.join(HOWS)}")
    return Path(folder) / f"profile_{variant}.{how}-{int(rate)}hz.collapsed"


def sampling_of(out: Path, rate: int = RATE_HZ) -> tuple[str, int]:
    """(how, samples a second) that `out`'s name asks for; native at `rate` when it names none."""
    m = _SAMPLING.search(Path(out).name)
    return (m.group(1), int(m.group(2))) if m else (NATIVE, rate)


def read_collapsed(path: Path) -> list[tuple[tuple[str, ...], int]]:
    """The stacks of a raw py-spy profile, each with its sample count (a line that is not `STACK N`
    is skipped)."""
    stacks = []
    for line in Path(path).read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((tuple(stack.split(";")), int(count)))
    return stacks


def category_of(stack: Sequence[str]) -> str:
    """The category of one sample: that of its leaf-most frame a pattern names or that is code."""
    for frame in reversed(stack):
        for name, patterns in _COMPILED:
            if any(p.search(frame) for p in patterns):
                return name
        if _CODE.search(frame):
            return OTHER
    return OTHER


def counts(stacks: Iterable[tuple[Sequence[str], int]]) -> Counter:
    """Samples per category (every category present, zeros included)."""
    out: Counter = Counter({name: 0 for name in NAMES})
    for stack, n in stacks:
        out[category_of(stack)] += n
    return out


def shares(stacks: Iterable[tuple[Sequence[str], int]]) -> dict[str, float]:
    """Each category's share of the samples (0 when there are none)."""
    got = counts(stacks)
    total = sum(got.values())
    return {name: (got[name] / total if total else 0.0) for name in NAMES}


def frame_category(frame: str) -> str:
    """The category a single frame's pattern names, or '' (for a flame graph's colours)."""
    for name, patterns in _COMPILED:
        if any(p.search(frame) for p in patterns):
            return name
    return ""


def flame_nodes(stacks: Iterable[tuple[Sequence[str], int]], min_share: float = 0.005,
                max_depth: int = 80) -> list[tuple[int, float, float, str]]:
    """A flame graph's boxes: (depth, start, width, frame), start and width as shares of all samples,
    callers below callees, siblings in name order; boxes narrower than `min_share` (and what they
    call) are left out, as are frames deeper than `max_depth`."""
    tree: dict = {}
    total = 0
    for stack, n in stacks:
        total += n
        node = tree
        for frame in stack[:max_depth]:
            entry = node.setdefault(frame, [0, {}])
            entry[0] += n
            node = entry[1]
    out: list[tuple[int, float, float, str]] = []

    def walk(node: dict, depth: int, start: float) -> None:
        for frame in sorted(node):
            n, children = node[frame]
            width = n / total
            if width >= min_share:
                out.append((depth, start, width, frame))
                walk(children, depth + 1, start)
            start += width
    if total:
        walk(tree, 0, 0.0)
    return out


def py_spy() -> Path:
    """The py-spy of this interpreter's environment (the lock installs it)."""
    path = Path(sys.executable).with_name("py-spy")
    if not path.is_file():
        raise HarnessError(f"py-spy is not installed beside {sys.executable}: run scripts/bootstrap")
    return path


def record_argv(out: Path, rate: int = 100, native: bool = True, pid: int | None = None,
                program: Sequence[str] = (), duration_s: float | None = None) -> list[str]:
    """The py-spy command that samples `pid` (or runs `program`) `rate` times a second into `out`
    as collapsed stacks, native frames included when `native`."""
    if (pid is None) == (not program):
        raise ValueError("profile either a running pid or a program")
    argv = [str(py_spy()), "record", "--format", "raw", "--output", str(out), "--rate", str(rate)]
    argv += ["--native"] if native else ["--nonblocking"]   # native frames need the process paused
    argv += ["--duration", str(max(1, round(duration_s)))] if duration_s else []
    return argv + (["--pid", str(pid)] if pid is not None else ["--", *program])


def _last_line(text: str | None, otherwise: str) -> str:
    """The last line a profiler printed (its error, as a rule), else `otherwise`."""
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else otherwise


@dataclass
class Sampler:
    """A profiler sampling a process until `detach`: py-spy, or perf with its working folder."""

    proc: subprocess.Popen
    how: str
    pid: int
    work: Path | None = None     # perf's raw data and control pipes


def attach(pid: int, out: Path, rate: int = RATE_HZ) -> Sampler:
    """Start sampling `pid` into `out` until `detach`, as `out`'s name asks (`sampling_of`), else
    with py-spy's native frames at `rate`. perf samples only this process (`pid` must be ours: its
    Python frames need its trampolines, `perf_env`) and only from CPython 3.13."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    how, rate = sampling_of(Path(out), rate)
    if how == PERF:
        return _perf_attach(pid, Path(out), rate)
    proc = subprocess.Popen(record_argv(Path(out), rate, native=how == NATIVE, pid=pid), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return Sampler(proc, how, pid)


def detach(spy: Sampler, out: Path | None, timeout_s: float = 60.0) -> str | None:
    """Stop the profiler (an interrupt makes it write its profile) and wait for it: None when `out`
    was written, else why not in one line."""
    tool = "perf" if spy.how == PERF else "py-spy"
    try:
        if spy.proc.poll() is None:
            spy.proc.send_signal(signal.SIGINT)
        try:
            _, err = spy.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            spy.proc.kill()
            _, err = spy.proc.communicate()
            return f"{tool} did not stop within {timeout_s:g} s"
        if spy.how == PERF:
            return _perf_fold(spy, out, err, timeout_s)
        if out is None or not Path(out).is_file():
            return f"py-spy wrote no profile: {_last_line(err, f'exit status {spy.proc.returncode}')}"
        return None
    finally:
        if spy.how == PERF:
            _perf_cleanup(spy)


def perf_env(out: Path | None) -> dict[str, str]:
    """What a child process's environment adds when its window is profiled into `out`: perf's
    trampolines, which CPython 3.13 turns on only at start-up (so a plain window's child goes
    without them, and their cost is counted in the profiler's)."""
    if out is None or sampling_of(Path(out))[0] != PERF:
        return {}
    name, _, value = PERF_ENV.partition("=")
    return {name: value}


def perf() -> str:
    """The perf binary (Debian's linux-perf, which scripts/bootstrap installs)."""
    found = shutil.which("perf")
    if found is None:
        raise HarnessError("perf is not installed: run scripts/bootstrap (it installs Debian's linux-perf)")
    return found


def _perf_attach(pid: int, out: Path, rate: int) -> Sampler:
    if pid != os.getpid():
        raise HarnessError("perf profiles only the process that asks (its Python frames need its trampolines)")
    if sys.version_info[:2] < PERF_PYTHON:
        raise HarnessError(f"perf names Python frames from CPython {'.'.join(map(str, PERF_PYTHON))} on "
                           f"(perf_jit); this is {platform.python_version()}")
    binary = perf()
    if not sys.is_stack_trampoline_active():   # type: ignore[attr-defined]  # 3.12+
        # 3.13 turns perf_jit on only at start-up; 3.14 also on demand
        try:
            sys.activate_stack_trampoline("perf_jit")   # type: ignore[attr-defined]
        except ValueError:
            raise HarnessError(f"perf names Python frames only when the process starts with "
                               f"{PERF_ENV} (profiles.perf_env)") from None
    work = Path(tempfile.mkdtemp(prefix="perf-", dir=out.parent))
    ctl, ack = work / "ctl", work / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    # every core on a fixed period of its time (not a frequency perf would tune as it goes; the
    # samples of other processes are dropped when folding), started disabled and enabled through the
    # control pipe once perf is ready, so the window is sampled from its start
    argv = [binary, "record", "-a", "-e", "cpu-clock", "-c", str(round(1e9 / rate)), "-k", "1", "-N", "-q",
            "--call-graph", f"dwarf,{PERF_STACK_BYTES}", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
            "-o", str(work / "perf.data")]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=_perf_env(work))
    spy = Sampler(proc, PERF, pid, work)
    # read-write opens never block on a pipe, even before perf has opened its end
    ctl_fd, ack_fd = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
    try:
        os.write(ctl_fd, b"enable\n")
        deadline = time.monotonic() + PERF_START_S
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([ack_fd], [], [], 0.1)[0]:
                os.read(ack_fd, 64)
                return spy
    finally:
        os.close(ctl_fd)
        os.close(ack_fd)
    if proc.poll() is None:
        proc.kill()
    err = proc.communicate()[1]
    _perf_cleanup(spy)
    raise HarnessError(f"perf could not attach: {_last_line(err, f'no answer within {PERF_START_S:g} s')}")


def _perf_env(work: Path) -> dict[str, str]:
    """perf's environment: its home, and so its build-id cache, in `work` (removed with it), not
    ~/.debug, where `perf inject --jit` would leave a code file per Python function of every profile."""
    return dict(os.environ, HOME=str(work), PERF_BUILDID_DIR=str(work / ".debug"))


def _perf_fold(spy: Sampler, out: Path | None, err: str, timeout_s: float) -> str | None:
    """perf's raw samples, their Python frames named (`perf inject --jit`), folded into `out`."""
    assert spy.work is not None
    raw, named = spy.work / "perf.data", spy.work / "perf.jit.data"
    if out is None or not raw.is_file():
        return f"perf wrote no profile: {_last_line(err, f'exit status {spy.proc.returncode}')}"
    binary = perf()
    steps = ([binary, "inject", "--jit", "-i", str(raw), "-o", str(named)],
             [binary, "script", "-F", "ip,sym,dso", "--no-inline", "--pid", str(spy.pid), "-i", str(named)])
    text = ""
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, errors="replace",
                                  env=_perf_env(spy.work))
        except subprocess.TimeoutExpired:
            return f"perf {argv[1]} did not finish within {timeout_s:g} s"
        if done.returncode != 0:
            return f"perf {argv[1]} failed: {_last_line(done.stderr, f'exit status {done.returncode}')}"
        text = done.stdout
    stacks = fold_perf_script(text)
    Path(out).write_text("".join(f"{';'.join(stack)} {n}\n" for stack, n in stacks))
    return None


def _perf_cleanup(spy: Sampler) -> None:
    """Remove perf's data and the code files it wrote for the JIT."""
    if spy.work is not None:
        shutil.rmtree(spy.work, ignore_errors=True)
    # CPython writes /tmp/jit-<pid>.dump; `perf inject --jit` a code file per Python function beside it
    for path in (*glob.glob(f"/tmp/jitted-{spy.pid}-*.so"), f"/tmp/jit-{spy.pid}.dump"):
        Path(path).unlink(missing_ok=True)


_PERF_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(?P<sym>.*) \((?P<dso>[^()]*)\)$")
_INTERPRETER_LIB = re.compile(r"^(libpython\d|python\d)")
_INTERPRETER_GLUE = ("py_trampoline_evaluator", "[unknown]")
_STDLIB = re.compile(r"/lib/python\d\.\d+t?/(?P<rest>.*)$")


def short_path(path: str) -> str:
    """A file as py-spy names it: from its package (`asyncio/events.py`, `harness/core/x.py`), a
    library by its name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    m = _STDLIB.search(path)
    if m:
        return m.group("rest")
    root = str(REPO_ROOT) + "/"
    if path.startswith(root):
        return path[len(root):]
    return Path(path).name if path.startswith("/") else path


def _perf_frame(sym: str, dso: str) -> tuple[str, bool]:
    """(the frame in py-spy's form, whether it is Python's)."""
    if sym.startswith("py::"):
        name, _, path = sym[4:].rpartition(":")
        return f"{name} ({short_path(path)})", True
    sym = sym.split("@", 1)[0]            # glibc's symbol versions: pthread_cond_wait@@GLIBC_2.3.2
    where = "kernel" if dso.startswith("[kernel") else short_path(dso)
    return f"{sym} ({where})".replace(";", ","), False


def fold_perf_script(text: str) -> list[tuple[tuple[str, ...], int]]:
    """`perf script -F ip,sym,dso` output (one block a sample, leaf first) as collapsed stacks with
    counts, root first: the native frames a Python frame calls are kept, the interpreter's own frames
    between Python frames left out (as py-spy leaves them out), unknown frames dropped."""
    out: Counter = Counter()

    def flush(frames: list[tuple[str, bool, bool]], unknown: str) -> None:
        # (frame, Python's?, the interpreter's own?), leaf first: the interpreter's own frames count
        # only leafward of the leaf-most Python frame, where they are what that Python code runs.
        # A sample none of whose frames could be named (inside the vDSO, say) still counts, as its
        # leaf: dropping it would undercount the process and bias every share.
        leaf_py = next((i for i, (_, is_py, _) in enumerate(frames) if is_py), len(frames))
        kept = [name for i, (name, _, interpreter) in enumerate(frames) if i < leaf_py or not interpreter]
        if kept or unknown:
            out[tuple(reversed(kept)) or (unknown,)] += 1

    frames: list[tuple[str, bool, bool]] = []
    unknown = ""
    for line in text.splitlines():
        m = _PERF_FRAME.match(line)
        if m is None:
            if not line.strip():
                flush(frames, unknown)
                frames, unknown = [], ""
            continue
        sym, dso = m.group("sym"), m.group("dso")
        if sym in _INTERPRETER_GLUE or dso == "[unknown]":
            unknown = unknown or _perf_frame(sym, dso)[0]
            continue
        name, is_py = _perf_frame(sym, dso)
        frames.append((name, is_py, not is_py and bool(_INTERPRETER_LIB.match(name.rpartition(" (")[2]))))
    flush(frames, unknown)
    return sorted(out.items())


def speedscope(stacks: Sequence[tuple[Sequence[str], int]], name: str) -> dict:
    """The stacks as a speedscope file (https://www.speedscope.app/file-format-schema.json): one
    sampled profile, one sample per distinct stack weighted by its count."""
    frames: dict[str, int] = {}
    samples = [[frames.setdefault(f, len(frames)) for f in stack] for stack, _ in stacks]
    weights = [n for _, n in stacks]
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": f} for f in frames]},
            "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                          "endValue": sum(weights), "samples": samples, "weights": weights}],
            "name": name, "exporter": "harness.core.profiles"}


def write_speedscope(stacks: Sequence[tuple[Sequence[str], int]], name: str, out: Path) -> Path:
    Path(out).write_text(json.dumps(speedscope(stacks, name), separators=(",", ":")))
    return Path(out)


def read_speedscope(path: Path) -> list[tuple[tuple[str, ...], int]]:
    """The stacks of a speedscope file `write_speedscope` wrote (its first profile)."""
    doc = json.loads(Path(path).read_text())
    names = [f["name"] for f in doc["shared"]["frames"]]
    profile = doc["profiles"][0]
    return [(tuple(names[i] for i in sample), int(w)) for sample, w in zip(profile["samples"], profile["weights"])]


def profile_program(program: Sequence[str], out: Path, rate: int = 100, native: bool = True,
                    timeout_s: float = 120.0) -> list[tuple[tuple[str, ...], int]]:
    """Run `program` under py-spy and return its stacks; a one-line HarnessError if py-spy fails."""
    done = subprocess.run(record_argv(out, rate, native, program=program), capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0 or not Path(out).is_file():
        raise HarnessError(f"py-spy could not profile {' '.join(program)}: "
                           f"{_last_line(done.stderr or done.stdout, 'no output')}")
    return read_collapsed(out)
