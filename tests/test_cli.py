"""The command line as users meet it: clear errors for bad input, and runs that never corrupt data."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO_ROOT, harness, started_run, two_at_a_time

from harness.core import store
from harness.experiments import registry


def test_help_explains_every_command():
    out = harness("--help")
    assert out.returncode == 0
    for cmd in ("list", "run", "servers", "report", "study", "runs", "show", "compare", "history", "summarise",
                "promote", "keep", "findings", "verify", "power", "docs"):
        assert cmd in out.stdout
    run_help = harness("run", "--help").stdout
    for opt in ("--profile", "--repeat", "--set"):
        assert opt in run_help


def test_list_shows_every_registered_experiment():
    assert {"mongo_cursor", "mongo_pool", "mongo_client", "mongo_bulk", "mongo_models", "pg_models",
            "pg_ceiling", "fastapi_locust"} <= set(registry.all_experiments())
    out = harness("list", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert set(listed) == set(registry.all_experiments())
    committed = store.committed_manifests()
    for name, e in listed.items():
        assert set(e["params"]) == {"smoke", "quick", "full", "seed"}, name
        # the version a new full run records, and the committed runs it would pool with
        assert e["version_full"] == registry.version(name, registry.get(name).params("full")), name
        assert e["committed_runs_of_version"] == [
            m["run_id"] for m in store.runs_of_version(committed, name, e["version_full"])], name
    text = harness("list").stdout
    assert text.count("version (full) ") == sum(e.in_study for e in registry.all_experiments().values())


BAD_INPUT = [
    (["run", "no_such_experiment"], "unknown experiment 'no_such_experiment'"),
    (["run", "{exp}", "--profile", "huge"], "Invalid value for '--profile'"),
    (["run", "{exp}", "--repeat", "0"], "Invalid value for '--repeat'"),
    (["run", "{exp}", "--set", "nonsense"], "expected NAME=VALUE"),
    (["run", "{exp}", "--set", "no_such_param=1"], "no experiment of this run has a parameter 'no_such_param'"),
    (["run", "{exp}", "--set", "warmup_s=-1"], "parameter warmup_s must be zero or more, got -1.0"),
    (["run", "{exp}", "--set", "warmup_s=abc"], "parameter warmup_s must be float, got 'abc'"),
    (["report", "no-such-run"], "no run 'no-such-run'"),
    (["show", "no-such-run"], "no run 'no-such-run'"),
    (["summarise", "no-such-run"], "no run 'no-such-run'"),
    (["promote", "no-such-run"], "no run 'no-such-run'"),
    (["compare", "no-such-run", "latest"], "no run 'no-such-run'"),
    (["history"], "no committed run"),
    (["power", "--processor", "arm"], "no committed run on a processor matching 'arm'"),
    (["power", "--write", "--processor", "AMD"], "drop --write or --processor"),
]


@pytest.fixture(scope="module")
def bad_input_outcomes(tmp_path_factory) -> list[tuple[subprocess.CompletedProcess, Path]]:
    """Each BAD_INPUT case through the command line, with a data directory of its own, two at a
    time (conftest `two_at_a_time`; 13 cases, about 13 s one after another)."""
    exps = list(registry.all_experiments())
    root = tmp_path_factory.mktemp("bad-input")

    def one(i: int) -> tuple[subprocess.CompletedProcess, Path]:
        args = [a.replace("{exp}", exps[0]) for a in BAD_INPUT[i][0]]
        data = root / str(i)
        data.mkdir()
        return harness(*args, env=dict(os.environ, STUDY_DATA_DIR=str(data))), data

    return two_at_a_time(one, range(len(BAD_INPUT)))


@pytest.mark.parametrize("case", range(len(BAD_INPUT)), ids=[f"args{i}-{m}" for i, (_, m) in enumerate(BAD_INPUT)])
def test_bad_input_gets_a_clear_error_without_traceback(case, bad_input_outcomes):
    message = BAD_INPUT[case][1]
    out, data = bad_input_outcomes[case]
    assert out.returncode != 0
    assert message in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    assert not (data / "runs").exists() or not any((data / "runs").iterdir()), \
        "bad input must fail before a run directory is created"


def test_negative_pool_or_size_parameters_are_refused():
    """Every positive-only integer parameter of every experiment rejects a negative value by name."""
    checked = 0
    for exp in registry.all_experiments().values():
        full = exp.params("full").to_dict()
        for name, value in full.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and name != "seed":
                with pytest.raises(Exception) as e:
                    exp.params("smoke", {name: "-5"})
                assert name in str(e.value), f"{exp.name}.{name}: {e.value}"
                checked += 1
    assert checked > 0


def test_interrupted_run_keeps_previous_latest_and_leaves_no_process(stack_env, tmp_path):
    # pg_models: it needs PostgreSQL and starts at once (departures, say, first builds interpreter venvs)
    exps = ["pg_models"]
    assert "postgres" in registry.get(exps[0]).needs
    data = tmp_path / "data"
    # an earlier good run that must survive
    good = store.RunWriter(data, "earlier-good-run", {"profile": "smoke", "experiments": {}})
    good.commit("complete")
    # let the run start its own servers, to check they stop (not a `servers up` stack left here)
    env = dict(os.environ, STUDY_DATA_DIR=str(data), STUDY_STATE_DIR=str(tmp_path / "state"))
    env.pop("STUDY_MONGODB_URI", None)
    env.pop("STUDY_POSTGRES_DSN", None)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", exps[0], "--profile", "quick"],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    incomplete = started_run(data, proc)
    assert incomplete, "the run never started"
    children = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert os.readlink(data / "runs" / "latest") == "earlier-good-run"
    manifest = json.loads((incomplete / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    time.sleep(0.5)
    left = [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert children and not left, f"processes left behind: {left}"


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_unusable_data_dir_is_one_line_before_any_server_starts(tmp_path, where):
    if where == "under_a_file":
        (tmp_path / "a-file").write_text("")
        bad = tmp_path / "a-file" / "data"
    else:
        bad = "/proc/harness-cannot-create"          # not creatable, even by root
    env = {k: v for k, v in os.environ.items() if not k.startswith("STUDY_")}
    env["STUDY_DATA_DIR"] = str(bad)
    t0 = time.monotonic()
    out = harness("run", "pg_models", "--profile", "smoke", env=env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "not usable" in lines[0], out.stderr
    assert "Traceback" not in out.stderr and "postgres" not in out.stdout
    assert time.monotonic() - t0 < 30, "it must fail before provisioning anything"


def test_repeats_round_robin_with_cell_statuses_from_a_real_run(stack_env, tmp_path):
    """Two experiments, two repeats: the repeats interleave (A B A B), a repeat that fails for real
    (pgbench that exits 1) fails its cells, the other experiment stays ok, and the run is
    published as complete with failures; `harness runs` says why."""
    data = tmp_path / "data"
    env = dict(os.environ, STUDY_DATA_DIR=str(data), **stack_env)
    out = harness("run", "mongo_pool", "pg_ceiling", "--profile", "smoke", "--repeat", "2",
                  "--set", "pg_ceiling.pgbench=/bin/false", env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    run = store.open_run("latest", data)
    m = run.manifest
    assert m["schedule"] == [["mongo_pool", 0], ["pg_ceiling", 0], ["mongo_pool", 1], ["pg_ceiling", 1]]
    started = sorted((run.result(e, k)["started_at"], e, k) for e, k in m["schedule"]
                     if "started_at" in run.result(e, k))
    assert [(e, k) for _, e, k in started] == [("mongo_pool", 0), ("pg_ceiling", 0), ("mongo_pool", 1),
                                               ("pg_ceiling", 1)]
    assert m["status"] == "complete" and m["has_failures"] is True
    pool, ceiling = m["experiments"]["mongo_pool"], m["experiments"]["pg_ceiling"]
    assert pool["status"] == "ok" and pool["cells"]["ok"] >= 2 and pool["cells"]["failed"] == 0
    assert ceiling["status"] == "failed" and ceiling["cells"]["ok"] == 0 and ceiling["cells"]["failed"] >= 2
    assert any("pgbench exited with code 1" in r for r in ceiling["reasons"]), ceiling["reasons"]
    cells = run.cells("pg_ceiling")
    assert set(cells["status"]) == {"failed"} and sorted(cells["repeat"].unique()) == [0, 1]
    assert run.table("pg_ceiling", "pgbench").empty                 # no failed cell's rows as if clean
    assert not run.table("pg_ceiling", "pgbench", ok_only=False).empty
    for name in ("mongo_pool", "pg_ceiling"):
        t = m["timing"][name]
        assert t["wall_s"] > 0 and 0 <= t["measured_s"] <= t["wall_s"]
    assert m["timing"]["mongo_pool"]["measured_s"] > 0
    assert "measured" in out.stdout and "run " in out.stdout
    listed = harness("runs", env=env)
    assert "pg_ceiling" in listed.stdout and "failed" in listed.stdout and "0 ok" in listed.stdout
    assert "pgbench exited with code 1" in listed.stdout


def test_skipped_cells_from_the_session_smoke_run(smoke_run):
    """mongo_bulk on FerretDB skips its matching upserts with a reason (a real skipped cell), and the
    experiment stays ok."""
    if "ferretdb" not in smoke_run.server_label("mongodb").lower():
        pytest.skip("the matching-upsert variant is skipped only on FerretDB")
    cells = smoke_run.cells("mongo_bulk")
    skipped = cells[cells.status == "skipped"]
    assert len(skipped) == 1 and "FerretDB" in skipped.reason.iloc[0]
    assert smoke_run.experiments["mongo_bulk"]["status"] == "ok"
    kept = smoke_run.table("mongo_bulk", "samples")
    assert skipped.variant.iloc[0] not in set(kept.variant)


def test_findings_prints_the_twelve_lessons_of_the_reference_and_as_json():
    out = harness("findings")
    assert out.returncode == 0, out.stderr
    lessons = [line.split()[0] for line in out.stdout.splitlines()[1:] if line and not line.startswith(" ")]
    assert len(lessons) == 12 and lessons[0] == "000-sync-async", lessons
    assert "across machines:" in out.stdout and "**" not in out.stdout
    as_json = json.loads(harness("findings", "--json").stdout)
    assert [r["id"] for r in as_json["lessons"]] == lessons
    assert all(r["word"] for r in as_json["lessons"]), "every lesson stands on a word"
    bad = harness("findings", "no-such-run")
    assert bad.returncode == 2 and "no run 'no-such-run'" in bad.stderr
