"""The mechanism lines (harness/judging/mechanisms.py): their rules, on summaries whose answer is known."""

from __future__ import annotations

import pytest

from harness.core import profiles, stats
from harness.judging import mechanisms

LABELS = list(profiles.KEYS)



def _summary(rows: list[tuple[str, str, str, float, float | None, float | None]]) -> dict:
    return {"metrics": [{"experiment": e, "variant": v, "metric": m, "estimate": x, "median": x, "ci_low": lo,
                         "ci_high": hi} for e, v, m, x, lo, hi in rows]}


def _faithful(variant: str, kept: float = 0.9, sampled: float = 1.0) -> list[tuple]:
    return [("profiled", variant, "profiled_over_plain", kept, None, None),
            ("profiled", variant, "sampled_over_active", sampled, None, None)]


def _models_summary(async_us: float, threads_us: float, async_shares: dict, threads_shares: dict,
                    threads_kept: float = 0.9) -> dict:
    rows = [("mongo_models", "async_bare", "cpu_us_per_query", async_us, None, None),
            ("mongo_models", "threads32", "cpu_us_per_query", threads_us, None, None),
            *_faithful("mongo_models.async"), *_faithful("mongo_models.threads", threads_kept)]
    for variant, shares in (("mongo_models.async", async_shares), ("mongo_models.threads", threads_shares)):
        rows += [("profiled", variant, f"share_{profiles.KEYS[c]}", s, None, None) for c, s in shares.items()]
    return _summary(rows)


def test_the_gap_is_made_of_the_named_categories_that_widen_it():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    t = {**dict.fromkeys(LABELS, 0.0), profiles.GIL: 0.3, profiles.DRIVER_PY: 0.5, profiles.OTHER: 0.2}
    lines = mechanisms.lines(_models_summary(300.0, 200.0, a, t), "001-models")
    assert len(lines) == 3 and "the gap, async client − 32 threads: 100 µs" in lines[2].lower()
    # async: loop 150, driver 90, other 60; threads: GIL 60, driver 100, other 40 -> the loop alone holds 150
    assert "Made of (at least half of it): the event loop +150.0 µs." in lines[2], lines[2]


def test_a_gap_the_named_categories_do_not_hold_is_not_explained():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.OTHER: 0.9, profiles.LOOP: 0.1}
    t = {**dict.fromkeys(LABELS, 0.0), profiles.OTHER: 0.7, profiles.LOOP: 0.3}
    line = mechanisms.lines(_models_summary(300.0, 200.0, a, t), "001-models")[-1]
    assert "Not explained" in line, line


def test_a_profile_the_profiler_distorted_explains_nothing():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    lines = mechanisms.lines(_models_summary(300.0, 200.0, a, a, threads_kept=0.2), "001-models")
    assert "32 threads 200: no split, its profile is not faithful (py-spy kept 20%" in lines[1], lines[1]
    assert "Not explained: the profile of the 32 threads is not faithful." in lines[2], lines[2]
    got = mechanisms._metrics(_summary(_faithful("v", kept=0.9, sampled=23.5)))
    assert "waiting threads were counted as running" in mechanisms.unfaithful(got, "v")
    assert mechanisms.unfaithful(mechanisms._metrics(_summary(_faithful("v"))), "v") == ""


def test_without_a_profiled_pass_there_is_no_mechanism_line():
    only = _summary([("mongo_models", "async_bare", "cpu_us_per_query", 300.0, None, None)])
    assert mechanisms.lines(only, "001-models") == [] and mechanisms.lines(only, "002-cpu") == []
    assert mechanisms.lines(only, "001-pool") == []


@pytest.mark.parametrize(("threads", "uvloop", "gil", "samples", "kept", "switch_word", "gil_word"), [
    ((2.0, 1.5, 2.5), (0.3, 0.2, 0.4), 0.30, 800, 0.9, "**holds**", "**holds**"),
    ((0.9, 0.7, 1.1), (0.3, 0.2, 0.4), 0.02, 800, 0.9, "**not borne out**", "**not borne out**"),
    # a share above the rule but from too few samples to be sure of it
    ((2.0, 1.5, 2.5), (1.8, 1.4, 2.2), 0.12, 50, 0.9, "**not borne out**", "**not borne out**"),
    # a profile py-spy slowed to a third of the model's throughput judges nothing
    ((2.0, 1.5, 2.5), (0.3, 0.2, 0.4), 0.30, 800, 0.3, "**holds**", "**not judged**"),
])
def test_the_seed_s_cpu_mechanism_is_read_by_its_rules(threads, uvloop, gil, samples, kept, switch_word, gil_word):
    rows = [*_faithful("pg_bound.threads_psycopg", kept), *_faithful("pg_bound.uvloop_asyncpg")]
    for model, (x, lo, hi) in (("threads_psycopg", threads), ("uvloop_asyncpg", uvloop)):
        rows += [("pg_models", f"bound.pool20.{model}", "ctx_vol_per_req", x, lo, hi),
                 ("pg_models", f"bound.pool20.{model}", "ctx_invol_per_req", 0.5, 0.4, 0.6),
                 ("profiled", f"pg_bound.{model}", "share_gil", gil if model == "threads_psycopg" else 0.0, None, None),
                 ("profiled", f"pg_bound.{model}", "samples", samples, None, None)]
    switches, lock = mechanisms.lines(_summary(rows), "002-cpu")
    assert switch_word in switches and gil_word in lock, (switches, lock)


def test_the_share_s_lower_end_is_wilson_s():
    assert stats.share_interval(50, 100)[0] == pytest.approx(0.4038, abs=1e-4)
    assert stats.share_interval(0, 100)[0] == pytest.approx(0.0, abs=1e-12)
