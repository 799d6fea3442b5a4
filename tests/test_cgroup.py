"""The CPU quota pg_models' split cells give a fast client: set in a real cgroup of this machine,
read back by the process under it, enforced by the kernel, and undone."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import cgroup

BUSY = ("import time\nfrom harness.core.cgroup import capacity_cores\nprint(capacity_cores())\n"
        "t, c = time.monotonic(), time.process_time()\nwhile time.monotonic() - t < 0.6:\n    pass\n"
        "print(time.process_time() - c)")

needs_cgroup = pytest.mark.skipif(cgroup._hierarchy() is None, reason="no cgroup CPU controller mounted")


@needs_cgroup
def test_a_quota_is_read_back_and_enforced_on_children_and_then_removed():
    before = cgroup.quota_cores()
    with cgroup.quota(0.3) as held:
        assert held["cores_set"] == pytest.approx(0.3) and held["cores_read_back"] == pytest.approx(0.3)
        out = subprocess.run([sys.executable, "-c", BUSY], capture_output=True, text=True, check=True)
        read_back, used = (float(x) for x in out.stdout.split())
        assert read_back == pytest.approx(0.3)
        assert used <= 0.3 * 0.6 + 0.03, f"a busy child used {used:.3f} s of CPU in 0.6 s under a 0.3-core quota"
    assert cgroup.quota_cores() == before
    with cgroup.quota(0.05) as small:   # below the kernel's 1 ms quota at 10 ms: a longer period keeps the share
        assert small["quota_us"] >= 1000 and small["cores_read_back"] == pytest.approx(0.05)
    assert not Path(held["path"]).exists()


def test_without_a_cpu_controller_no_quota_is_set_and_none_is_read(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/\n")
    (proc / "self" / "mountinfo").write_text("22 1 0:20 / /sys rw - sysfs sysfs rw\n")
    assert cgroup.quota_cores(proc) == math.inf
    with pytest.raises(cgroup.QuotaError, match="no cgroup CPU controller"), cgroup.quota(0.5, proc=proc):
        pass
    with pytest.raises(cgroup.QuotaError, match="must be positive"), cgroup.quota(0.0):
        pass
