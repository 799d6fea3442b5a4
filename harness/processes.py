"""Child processes that never outlive the harness.

Every server, app and load generator the harness starts goes through `start()`. Each child:
- gets PR_SET_PDEATHSIG=SIGTERM, so the kernel stops it even if the harness is SIGKILLed;
- runs in its own process group, so stopping it also stops whatever it forked;
- is listed in a module-level registry that atexit and the SIGTERM/SIGHUP handlers drain.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Sequence

_PR_SET_PDEATHSIG = 1
_live: list["ManagedProcess"] = []
_lock = threading.Lock()


def _die_with_parent() -> None:  # runs in the child between fork and exec, after setuid
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A free TCP port on the loopback interface (the OS picks it)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: "ManagedProcess | None" = None) -> bool:
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
    _install_handlers()
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


def _install_handlers() -> None:
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
