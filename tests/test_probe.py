"""The loop-lateness probe sees a stall of known length, and none when nothing blocks."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness import stats
from harness.probe import LoopProbe, measure_resolution


def test_probe_reports_a_blocking_call_of_known_length():
    async def main():
        async with LoopProbe() as probe:
            await asyncio.sleep(0.05)
            blocked_at = time.perf_counter() - probe.t0
            time.sleep(0.2)  # blocks the loop on purpose
            await asyncio.sleep(0.05)
        return probe, blocked_at

    probe, blocked_at = asyncio.run(main())
    offsets = [o for o, _ in probe.samples]
    late = [x for _, x in probe.samples]
    worst = max(range(len(late)), key=late.__getitem__)
    assert 0.15 <= late[worst] < 1.0
    # the stall is stamped where it began: at the wake-up due just after the blocking call started
    assert abs(offsets[worst] - blocked_at) < 0.02
    assert offsets == sorted(offsets)
    assert sum(x > 0.05 for x in late) == 1


def test_probe_reports_no_stall_when_nothing_blocks():
    result = asyncio.run(measure_resolution(0.3))
    late = [x for _, x in result["samples"]]
    assert result["wakeups"] == len(late) > 50
    assert max(late) < 0.05
    assert stats.percentiles(late, [50])[0] >= 0
    assert 0 <= result["cpu_fraction"] < 1.0 and result["cpu_us_per_wakeup"] > 0


def test_probe_rows_and_bad_interval():
    p = LoopProbe(t0=0.0)
    p.samples = [(0.001, 0.0002), (0.002, 0.0001)]
    assert p.rows(variant="v") == [{"variant": "v", "seq": 0, "offset_s": 0.001, "lateness_s": 0.0002},
                                   {"variant": "v", "seq": 1, "offset_s": 0.002, "lateness_s": 0.0001}]
    with pytest.raises(ValueError):
        LoopProbe(interval_s=0)
