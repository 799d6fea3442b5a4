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
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import HarnessError

GIL = "waiting for or handing off the GIL"
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


def profile_program(program: Sequence[str], out: Path, rate: int = 100, native: bool = True,
                    timeout_s: float = 120.0) -> list[tuple[tuple[str, ...], int]]:
    """Run `program` under py-spy and return its stacks; a one-line HarnessError if py-spy fails."""
    done = subprocess.run(record_argv(out, rate, native, program=program), capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0 or not Path(out).is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise HarnessError(f"py-spy could not profile {' '.join(program)}: {tail[0]}")
    return read_collapsed(out)
