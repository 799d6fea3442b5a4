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
    # sampled as the profiled pass's parts are: Python frames only in `..._python`, 20 Hz in `..._low`,
    # perf on CPython 3.13 in `..._perf`
    part = variant.split(".")[0]
    perf = part.endswith("_perf")
    return [("profiled", variant, "profiled_over_plain", kept, None, None),
            ("profiled", variant, "sampled_over_active", sampled, None, None),
            ("profiled", variant, "native_frames", 0.0 if part.endswith("_python") else 1.0, None, None),
            ("profiled", variant, "rate_hz", 20.0 if part.endswith("_low") else 100.0, None, None),
            ("profiled", variant, "on_cpu", 1.0 if perf else 0.0, None, None),
            ("profiled", variant, "python", 3.13 if perf else 3.11, None, None)]


def _models_summary(async_us: float, threads_us: float, async_shares: dict, threads_shares: dict,
                    threads_kept: float = 0.9, part: str = "mongo_models") -> dict:
    rows = [("mongo_models", "async_bare", "cpu_us_per_query", async_us, None, None),
            ("mongo_models", "threads32", "cpu_us_per_query", threads_us, None, None),
            *_faithful(f"{part}.async"), *_faithful(f"{part}.threads", threads_kept)]
    for variant, shares in ((f"{part}.async", async_shares), (f"{part}.threads", threads_shares)):
        rows += [("profiled", variant, f"share_{profiles.KEYS[c]}", s, None, None) for c, s in shares.items()]
    return _summary(rows)


def test_the_gap_is_made_of_the_named_categories_that_widen_it():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    t = {**dict.fromkeys(LABELS, 0.0), profiles.GIL: 0.3, profiles.DRIVER_PY: 0.5, profiles.OTHER: 0.2}
    lines = mechanisms.lines(_models_summary(300.0, 200.0, a, t), "001-models")
    assert len(lines) == 2 and "the gap, async client − 32 threads: 100 µs" in lines[1].lower()
    # async: loop 150, driver 90, other 60; threads: GIL 60, driver 100, other 40 -> the loop alone holds 150
    assert "Made of (at least half of it): the event loop +150.0 µs." in lines[1], lines[1]


def test_a_gap_the_named_categories_do_not_hold_is_not_explained():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.OTHER: 0.9, profiles.LOOP: 0.1}
    t = {**dict.fromkeys(LABELS, 0.0), profiles.OTHER: 0.7, profiles.LOOP: 0.3}
    line = mechanisms.lines(_models_summary(300.0, 200.0, a, t), "001-models")[-1]
    assert "Not explained" in line, line


def test_a_profile_the_profiler_distorted_explains_nothing():
    a = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    lines = mechanisms.lines(_models_summary(300.0, 200.0, a, a, threads_kept=0.2), "001-models")
    assert "async client 300: (native frames, 100 Hz) the event loop 150" in lines[0], lines[0]
    assert "32 threads 200: no faithful profile" in lines[0], lines[0]
    assert "threads: py-spy kept 20% of its throughput" in lines[1], lines[1]
    assert "Not explained: no one way of profiling was faithful to both models." in lines[2], lines[2]
    got = mechanisms.metrics_by_key(_summary(_faithful("v", kept=0.9, sampled=23.5)))
    assert "waiting threads were counted as running" in mechanisms.unfaithful(got, "v")
    got = mechanisms.metrics_by_key(_summary(_faithful("v", kept=0.9, sampled=0.38)))
    assert "it passed over active threads" in mechanisms.unfaithful(got, "v")
    assert mechanisms.unfaithful(mechanisms.metrics_by_key(_summary(_faithful("v"))), "v") == ""


def test_the_first_way_of_profiling_faithful_to_both_models_is_the_one_read():
    native = {**dict.fromkeys(LABELS, 0.0), profiles.GIL: 0.6, profiles.OTHER: 0.4}
    python = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    both = _models_summary(300.0, 200.0, native, native, threads_kept=0.2)
    both["metrics"] += _models_summary(300.0, 200.0, python, {**python, profiles.LOOP: 0.0, profiles.OTHER: 0.7},
                                       part="mongo_models_python")["metrics"][2:]
    lines = mechanisms.lines(both, "001-models")
    assert "(Python frames only, 100 Hz) the event loop 150" in lines[0], lines[0]
    assert lines[1].startswith("- Profiles not read: native frames, 100 Hz: threads: py-spy kept 20%"), lines[1]
    assert "Made of (at least half of it): the event loop +150.0 µs." in lines[2], lines[2]


def test_perf_s_profile_is_read_when_py_spy_s_are_not_and_says_whose_interpreter_it_is():
    native = {**dict.fromkeys(LABELS, 0.0), profiles.GIL: 0.6, profiles.OTHER: 0.4}
    perf = {**dict.fromkeys(LABELS, 0.0), profiles.LOOP: 0.5, profiles.DRIVER_PY: 0.3, profiles.OTHER: 0.2}
    both = _models_summary(300.0, 200.0, native, native, threads_kept=0.2)
    for m in both["metrics"]:
        if m["variant"] == "async_bare":
            m["interpreter"] = "CPython 3.11.7"
    both["metrics"] += _models_summary(300.0, 200.0, perf, {**perf, profiles.LOOP: 0.0, profiles.OTHER: 0.7},
                                       part="mongo_models_perf")["metrics"][2:]
    both["metrics"] += _summary([("profiled", "mongo_models_perf.async", "cpu_us_per_op", 280.0, None, None),
                                 ("profiled", "mongo_models_perf.threads", "cpu_us_per_op", 190.0, None, None)]
                                )["metrics"]
    lines = mechanisms.lines(both, "001-models")
    assert "(perf, on-CPU, 100 Hz, CPython 3.13) the event loop 150" in lines[0], lines[0]
    assert lines[1] == ("- The shares are of CPython 3.13, applied to the CPU measured on CPython 3.11.7; the "
                        "profiled pass's own plain windows on 3.13 spent (µs per query, one window each): "
                        "async client 280; 32 threads 190."), lines[1]
    assert "native frames, 100 Hz: threads: py-spy kept 20%" in lines[2], lines[2]
    assert "Made of (at least half of it): the event loop +150.0 µs." in lines[3], lines[3]
    got = mechanisms.metrics_by_key(_summary(_faithful("x_perf.v", kept=0.3)))
    assert mechanisms.unfaithful(got, "x_perf.v").startswith("perf kept 30%")


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


def test_the_lock_is_judged_on_the_low_rate_profile_when_the_100_hz_one_is_not_faithful():
    rows = [*_faithful("pg_bound.threads_psycopg", 0.3), *_faithful("pg_bound.uvloop_asyncpg"),
            *_faithful("pg_bound_low.threads_psycopg", 0.8), *_faithful("pg_bound_low.uvloop_asyncpg")]
    for part, gil in (("pg_bound", 0.02), ("pg_bound_low", 0.30)):
        for model in ("threads_psycopg", "uvloop_asyncpg"):
            rows += [("profiled", f"{part}.{model}", "share_gil", gil if model == "threads_psycopg" else 0.0,
                      None, None), ("profiled", f"{part}.{model}", "samples", 800, None, None)]
    (lock,) = mechanisms.lines(_summary(rows), "002-cpu")
    assert "native frames, 20 Hz): threads + psycopg 30.0% of 800 samples" in lock and "**holds**" in lock, lock
    unfaithful = [r for r in rows if not (r[1] == "pg_bound_low.threads_psycopg" and r[2] == "profiled_over_plain")]
    (lock,) = mechanisms.lines(_summary([*unfaithful, *_faithful("pg_bound_low.threads_psycopg", 0.4)]), "002-cpu")
    assert "**not judged**" in lock and "native frames, 20 Hz: threads_psycopg: py-spy kept 40%" in lock, lock


def test_the_lock_s_share_is_also_told_as_microseconds_of_the_measured_cpu_per_request():
    rows = [*_faithful("pg_bound_perf.threads_psycopg"), *_faithful("pg_bound_perf.uvloop_asyncpg")]
    for model, gil, cpu in (("threads_psycopg", 0.25, 400.0), ("uvloop_asyncpg", 0.0, 200.0)):
        rows += [("profiled", f"pg_bound_perf.{model}", "share_gil", gil, None, None),
                 ("profiled", f"pg_bound_perf.{model}", "samples", 400, None, None),
                 ("pg_models", f"bound.pool20.{model}", "cpu_us_per_req", cpu, None, None)]
    (lock,) = mechanisms.lines(_summary(rows), "002-cpu")
    assert "the profiled pass, perf, on-CPU, 100 Hz, CPython 3.13)" in lock, lock
    assert "threads + psycopg 25.0% of 400 samples (≈ 100 µs of its 400 µs of CPU per request)" in lock, lock
    assert "uvloop + asyncpg 0.0% of 400 samples (≈ 0 µs of its 200 µs of CPU per request)" in lock, lock
