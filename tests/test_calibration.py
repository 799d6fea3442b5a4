"""In-run ceilings against the real PostgreSQL server the harness starts."""

from __future__ import annotations

import math

from harness.core import calibration


def _series_ok(part: dict, repeats: int) -> None:
    assert len(part["values"]) == repeats and all(v > 0 for v in part["values"])
    assert part["median"] > 0 and part["n"] == repeats
    assert len(part["steal_pct"]) == repeats and all(s >= 0 for s in part["steal_pct"])
    assert all(w > 0 for w in part["wall_s"])


# The loop ceiling's repeats shortened (1 s each in a run): the test reads the series' shape, not its value
CPU_SECONDS = 0.2


def test_measure_both_ceilings(stack):
    out = calibration.measure(stack, cpu_seconds=CPU_SECONDS)
    assert out["cpu_model"] and out["cpus"] >= 1
    _series_ok(out["python_cpu"], calibration.REPEATS)
    assert "error" not in out["pgbench"], out["pgbench"].get("error")
    _series_ok(out["pgbench"], calibration.REPEATS)
    assert out["pgbench"]["unit"] == "transactions/s" and math.isfinite(out["pgbench"]["cv"])
    value, which = calibration.ceiling_for("pgbench", {"before": out, "after": out})
    assert which == "pgbench" and value == out["pgbench"]["median"]


def test_without_postgres_the_python_ceiling_is_still_measured():
    out = calibration.measure(None, repeats=2, cpu_seconds=CPU_SECONDS)
    assert "error" in out["pgbench"]
    _series_ok(out["python_cpu"], 2)
