"""Why, not only how much: context switches in every client window, and the profiled pass
(experiments/profiled) on the session's smoke run, against its real servers."""

from __future__ import annotations

import json
import math
import os
import re
import time
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import experiment_tables

from harness.core import ledger, profiles
from harness.core.measure import Window, process_switches
from harness.experiments import registry
from harness.experiments.profiled import analysis as profiled
from harness.experiments.profiled.experiment import EXPERIMENT as PROFILED
from harness.experiments.profiled.experiment import LOW_RATE, PARTS, PERF, PYTHON
from harness.running import study

# A Python frame as py-spy writes it: `function (file.py:line)`, a frozen module's `(<frozen runpy>:198)`,
# or without the line when py-spy could not read it; a native one names a library or a C source.
PYTHON_FRAME = re.compile(r"\(([^()]*\.py|<[^<>()]*>)(:\d+)?\)$")


def test_a_window_counts_this_process_s_context_switches_over_its_threads():
    import threading

    with Window("v") as w:
        threads = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(20)]
        [t.start() for t in threads]
        [t.join() for t in threads]     # each thread sleeps once: a voluntary switch, then exits
    row = w.row()
    assert row["ctx_voluntary"] >= 20 and row["ctx_involuntary"] >= 0
    vol, invol = process_switches(os.getpid())
    assert vol > 0 and invol >= 0


def test_a_window_whose_profile_cannot_be_written_still_measures(tmp_path):
    with Window("v", profile=tmp_path) as w:    # a directory: py-spy cannot write its profile there
        sum(i * i for i in range(100_000))
    assert w.wall_s > 0 and w.cpu_s >= 0
    assert w.profile_error and "py-spy" in w.profile_error


def test_a_profiled_window_samples_this_process(tmp_path):
    out = tmp_path / "p.collapsed"
    with Window("v", profile=out, profile_rate=200) as w:
        stop = time.perf_counter() + 1.0
        while time.perf_counter() < stop:
            sum(i * i for i in range(1000))
    assert w.profile_error is None
    stacks = profiles.read_collapsed(out)
    assert sum(n for _, n in stacks) >= 100
    assert any("test_a_profiled_window_samples_this_process" in f for s, _ in stacks for f in s)


@pytest.mark.parametrize("how", [profiles.NATIVE, profiles.PYTHON])
def test_a_profile_s_file_name_says_how_it_is_sampled(tmp_path, how):
    native = how == profiles.NATIVE
    out = profiles.profile_path(tmp_path, "part.model", how, rate=50)
    assert profiles.sampling_of(out) == (how, 50)
    assert profiles.sampling_of(tmp_path / "p.collapsed", 100) == (profiles.NATIVE, 100)   # a name that says nothing
    assert profiles.sampling_of(profiles.profile_path(tmp_path, "v", profiles.PERF, 100)) == (profiles.PERF, 100)
    with Window("v", profile=out) as w:
        stop = time.perf_counter() + 1.0
        while time.perf_counter() < stop:
            sum(i * i for i in range(1000))
    assert w.profile_error is None
    stacks = profiles.read_collapsed(out)
    # 50 a second for a second, give or take py-spy's start; 100 Hz would give about twice as many
    assert 25 <= sum(n for _, n in stacks) <= 75
    frames = {f for s, _ in stacks for f in s}
    # native frames name the interpreter's C functions (`_PyEval_EvalFrameDefault (libpython3.11.so)`)
    assert any(not PYTHON_FRAME.search(f) for f in frames) == native, sorted(frames)[:8]


def test_speedscope_keeps_every_stack_and_count(tmp_path):
    stacks = [(("main (a.py:1)", "f (a.py:2)"), 3), (("main (a.py:1)",), 2), (("main (a.py:1)", "g (b.py:9)"), 5)]
    path = profiles.write_speedscope(stacks, "v", tmp_path / "v.speedscope.json")
    doc = json.loads(path.read_text())
    assert doc["$schema"].startswith("https://www.speedscope.app/") and doc["profiles"][0]["type"] == "sampled"
    assert profiles.read_speedscope(path) == stacks


def test_a_flame_graph_s_boxes_are_as_wide_as_their_samples():
    stacks = [(("main", "f", "h"), 6), (("main", "g"), 3), (("main", "tiny"), 1)]
    nodes = profiles.flame_nodes(stacks, min_share=0.15)
    assert nodes == [(0, 0.0, 1.0, "main"), (1, 0.0, 0.6, "f"), (2, 0.0, 0.6, "h"), (1, 0.6, 0.3, "g")]


def test_the_profiled_pass_runs_once_after_every_measured_repeat():
    def planned(name, repeats, after=False):
        return SimpleNamespace(experiment=SimpleNamespace(name=name, after_repeats=after), repeats=repeats)

    a, b, p = planned("a", 2), planned("b", 1), planned("profiled", 1, after=True)
    assert [(x.experiment.name, k) for x, k in study.schedule([p, a, b])] == [("a", 0), ("b", 0), ("a", 1),
                                                                               ("profiled", 0)]
    assert study.repeats_for(PROFILED, "full", 5) == 1 and registry.get("profiled") is PROFILED


def test_no_verdict_reads_the_profiled_pass():
    rows = ledger.load()
    named = {name for col in ("a", "b", "premise") if col in rows for text in rows[col] for name in ledger.refs(text)}
    assert named and not any(ledger.experiment_of(n) == "profiled" for n in named)


def test_every_client_window_counts_its_context_switches(smoke_run):
    """pg_models (its child and PostgreSQL's processes), mongo_models (FerretDB and its PostgreSQL),
    departures: switches per request in every window, and in the figures with their repeats."""
    pg = experiment_tables(smoke_run, "pg_models")["windows"]
    assert (pg["ctx_voluntary"] > 0).all() and (pg["server_ctx_voluntary"] > 0).all(), pg
    mongo = experiment_tables(smoke_run, "mongo_models")["windows"]
    assert (mongo["ctx_voluntary"] > 0).all() and (mongo["db_ctx_voluntary"] > 0).all()
    dep = experiment_tables(smoke_run, "departures")["windows"]
    assert (dep["ctx_voluntary"] > 0).all()
    got = pd.DataFrame(json.loads((smoke_run.path / "summary.json").read_text())["metrics"])
    for exp, metric in (("pg_models", "ctx_vol_per_req"), ("pg_models", "server_ctx_per_req"),
                        ("mongo_models", "ctx_vol_per_query"), ("mongo_models", "db_ctx_per_query"),
                        ("departures", "ctx_vol_per_req")):
        mine = got[(got["experiment"] == exp) & (got["metric"] == metric)]
        assert len(mine) and (mine["median"] > 0).all(), (exp, metric)


def test_the_profiled_pass_profiles_each_model_and_measures_its_own_cost(smoke_run):
    tables = experiment_tables(smoke_run, "profiled")
    windows, shares = tables["windows"], tables["profiles"]
    assert "failures" not in tables, tables.get("failures")
    params = smoke_run.experiments["profiled"]["params"]
    expected = {f"{part}.{m}" for part in params["parts"] for m in
                (params["pg_models"] if part.startswith("pg_") else profiled_models(part))}
    assert set(windows["variant"]) == expected
    # each part sampled the way it says: native frames (at its rate), Python frames only, or perf
    sampled = windows[windows["profiled"].astype(bool)].set_index("variant")
    for variant, row in sampled.iterrows():
        _, how, _ = PARTS[variant.split(".")[0]]
        assert row["sampling"] == how, variant
        assert row["rate_hz"] == (params["low_rate_hz"] if how == LOW_RATE else params["rate_hz"]), variant
    python_only = [v for v in sampled.index if sampled.loc[v, "sampling"] == PYTHON]
    assert python_only, "the smoke run profiles Python frames only somewhere"
    for variant in python_only:   # without native frames no sample names the interpreter's C code
        frames = {f for stack, _ in profiled.stacks(smoke_run, variant) for f in stack}
        assert frames and all(PYTHON_FRAME.search(f) for f in frames), (variant, sorted(frames)[:5])
    # perf's parts: both windows on the perf interpreter, its profiles naming Python and native frames
    by_perf = windows[windows["part"].map(lambda part: PARTS[part][1] == PERF)]
    assert len(by_perf), "the smoke run profiles with perf somewhere"
    assert (by_perf["python"].str.startswith(params["perf_python"] + ".")).all(), by_perf["python"]
    for variant in set(by_perf["variant"]):
        frames = {f for stack, _ in profiled.stacks(smoke_run, variant) for f in stack}
        assert any(PYTHON_FRAME.search(f) for f in frames) and any(not PYTHON_FRAME.search(f) for f in frames), variant
    others = windows[~windows["part"].map(lambda part: PARTS[part][1] == PERF)]
    assert (others["python"] == smoke_run.manifest["environment"]["python"]["version"]).all()
    # each model: one plain and one profiled window, the profiler never in the plain one
    for variant, g in windows.groupby("variant"):
        assert sorted(g["profiled"].astype(bool)) == [False, True], variant
    assert (windows["profile_error"] == "").all()
    for variant, g in shares.groupby("variant"):
        assert set(g["category"]) == set(profiles.KEYS.values())
        assert math.isclose(g["share"].sum(), 1.0) and g["samples"].sum() > 0
        kept = profiled.stacks(smoke_run, variant)
        assert sum(n for _, n in kept) == g["samples"].sum(), variant
    figures = profiled.variant_figures(smoke_run).set_index("variant")
    assert (figures["profiled_over_plain"] > 0).all() and (figures["samples"] > 0).all()
    assert (figures["ctx_vol_per_op"] >= 0).all()
    # µs by category add up to the CPU per operation they split
    pg = figures[figures["part"] == "pg_fast"]
    assert (pg[[f"cpu_us_{k}" for k in profiled.KEYS]].sum(axis=1) - pg["cpu_us_per_op"]).abs().max() < 1e-6


def profiled_models(part: str) -> tuple[str, ...]:
    from harness.experiments.profiled.experiment import CURSOR_MODELS, MONGO_MODELS

    return MONGO_MODELS if PARTS[part][0] == "mongo_models" else CURSOR_MODELS


def test_no_measured_experiment_ran_under_the_profiler(smoke_run):
    for name in smoke_run.experiments:
        if name == "profiled":
            continue
        windows = experiment_tables(smoke_run, name).get("windows")
        if windows is not None and "profile_error" in windows:
            pytest.fail(f"{name} has a profiled window")
    assert not any(p.name.startswith("profile_") for name in smoke_run.experiments if name != "profiled"
                   for _, d in smoke_run.repeat_dirs(name) for p in d.glob("artifacts/*"))


def test_the_report_shows_flame_graphs_with_their_largest_shares(smoke_report):
    page = smoke_report.index.read_text()
    parts = smoke_report.run.experiments["profiled"]["params"]["parts"]
    for title in (profiled.PART_TITLES[part] for part in parts):
        assert f'alt="Figure: Flame graphs, {title}:' in page.replace("&#x27;", "'"), title
    assert "largest shares" in page
