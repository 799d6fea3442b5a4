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
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
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
    (LOCKS, (r"^(lock_)?PyThread_acquire_lock", r"^PyThread_release_lock", r"\(threading\.py:", r"\(queue\.py:",
             r"_queuemodule\.c")),
    (SYSCALLS, (r"^(__libc_|__GI___|__)?(epoll_wait|epoll_ctl|e?poll|select|recv|recvfrom|recvmsg|send|sendto|"
                r"sendmsg|read|write|readv|writev|futex|syscall|connect|accept4?|getsockopt|setsockopt)"
                r"(64)?(_nocancel)? \(",)),
    (BSON, (r"\(bson/", r"_cbson")),
    (DRIVER_C, (r"\(libpq\.so", r"psycopg_binary", r"psycopg_c", r"\(asyncpg/(protocol|pgproto)/.*\.(pyx|c|pxd)",
                r"_cmessage", r"\(pymongo/.*\.c:")),
    (DRIVER_PY, (r"\((pymongo|motor|psycopg|psycopg_pool|asyncpg)/",)),
    (LOOP, (r"\(asyncio/", r"uvloop", r"\(selectors\.py", r"_asynciomodule\.c")),
    (HARNESS, (r"\(harness/",)),
)
_COMPILED = tuple((name, tuple(re.compile(p) for p in patterns)) for name, patterns in CATEGORIES)
_CODE = re.compile(r"\([^()]*\.(py|pyx|pxd|c|cc|cpp|h):\d+\)$")   # a frame that names its source line
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
_SAMPLING = re.compile(r"\.(native|python)-(\d+)hz\.collapsed$")


def profile_path(folder: Path, variant: str, native: bool = True, rate: int = RATE_HZ) -> Path:
    """Where `variant`'s profile goes, its name saying how it is sampled (`sampling_of`)."""
    return Path(folder) / f"profile_{variant}.{'native' if native else 'python'}-{int(rate)}hz.collapsed"


def sampling_of(out: Path, rate: int = RATE_HZ) -> tuple[bool, int]:
    """(native frames?, samples a second) that `out`'s name asks for; native at `rate` when it names none."""
    m = _SAMPLING.search(Path(out).name)
    return (m.group(1) == "native", int(m.group(2))) if m else (True, rate)


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


def attach(pid: int, out: Path, rate: int = RATE_HZ) -> subprocess.Popen:
    """Start py-spy sampling `pid` into `out` until `detach`: as `out`'s name asks (`sampling_of`),
    else native frames on at `rate`."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    native, rate = sampling_of(Path(out), rate)
    return subprocess.Popen(record_argv(Path(out), rate, native=native, pid=pid), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def detach(spy: subprocess.Popen, out: Path | None, timeout_s: float = 60.0) -> str | None:
    """Stop py-spy (an interrupt makes it write its profile) and wait for it: None when `out` was
    written, else why not in one line."""
    if spy.poll() is None:
        spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
        return f"py-spy did not stop within {timeout_s:g} s"
    if out is None or not Path(out).is_file():
        tail = (err or "").strip().splitlines()[-1:] or [f"exit status {spy.returncode}"]
        return f"py-spy wrote no profile: {tail[0]}"
    return None


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
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise HarnessError(f"py-spy could not profile {' '.join(program)}: {tail[0]}")
    return read_collapsed(out)
