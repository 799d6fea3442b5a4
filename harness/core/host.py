"""What the kernel says about this machine: its processor (/proc/cpuinfo), the mitigations it runs
(/sys/devices/system/cpu/vulnerabilities) and one-line files such as the boot id.

One home for both readers of the processor: `environment` (the run's machine record) and
`calibration` (the ceilings, which name the CPU they were measured on) are siblings on one floor.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

import psutil

CPUINFO = Path("/proc/cpuinfo")
VULNERABILITIES_DIR = Path("/sys/devices/system/cpu/vulnerabilities")


def read_first_line(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().split("\n", 1)[0].strip() or None
    except OSError:
        return None


def _cpuinfo(cpuinfo: str | None) -> str:
    """`cpuinfo` as given (a test's text), else /proc/cpuinfo ("" where it cannot be read)."""
    if cpuinfo is not None:
        return cpuinfo
    try:
        return CPUINFO.read_text()
    except OSError:
        return ""


def cpu_model(cpuinfo: str | None = None) -> str:
    """The first `model name` of /proc/cpuinfo (any case of the key), else what Python reports."""
    for line in _cpuinfo(cpuinfo).splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_identity(cpuinfo: str | None = None) -> dict[str, Any]:
    """The first CPU of /proc/cpuinfo: vendor, family/model/stepping, the sha256 of its sorted flags
    (the flags differ between CPU generations and hypervisors sold under one model name) and MHz."""
    first: dict[str, str] = {}
    for line in _cpuinfo(cpuinfo).splitlines():
        if not line.strip():
            if first:
                break
            continue
        key, _, value = line.partition(":")
        first.setdefault(key.strip().lower(), value.strip())
    flags = sorted(set((first.get("flags") or "").split()))
    try:
        mhz: float | None = float(first["cpu mhz"])
    except (KeyError, ValueError):
        freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
        mhz = float(freq.current) if freq and freq.current else None
    return {"cpu_vendor": first.get("vendor_id"),
            "cpu_signature": "/".join(first.get(k, "?") for k in ("cpu family", "model", "stepping")),
            "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest() if flags else None,
            "cpu_flags_count": len(flags), "cpu_mhz": mhz}


def cpu_vulnerabilities(directory: Path = VULNERABILITIES_DIR) -> dict[str, str] | None:
    """Each file of the kernel's vulnerabilities directory -> its one line, e.g. "spectre_v2" ->
    "Mitigation: Retpolines; ..."; None where the kernel does not publish them."""
    try:
        files = sorted(p for p in directory.iterdir() if p.is_file())
    except OSError:
        return None
    out = {}
    for f in files:
        line = read_first_line(f)
        if line is not None:
            out[f.name] = line
    return out or None
