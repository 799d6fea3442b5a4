"""Child processes that never outlive the harness.

Every server, app and load generator the harness starts goes through `start()`. Each child:
- gets PR_SET_PDEATHSIG=SIGTERM, so the kernel stops it even if the harness is SIGKILLed;
- runs in its own process group, so stopping it also stops whatever it forked;
- is listed in a module-level registry that atexit and the SIGTERM/SIGHUP handlers drain.

`run_child()` is the one child-process service: run `python -m MODULE SPEC RESULT` with a typed
(dataclass) spec and a time-out, and get back what the child wrote to RESULT (an atomic JSON
file). In the child, `child_main()` reads the spec, calls the function, and writes its result, or
the error, whatever happens. The study's workers and pg_models' per-variant children use it.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .config import REPO_ROOT
from .measure import error_text, readings_at_exit

_PR_SET_PDEATHSIG = 1
_live: list[ManagedProcess] = []
_lock = threading.Lock()


def _die_with_parent() -> None:  # runs in the child between fork and exec, after setuid
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A free TCP port on the loopback interface (the OS picks it)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: ManagedProcess | None = None) -> bool:
    """True once 127.0.0.1:port accepts connections; False on timeout or if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


class ManagedProcess:
    """A started child with its log file; `stop()` is idempotent."""

    def __init__(self, name: str, popen: subprocess.Popen, log_path: Path):
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the child exits, or None if it is still running after `timeout` s."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_unreaped(self, timeout: float) -> bool:
        """True once the child has exited, left unreaped (a zombie, whose /proc entry still holds
        its final CPU times until `wait()` reaps it); False if it is still running after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # already reaped
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(5)
        else:
            # The leader is gone; make sure nothing it forked lingers in its group.
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with _lock:
            if self in _live:
                _live.remove(self)

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, returncode={self.popen.poll()})"


def start(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    detach: bool = False,
) -> ManagedProcess:
    """Start `argv` with stdout+stderr appended to `log_path`, registered for cleanup.

    `detach=True` (only for `servers up`) leaves the child running after the harness exits;
    `servers down` stops it by pid.
    """
    install_signal_handlers()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    try:
        popen = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            user=user,
            process_group=0,
            preexec_fn=None if detach else _die_with_parent,
        )
    finally:
        log.close()
    proc = ManagedProcess(name, popen, log_path)
    if not detach:
        with _lock:
            _live.append(proc)
    return proc


def stop_pid(pid: int, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Stop a process (and its group) this harness did not start in this process: `servers down`."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_all() -> None:
    """Stop every child still running, newest first (apps before the servers they use)."""
    with _lock:
        procs = list(reversed(_live))
    for proc in procs:
        proc.stop()


_handlers_installed = False


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP raise SystemExit (so cleanup runs as on Ctrl-C), and children are stopped at exit.

    Installed by the first child start, and by a run before it does anything: a run on a stack
    that `servers up` left starts no child for a while, and a SIGTERM there must still end it as
    `interrupted` rather than kill it with its manifest saying `running`."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)
        if previous not in (signal.SIG_DFL, None):
            continue  # someone else owns this signal; atexit still covers normal exits

        def _on_signal(signum, frame):
            # Raise so that context managers unwind (and run their own cleanup) as on Ctrl-C.
            raise SystemExit(128 + signum)

        signal.signal(sig, _on_signal)


# ---------------------------------------------------------------------- the child-process service

S = TypeVar("S")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to `path` through a temporary file and a rename: a reader sees all or nothing."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass
class ChildOutcome:
    """What a child run through `run_child()` left: its result (None if it wrote none), and why it
    failed (`error`: None when the child wrote a result without an `error` key)."""

    result: dict[str, Any] | None
    error: str | None
    returncode: int | None
    timed_out: bool
    log_tail: str


def run_child(name: str, module: str, spec: Any, *, result_path: Path, log_path: Path,
              timeout_s: float, env: dict[str, str] | None = None, python: str | None = None,
              tail_lines: int = 15, on_start: Callable[[int], None] | None = None) -> ChildOutcome:
    """Run `python -m module SPEC RESULT` for `spec` (a dataclass, or a JSON-able dict), stopped
    after `timeout_s`. `python` is the interpreter (default: this one; another venv's for a client
    measured on another Python); `tail_lines` of its log are kept in the outcome; `on_start` is
    called with the child's pid as soon as it exists (a CPU reader that watches it). Once the child
    has exited, and before it is reaped, the readings asked for then are taken
    (`measure.read_at_exit`: that reader's last reading of it, after its last window however soon
    it exits).

    The spec file lives in a private temporary directory (it may hold credentials) and is removed
    when the child ends.
    """
    result_path.unlink(missing_ok=True)
    body = spec if isinstance(spec, dict) else dataclasses.asdict(spec)
    with tempfile.TemporaryDirectory(prefix="harness-child-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(body))
        spec_path.chmod(0o600)
        proc = start(name, [python or sys.executable, "-m", module, str(spec_path), str(result_path)],
                     log_path, env=dict(env or os.environ, PYTHONUNBUFFERED="1"), cwd=REPO_ROOT)
        try:
            if on_start is not None:
                on_start(proc.pid)
            exited = proc.wait_unreaped(timeout_s)
            for reading in readings_at_exit(proc.pid):
                if exited:
                    reading()
            code = proc.wait(None if exited else 0)
        finally:
            proc.stop()
    result = None
    if result_path.exists():
        try:
            result = json.loads(result_path.read_text())
        except ValueError:
            result = None
    tail = proc.log_tail(tail_lines)
    if code is None:
        error: str | None = f"timed out after {timeout_s:g} s"
    elif result is None:
        error = f"exited with code {proc.poll()} before writing a result:\n{tail}"
    else:
        error = result.get("error")
    return ChildOutcome(result, error, proc.poll(), code is None, tail)


def child_main(fn: Callable[[S], dict[str, Any]], spec_type: type[S], argv: Sequence[str] | None = None) -> int:
    """The child's side of `run_child()`: `python -m module SPEC RESULT`. Exit 0 if no error."""
    argv = list(sys.argv if argv is None else argv)
    spec_path, result_path = Path(argv[1]), Path(argv[2])
    try:
        spec = spec_type(**json.loads(spec_path.read_text()))
        result = fn(spec)
    except BaseException as e:  # recorded for the parent, which decides what a failure means
        result = {"error": error_text(e, 2000), "traceback": traceback.format_exc()}
        print(result["traceback"], file=sys.stderr)
    write_json_atomic(result_path, result)
    return 0 if "error" not in result else 1
