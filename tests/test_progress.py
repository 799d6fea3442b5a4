"""The study's progress bar: it counts each repeat's planned seconds (`study.repeat_seconds`), so its
ETA weighs a 150-s repeat as ten 15-s ones. No servers, no timing."""

from __future__ import annotations

import pytest

from harness.__main__ import _Progress
from harness.experiments import registry
from harness.running import study

IN_STUDY = [n for n, e in registry.all_experiments().items() if e.in_study]


def _reference(**seconds: list) -> dict:
    return {"experiments": {name: {"repeats": [{"repeat": k, "seconds": s} for k, s in enumerate(values)]}
                            for name, values in seconds.items()}}


def test_a_repeat_is_planned_at_its_experiment_s_median_repeat_in_the_reference():
    planned = study.plan(["mongo_client", "departures", "pg_models"], "full")
    reference = _reference(mongo_client=[10.0, 20.0, 16.0, None], departures=[150.0, 210.0],
                           pg_ceiling=[50.0], pg_models=[])   # pg_models recorded no repeat
    seconds = study.repeat_seconds(planned, reference)
    # pg_models: the median over the experiments that have repeats (16, 180, 50)
    assert seconds == {"mongo_client": 16.0, "departures": 180.0, "pg_models": 50.0}
    assert study.repeat_seconds(planned, {}) == {"mongo_client": 1.0, "departures": 1.0, "pg_models": 1.0}


def test_the_committed_reference_plans_every_experiment_and_tells_long_repeats_from_short():
    seconds = study.repeat_seconds(study.plan(IN_STUDY, "full"))
    assert set(seconds) == set(IN_STUDY) and all(s > 0 for s in seconds.values())
    # on the reference machine a departures repeat took 150 s and a mongo_client one 16 s
    assert seconds["departures"] > 5 * seconds["mongo_client"]


def test_the_bar_advances_by_each_repeat_s_planned_seconds():
    order = [("short", 0), ("long", 0), ("gone", 0), ("short", 1), ("long", 1), ("gone", 1), ("short", 2)]
    progress = _Progress(order=order, seconds={"short": 10.0, "long": 100.0, "gone": 40.0})
    try:
        assert progress.bar.total == 3 * 10 + 2 * 100 + 2 * 40
        progress("repeat_started", {"experiment": "short", "repeat": 0, "of": 3})
        progress("repeat_finished", {"experiment": "short", "repeat": 0, "status": "ok", "seconds": 9.0})
        assert progress.bar.n == 10
        progress("repeat_finished", {"experiment": "long", "repeat": 0, "status": "ok", "seconds": 130.0})
        assert progress.bar.n == 110   # a long repeat moves the bar ten times as far as a short one
        progress("experiment_failed", {"experiment": "gone", "error": "no dataset"})   # both its repeats skipped
        assert progress.bar.n == 190 and progress.done == 4
        for name, k in order[3:]:
            if name != "gone":
                progress("repeat_finished", {"experiment": name, "repeat": k, "status": "ok", "seconds": 1.0})
        assert progress.bar.n == pytest.approx(progress.bar.total) and progress.done == len(order)
    finally:
        progress.close()


def test_without_a_schedule_every_repeat_counts_alike():
    progress = _Progress(total=3)   # harness verify: one experiment's repeats
    try:
        progress("repeat_finished", {"experiment": "verify_postgres", "repeat": 0, "status": "ok", "seconds": 5.0})
        assert (progress.bar.n, progress.bar.total) == (1, 3)
    finally:
        progress.close()
