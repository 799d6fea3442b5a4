"""Reading stored runs without their raw tables: `harness show`, `harness history`, `harness compare`'s
checked metadata and machine wording, the summary upgrade, and where runs live (data/reference,
data/history, data/runs). Every run here is a small manifest.json + summary.json built by hand."""

from __future__ import annotations

import copy
import gzip
import json
import os
import time

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, harness

from harness import __main__ as cli
from harness.core import environment, host, pooling, store
from harness.core.errors import HarnessError
from harness.reading import compare, history, readout, show

# -- builders ---------------------------------------------------------------------------------------


def _cal(pgbench: float, loops: float) -> dict:
    part = {"pgbench": {"values": [pgbench] * 3, "unit": "transactions/s", "median": pgbench, "n": 3, "cv": 0.0},
            "python_cpu": {"values": [loops] * 3, "unit": "loops/s", "median": loops, "n": 3, "cv": 0.0}}
    return {"before": part, "after": copy.deepcopy(part)}


def _manifest(run_id: str, *, boot="boot-a", flags="f" * 64, cpu="AMD EPYC", pymongo="4.20.1",
              mongodb=("FerretDB", "v1.24.2"), version="v1", params=None, sha="a" * 40, pgbench=70000.0,
              loops=11e6, placement="shared") -> dict:
    params = params or {"pool_size": 10, "duration_s": 2.0}
    return {
        "format_version": store.FORMAT_VERSION, "run_id": run_id, "status": "complete", "profile": "full",
        "started_at": run_id[:15], "finished_at": run_id[:15],
        "experiments": {"mongo_pool": {"status": "ok", "needs": ["mongodb"], "params": params, "version": version,
                                       "repeats_planned": 5},
                        "pg_models": {"status": "ok", "needs": ["postgres"], "params": {"clients": 200},
                                      "version": "p1", "repeats_planned": 5}},
        "environment": {
            "python": {"version": "3.11.7", "implementation": "CPython", "gil_enabled": True},
            "packages": {"pymongo": pymongo, "psycopg": "3.3.9", "asyncpg": "0.32.0", "uvloop": "0.23.0"},
            "machine": {"hostname": "vm", "cpu_model": cpu, "machine_id": "3d1219c7c4c5404aaa1f6d2a48adfda4",
                        "boot_id": boot, "cpu_flags_sha256": flags, "cpu_count_logical": 2, "kernel": "Linux 6.18"},
            "git": {"sha": sha, "dirty": False}, "lock_sha256": "d7578e8e8cbe"},
        "servers": {"mongodb": {"product": mongodb[0], "version": mongodb[1], "label": f"{mongodb[0]} {mongodb[1]}",
                                "source": "local"},
                    "postgres": {"product": "PostgreSQL", "version": "15.18", "label": "PostgreSQL 15.18",
                                 "source": "local"}},
        "placement": {"placement": placement},
        "calibration": _cal(pgbench, loops),
    }


def _metric(variant="bare", median=1000.0, lo=950.0, hi=1050.0, cv=0.03, n=5, normalised=None, unstable=False,
            experiment="mongo_pool", metric="throughput_qps", bottleneck="database_cpu") -> dict:
    return {"experiment": experiment, "variant": variant, "metric": metric, "unit": "queries/s", "median": median,
            "ci_low": lo, "ci_high": hi, "cv": cv, "n_repeats": n, "unstable": unstable,
            "stability": "", "normalised": normalised if normalised is not None else median / 11.0,
            "normalised_by": "python_cpu", "interpreter": "CPython 3.11.7", "better": "higher", "headline": True,
            "bottleneck": bottleneck}


def _claim(cid="001-pool-01", verdict="reproduced", n=5, **extra) -> dict:
    return {"claim_id": cid, "seed": cid[:3], "kind": "measurement", "comparison": "ratio", "verdict": verdict,
            "seed_value": 2.0, "value": 2.1, "ci_low": 1.9, "ci_high": 2.3, "n": n, "interpreter": "CPython 3.11.7",
            **extra}


def _summary_v1(run_id: str, metrics=None, claims=None) -> dict:
    return {"summary_version": 1, "run_id": run_id,
            "metrics": metrics if metrics is not None else [_metric()],
            "claims": claims if claims is not None else [_claim(), _claim("001-pool-02", "inconclusive")],
            "chance_wrong": {"judged_rows": 2, "alpha": 0.05, "expected_wrong": 0.1},
            "calibration": {}}


def _summary_v2(run_id: str, metrics=None, claims=None) -> dict:
    metrics = metrics if metrics is not None else [dict(_metric(median=1000.0), estimate=990.0)]
    claims = claims if claims is not None else [
        _claim(verdict="inconclusive", verdict_raw="reproduced", estimate=2.1, ci_level=0.9, n_used=4, n_ran=5,
               p_adjusted=0.07)]
    return {"summary_version": 2, "run_id": run_id, "metrics": metrics, "claims": claims, "calibration": {}}


def _put(data, where: str, run_id: str, manifest: dict, summary: dict | None, raw: bool = False):
    d = data / where / run_id
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(manifest))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    if raw:
        r = d / "mongo_pool" / "r0"
        r.mkdir(parents=True)
        (r / "result.json").write_text(json.dumps({"status": "ok", "cells": []}))
    return d


# -- the summary upgrade ------------------------------------------------------------------------------

def test_upgrade_maps_a_v1_summary_to_the_v2_shape_and_leaves_its_input_alone():
    v1 = _summary_v1("r1")
    before = copy.deepcopy(v1)
    up = store.upgrade_summary(v1)
    assert v1 == before, "upgrade_summary must not change what it was given"
    assert up["summary_version"] == store.SUMMARY_VERSION and up["upgraded_from"] == 1
    m = up["metrics"][0]
    assert m["estimate"] == m["median"] == 1000.0 and m["estimate_from"] == "median (v1)"
    c = up["claims"][1]
    assert c["verdict_raw"] == c["verdict"] == "inconclusive"
    assert c["n_used"] == c["n_ran"] == 5 and c["estimate"] == 2.1 and c["ci_level"] == 0.95
    assert c["p_adjusted"] is None
    # no version at all: the summaries written before the field existed are version 1
    assert store.upgrade_summary({"metrics": [], "claims": []})["upgraded_from"] == 1


def test_upgrade_keeps_a_v2_summary_as_written():
    v2 = _summary_v2("r2")
    up = store.upgrade_summary(v2)
    assert up["upgraded_from"] == 2 and up["claims"][0]["error_family"] == "all rows (Holm, version 2)"
    assert "upgraded_from" not in store.upgrade_summary({**v2, "summary_version": store.SUMMARY_VERSION})
    assert up["metrics"][0]["estimate"] == 990.0 and "estimate_from" not in up["metrics"][0]
    assert up["claims"][0]["verdict_raw"] == "reproduced" and up["claims"][0]["verdict"] == "inconclusive"


@pytest.mark.parametrize("bad, words", [
    ([1, 2], "expected a JSON object"),
    ({"summary_version": 99, "metrics": []}, "summary version 99"),
    ({"summary_version": 1, "metrics": {"a": 1}}, "`metrics` is not a list"),
    ({"summary_version": 2, "metrics": [], "claims": ["x"]}, "`claims` is not a list"),
])
def test_upgrade_refuses_what_is_not_a_readable_summary(bad, words):
    with pytest.raises(HarnessError, match=words):
        store.upgrade_summary(bad, "somewhere/summary.json")


def test_a_summary_or_manifest_from_a_newer_harness_says_so_and_an_old_one_upgrades_one_step_at_a_time():
    newer = store.SUMMARY_VERSION + 1
    with pytest.raises(HarnessError, match=f"stored in summary version {newer}, newer than this harness reads "
                                           f"\\(up to {store.SUMMARY_VERSION}\\): upgrade the harness"):
        store.upgrade_summary({"summary_version": newer, "metrics": [], "claims": []}, "s")
    with pytest.raises(HarnessError, match=f"stored in run format {store.FORMAT_VERSION + 1}, newer"):
        store.upgrade_manifest({"format_version": store.FORMAT_VERSION + 1}, "m")
    # every step from each version to the next exists, so any readable version reaches the current one
    assert all(v in store._SUMMARY_STEPS for v in store.SUMMARY_VERSIONS if v < store.SUMMARY_VERSION)
    v1 = store.upgrade_summary({"summary_version": 1, "metrics": [], "claims": [{"verdict": "reproduced", "n": 3}]})
    assert v1["claims"][0]["error_family"] == "none (version 1)" and v1["claims"][0]["primary"] == ""


def test_load_summary_names_a_missing_or_malformed_file(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    with pytest.raises(HarnessError, match="no summary.json"):
        store.load_summary(d)
    (d / "summary.json").write_text("{not json")
    with pytest.raises(HarnessError, match="malformed summary.json"):
        store.load_summary(d)
    (d / "summary.json").write_text(json.dumps(_summary_v1("r")))
    assert store.load_summary(d)["metrics"][0]["estimate_from"] == "median (v1)"


# -- where runs live ---------------------------------------------------------------------------------

def test_runs_are_found_in_reference_history_and_runs_by_id_prefix_or_suffix(tmp_path):
    _put(tmp_path, "reference", "20261201T000000Z-full-aaaa", _manifest("20261201T000000Z-full-aaaa"),
         _summary_v1("x"), raw=True)
    _put(tmp_path, "history", "20261130T000000Z-full-bbbb", _manifest("20261130T000000Z-full-bbbb"), _summary_v1("x"))
    _put(tmp_path, "runs", "20261202T000000Z-quick-cccc", _manifest("20261202T000000Z-quick-cccc"), None, raw=True)
    os.symlink("20261202T000000Z-quick-cccc", tmp_path / "runs" / "latest")
    assert store.open_run("aaaa", tmp_path).path.parent.name == "reference"
    assert store.open_run("20261130T000000Z-full-bbbb", tmp_path).path.parent.name == "history"
    assert store.open_run("20261202", tmp_path).id == "20261202T000000Z-quick-cccc"
    assert store.open_run("latest", tmp_path).id == "20261202T000000Z-quick-cccc"
    with pytest.raises(HarnessError, match="ambiguous"):
        store.open_run("2026120", tmp_path)   # a prefix of two runs (and a part of none is no match)
    with pytest.raises(HarnessError, match="no run '-full-'"):
        store.open_run("-full-", tmp_path)
    listed = {r["run_id"]: (r["where"], r["has_summary"]) for r in store.list_runs(tmp_path)}
    assert listed == {"20261201T000000Z-full-aaaa": ("reference", True),
                      "20261130T000000Z-full-bbbb": ("history", True),
                      "20261202T000000Z-quick-cccc": ("runs", False)}
    assert [r["run_id"] for r in store.list_runs(tmp_path)][0] == "20261130T000000Z-full-bbbb"  # oldest first
    out = CliRunner().invoke(cli.cli, ["runs", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "history" in out.output and "reference" in out.output and "(no summary.json)" in out.output


def test_promote_makes_a_new_run_the_reference_and_keeps_the_old_ones_summary(tmp_path):
    old, new = "20261130T000000Z-full-aaaa", "20261201T000000Z-full-bbbb"
    _put(tmp_path, "reference", old, _manifest(old), _summary_v1(old), raw=True)
    _put(tmp_path, "runs", new, _manifest(new, version="v2"), _summary_v2(new), raw=True)
    executed = tmp_path / "runs" / new / "report" / "notebooks"
    executed.mkdir(parents=True)
    (executed / "00_findings.ipynb").write_text("{}")
    (executed.parent / "index.html").write_text("<html></html>")
    os.symlink(new, tmp_path / "runs" / "latest")
    with pytest.raises(HarnessError, match="only a new run can be promoted"):
        store.promote(old, tmp_path)
    out = CliRunner().invoke(cli.cli, ["promote", new, "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    # the report keeps its page; the executed notebooks it was made from are not kept twice
    report = tmp_path / "reference" / new / "report"
    assert (report / "index.html").is_file() and not (report / "notebooks").exists()
    assert "executed notebooks left out" in out.output
    assert sorted(p.name for p in (tmp_path / "reference").iterdir()) == [new]
    assert sorted(p.name for p in (tmp_path / "history" / old).iterdir()) == ["manifest.json.gz", "summary.json.gz"]
    assert (tmp_path / "runs" / old / "mongo_pool" / "r0").is_dir(), "the old reference's raw data is kept aside"
    assert store.open_run("latest", tmp_path).path == tmp_path / "reference" / new
    assert store.open_run(old, tmp_path).path.parent.name == "runs"   # the copy with raw data first


def test_promote_asks_for_force_when_the_run_measured_the_references_versions(tmp_path):
    old, new = "20261130T000000Z-full-aaaa", "20261201T000000Z-full-bbbb"
    _put(tmp_path, "reference", old, _manifest(old), _summary_v1(old), raw=True)
    _put(tmp_path, "runs", new, _manifest(new, boot="boot-b"), _summary_v2(new), raw=True)
    out = CliRunner().invoke(cli.cli, ["promote", new, "--data-dir", str(tmp_path)])
    assert isinstance(out.exception, HarnessError), out.output
    assert "same experiment versions as the reference" in str(out.exception) and "--force" in str(out.exception)
    assert (tmp_path / "reference" / old).is_dir(), "nothing moved"
    out = CliRunner().invoke(cli.cli, ["promote", new, "--force", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in (tmp_path / "reference").iterdir()) == [new]


def test_keep_says_what_a_run_adds_and_asks_for_force_when_it_adds_nothing(tmp_path):
    for run_id in ("20261128T000000Z-full-aaaa", "20261129T000000Z-full-bbbb"):
        _put(tmp_path, "history", run_id, _manifest(run_id), _summary_v1(run_id))
    third, other = "20261201T000000Z-full-cccc", "20261202T000000Z-full-dddd"
    _put(tmp_path, "runs", third, _manifest(third), _summary_v2(third), raw=True)
    _put(tmp_path, "runs", other, _manifest(other, boot="boot-z", cpu="Intel(R) Xeon(R) Processor", version="v9"),
         _summary_v2(other), raw=True)
    out = CliRunner().invoke(cli.cli, ["keep", third, "--data-dir", str(tmp_path)])
    assert isinstance(out.exception, HarnessError) and "adds only another run of boot boot-a" in str(out.exception)
    assert not (tmp_path / "history" / third).exists()
    out = CliRunner().invoke(cli.cli, ["keep", third, "--force", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0 and (tmp_path / "history" / third).is_dir(), out.output
    out = CliRunner().invoke(cli.cli, ["keep", other, "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "a new machine (boot boot-z)" in out.output and "a new kind of processor (Intel Xeon)" in out.output
    assert "new experiment versions (mongo_pool)" in out.output


def test_promote_refuses_a_run_without_a_summary(tmp_path):
    new = "20261201T000000Z-full-bbbb"
    _put(tmp_path, "runs", new, _manifest(new), None, raw=True)
    with pytest.raises(HarnessError, match="no summary.json"):
        store.promote(new, tmp_path)
    assert (tmp_path / "runs" / new).is_dir() and not (tmp_path / "reference").exists()


def test_runs_of_version_are_the_committed_full_runs_that_recorded_it(tmp_path):
    """What `harness list` counts under each experiment: committed runs only, of the profile, whose
    manifest records the version."""
    for where, run_id, version in (("reference", "20261201T000000Z-full-aaaa", "v1"),
                                   ("history", "20261130T000000Z-full-bbbb", "v0"),
                                   ("history", "20261129T000000Z-quick-cccc", "v1"),
                                   ("runs", "20261202T000000Z-full-dddd", "v1")):
        manifest = {**_manifest(run_id, version=version), "profile": run_id.split("-")[1]}
        _put(tmp_path, where, run_id, manifest, _summary_v1(run_id))
    committed = store.committed_manifests(tmp_path)
    assert [m["run_id"] for m in committed] == ["20261129T000000Z-quick-cccc", "20261130T000000Z-full-bbbb",
                                                "20261201T000000Z-full-aaaa"]
    assert [m["run_id"] for m in store.runs_of_version(committed, "mongo_pool", "v1")] == [
        "20261201T000000Z-full-aaaa"]
    assert [m["run_id"] for m in store.runs_of_version(committed, "mongo_pool", "v1", "quick")] == [
        "20261129T000000Z-quick-cccc"]
    assert store.runs_of_version(committed, "pg_models", "v1") == []


def test_keep_commits_a_runs_manifest_and_summary_to_history_and_leaves_the_run(tmp_path):
    """How a run from another boot joins the pool across boots without becoming the reference."""
    done, bare, old = "20261201T000000Z-full-bbbb", "20261202T000000Z-full-cccc", "20261130T000000Z-full-aaaa"
    _put(tmp_path, "runs", done, _manifest(done), _summary_v2(done), raw=True)
    _put(tmp_path, "runs", bare, _manifest(bare), None, raw=True)
    _put(tmp_path, "history", old, _manifest(old), _summary_v1(old))
    out = CliRunner().invoke(cli.cli, ["keep", done, "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    kept = tmp_path / "history" / done
    # kept gzipped, the same bytes once unpacked, read back through the store
    assert sorted(p.name for p in kept.iterdir()) == ["manifest.json.gz", "summary.json.gz"]
    for name in ("manifest.json", "summary.json"):
        assert gzip.decompress((kept / f"{name}.gz").read_bytes()) == (tmp_path / "runs" / done / name).read_bytes()
    assert store.load_summary(kept) == store.load_summary(tmp_path / "runs" / done)
    assert store.load_manifest(kept) == store.load_manifest(tmp_path / "runs" / done)
    assert (tmp_path / "runs" / done / "mongo_pool" / "r0").is_dir(), "the raw data stays in data/runs"
    assert not list((tmp_path / "history").glob(f"{store.INCOMPLETE_PREFIX}*"))
    with pytest.raises(HarnessError, match="already exists"):
        store.keep(done, tmp_path)
    with pytest.raises(HarnessError, match="only a new run can be kept in history"):
        store.keep(old, tmp_path)
    with pytest.raises(HarnessError, match="no summary.json"):
        store.keep(bare, tmp_path)
    assert not (tmp_path / "history" / bare).exists()


def test_a_report_of_any_run_but_the_repositorys_reference_keeps_its_figures_in_the_run(tmp_path, monkeypatch):
    """The citable figures/ are the reference run's: a report of a smoke or an old run writes its
    figures inside that run, unless STUDY_FIGURES_DIR or an argument says otherwise."""
    from harness.writing import report

    monkeypatch.delenv("STUDY_FIGURES_DIR", raising=False)
    new = "20261202T000000Z-smoke-cccc"
    run = store.open_run(_put(tmp_path, "runs", new, _manifest(new), _summary_v2(new), raw=True))
    assert report.figures_dir(run) == (run.path / "report" / "figures").resolve()
    assert report.figures_dir(run, tmp_path / "figs") == (tmp_path / "figs").resolve()
    monkeypatch.setenv("STUDY_FIGURES_DIR", str(tmp_path / "env"))
    assert report.figures_dir(run) == (tmp_path / "env").resolve()
    monkeypatch.delenv("STUDY_FIGURES_DIR")
    reference = store.open_run(REPO_ROOT / "data" / "reference" / os.listdir(REPO_ROOT / "data" / "reference")[0])
    assert report.figures_dir(reference) == report.FIGURES_DIR.resolve()
    # a notebook opened by hand leaves figures_dir empty: save_figure decides by the run
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.core import figures
    fig = plt.figure()
    written = figures.save_figure(fig, "probe", run, notebook="x.ipynb", experiments=[], figures_dir="",
                                  formats="png")
    plt.close(fig)
    assert written == [run.path.resolve() / "report" / "figures" / "probe.png"] and written[0].is_file()


def test_the_same_figure_saved_twice_gives_the_same_bytes(tmp_path):
    """save_figure writes no date and no random ids: a report rebuilt from the same run leaves the
    committed figures unchanged, so a commit shows only figures whose data moved."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.core import figures
    new = "20261202T000000Z-smoke-dddd"
    run = store.open_run(_put(tmp_path, "runs", new, _manifest(new), _summary_v2(new), raw=True))
    saved = []
    for attempt in ("first", "second"):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 1, 2], label="a line")
        ax.legend()
        saved.append(figures.save_figure(fig, "same", run, notebook="x.ipynb", experiments=[],
                                         figures_dir=tmp_path / attempt, formats="svg,pdf,png"))
        plt.close(fig)
        time.sleep(1.1)  # a date written to the second would differ
    for first, second in zip(*saved):
        assert first.read_bytes() == second.read_bytes(), f"{first.name} differs between two saves"


def test_adopt_makes_a_runs_report_figures_the_citable_set(tmp_path):
    """figures.adopt: the new set's files are moved, the old set's files it lacks are removed, files
    the manifests never named stay, and every entry points at the run's new home."""
    from harness.core import figures

    source, dest, run_path = tmp_path / "run" / "report" / "figures", tmp_path / "figures", tmp_path / "run"
    source.mkdir(parents=True)
    dest.mkdir()
    for name in ("a.png", "a.svg"):
        (source / name).write_text(f"new {name}")
    (source / "manifest.json").write_text(json.dumps(
        {"format_version": 1, "figures": {"a": {"files": ["a.png", "a.svg"], "run_id": "new", "run_path": "../.."}}}))
    (dest / "a.png").write_text("old a.png")
    (dest / "b.png").write_text("old b.png")
    (dest / "notes.txt").write_text("not a figure")
    (dest / "manifest.json").write_text(json.dumps(
        {"format_version": 1, "figures": {"a": {"files": ["a.png"]}, "b": {"files": ["b.png"]}}}))
    lines = figures.adopt(source, run_path, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["a.png", "a.svg", "manifest.json", "notes.txt"], lines
    assert (dest / "a.png").read_text() == "new a.png"
    entry = json.loads((dest / "manifest.json").read_text())["figures"]["a"]
    assert entry["run_id"] == "new" and entry["run_path"] == "../run"
    assert not source.exists(), "the run keeps no second copy of the citable figures"
    assert figures.adopt(tmp_path / "no-report", run_path, dest) == []

# -- harness show -------------------------------------------------------------------------------------

def test_show_prints_a_v1_run_from_its_summary_alone(tmp_path):
    rid = "20261130T000000Z-full-aaaa"
    metrics = [_metric(), _metric("contended", 500.0, 300.0, 700.0, cv=0.25, n=5, unstable=True, bottleneck="pool")]
    _put(tmp_path, "history", rid, _manifest(rid), _summary_v1(rid, metrics=metrics))
    out = CliRunner().invoke(cli.cli, ["show", "aaaa", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert f"run {rid}: complete" in text and "in history" in text
    assert "summary format version 1" in text
    assert "mongo_pool.bare.throughput_qps" in text and "1000 [950, 1050]" in text and "3.0%/5" in text
    assert "WARNING unstable: mongo_pool.contended.throughput_qps: CV 25.0% over 5 repeats" in text
    assert "seed 001: 1 reproduced, 1 inconclusive (2 rows)" in text
    assert "mongo_pool: pool: contended" in text and "mongo_pool: database_cpu: bare" in text
    assert "AMD EPYC" in text and "boot boot-a" in text
    assert "mongodb: FerretDB v1.24.2 [local]" in text and "pymongo 4.20.1" in text
    assert "pgbench 70,000 tps" in text


def test_show_prints_a_v2_runs_adjusted_and_raw_verdicts(tmp_path):
    rid = "20261201T000000Z-full-bbbb"
    _put(tmp_path, "history", rid, _manifest(rid), _summary_v2(rid))
    text = show.show_text(store.open_run(rid, tmp_path))
    assert "summary format version 2 (upgraded: verdicts adjusted by Holm over every judged row" in text
    assert "estimates are the medians" not in text      # that is version 1's note
    assert "990 [950, 1050]" in text            # the estimate, with the median beside it
    row = next(line for line in text.splitlines() if "mongo_pool.bare.throughput_qps" in line)
    assert " 1000 " in row
    claim = next(line for line in text.splitlines() if "001-pool-01" in line)
    assert "inconclusive (unadjusted: reproduced)" in claim and "90%" in claim and "4/5" in claim
    assert "0.07" in claim


@pytest.mark.parametrize("setup, words", [
    ("missing run", "no run 'nosuchrun'"),
    ("no summary", "no summary.json"),
    ("malformed summary", "malformed summary.json"),
    ("malformed manifest", "malformed manifest.json"),
])
def test_show_errors_are_one_line_and_exit_2(tmp_path, setup, words):
    rid = "nosuchrun"
    if setup != "missing run":
        d = _put(tmp_path, "history", rid, _manifest(rid), None)
        if setup == "malformed summary":
            (d / "summary.json").write_text('{"metrics": [')
        if setup == "malformed manifest":
            (d / "manifest.json").write_text("{")
    out = harness("show", rid, env=dict(os.environ, STUDY_DATA_DIR=str(tmp_path)))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_summarise_refuses_a_run_without_raw_data(tmp_path):
    rid = "20261130T000000Z-full-aaaa"
    _put(tmp_path, "history", rid, _manifest(rid), _summary_v1(rid))
    out = harness("summarise", "aaaa", env=dict(os.environ, STUDY_DATA_DIR=str(tmp_path)))
    assert out.returncode == 2 and "has no raw data" in out.stderr and len(out.stderr.strip().splitlines()) == 1


# -- harness history ----------------------------------------------------------------------------------

def test_beyond_spread_needs_apart_intervals_and_a_change_beyond_the_cv():
    a = {"estimate": 100.0, "ci_low": 95.0, "ci_high": 105.0, "cv": 0.03}
    assert history.beyond_spread(a, {"estimate": 120.0, "ci_low": 115.0, "ci_high": 125.0, "cv": 0.03}) is True
    # overlapping intervals: no flag, however large the CV
    assert history.beyond_spread(a, {"estimate": 103.0, "ci_low": 98.0, "ci_high": 108.0, "cv": 0.03}) is False
    # apart, but the change (8%) is within the larger CV (10%): no flag
    assert history.beyond_spread(a, {"estimate": 108.0, "ci_low": 106.0, "ci_high": 110.0, "cv": 0.10}) is False
    assert history.beyond_spread(a, {"estimate": 120.0, "ci_low": None, "ci_high": None, "cv": None}) is None
    # normalised: the estimate's interval scaled by normalised / estimate
    na, nb = dict(a, normalised=10.0), {"estimate": 200.0, "ci_low": 190.0, "ci_high": 210.0, "cv": 0.03,
                                         "normalised": 10.2}
    assert history.beyond_spread(na, nb, "normalised") is False
    assert history.beyond_spread(na, nb, "estimate") is True


def test_history_shows_committed_runs_by_commit_and_machine_and_flags_real_changes(tmp_path):
    runs = [("20261128T000000Z-full-0001", "boot-a", "1" * 40, 1000.0, 950.0, 1050.0, 11e6),
            ("20261129T000000Z-full-0002", "boot-a", "2" * 40, 1010.0, 960.0, 1060.0, 11e6),   # within spread
            ("20261130T000000Z-full-0003", "boot-a", "3" * 40, 1500.0, 1450.0, 1550.0, 11e6),  # beyond spread
            # another machine, half as fast: absolute halves, normalised holds -> judged normalised, no flag
            ("20261201T000000Z-full-0004", "boot-b", "4" * 40, 750.0, 725.0, 775.0, 5.5e6)]
    for i, (rid, boot, sha, med, lo, hi, loops) in enumerate(runs):
        norm = med / (loops / 1e6)
        s = _summary_v1(rid, metrics=[_metric(median=med, lo=lo, hi=hi, normalised=norm)])
        _put(tmp_path, "reference" if i == len(runs) - 1 else "history", rid,
             _manifest(rid, boot=boot, sha=sha, loops=loops), s)
    _put(tmp_path, "runs", "20261202T000000Z-full-0005", _manifest("20261202T000000Z-full-0005"), None, raw=True)
    out = CliRunner().invoke(cli.cli, ["history", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "0005" not in text, "data/runs is not committed: only with --all"
    assert "commit 1111111 machine M1" in text and "commit 4444444 machine M2" in text
    assert "mongo_pool.bare.throughput_qps (queries/s, higher is better)" in text
    rows = text.split("mongo_pool.bare.throughput_qps (")[1].splitlines()[1:5]
    assert [r.split()[:3] for r in rows] == [["#1", "1111111", "M1"], ["#2", "2222222", "M1"],
                                             ["#3", "3333333", "M1"], ["#4", "4444444", "M2"]]
    assert "1000 [950, 1050]" in rows[0] and "norm 90.91 [86.36, 95.45]" in rows[0]
    assert "+1.0% abs vs #1" in rows[1] and "CHANGED" not in rows[1]
    assert "+48.5% abs vs #2 CHANGED" in rows[2]
    assert "norm vs #3" in rows[3] and "CHANGED" not in rows[3]
    assert "1 with a change beyond the runs' spread" in text
    only = CliRunner().invoke(cli.cli, ["history", "--changed", "--figure", "bare", "--data-dir", str(tmp_path)])
    assert "1 figure(s) shown" in only.output and only.exit_code == 1   # a change found: exit 1
    as_json = CliRunner().invoke(cli.cli, ["history", "--json", "--data-dir", str(tmp_path)])
    got = json.loads(as_json.output)
    assert as_json.exit_code == 0 and got["changed"] == ["mongo_pool.bare.throughput_qps"]
    assert [r["run_id"][-4:] for r in got["runs"]] == ["0001", "0002", "0003", "0004"]
    steady = CliRunner().invoke(cli.cli, ["history", "--changed", "--figure", "nothing-matches",
                                          "--data-dir", str(tmp_path)])
    assert steady.exit_code == 0, steady.output


def test_history_lessons_follow_each_lessons_figure_and_flag_verdicts_that_move(tmp_path):
    """The findings' lessons run by run: the figure of the lesson's first ledger row and its verdict;
    a verdict of another class than the previous run's is MOVED, holds <-> fails OPPOSED, and
    intervals that do not overlap `apart`. 001-pool's first row is 001-pool-13."""
    from harness.judging import findings

    head = next(lesson for lesson in findings.LESSONS if lesson.id == "001-pool").claims[0]
    plan = [("20261128T000000Z-full-0001", "direction only", 12.0, 11.0, 13.0),
            ("20261129T000000Z-full-0002", "direction only", 12.5, 11.5, 13.5),   # no mark
            ("20261130T000000Z-full-0003", "not reproduced", 20.0, 19.0, 21.0),   # holds -> fails, apart
            ("20261201T000000Z-full-0004", "inconclusive", 19.0, 10.0, 30.0)]     # fails -> open
    for i, (rid, verdict, est, lo, hi) in enumerate(plan):
        claim = _claim(head, verdict, n=10, value=est, ci_low=lo, ci_high=hi)
        _put(tmp_path, "history", rid, _manifest(rid, sha=str(i + 1) * 40), _summary_v1(rid, claims=[claim]))
    out = CliRunner().invoke(cli.cli, ["history", "--lessons", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    block = out.output.split(f"001-pool ({head}):")[1].splitlines()[1:5]
    assert [r.split()[:2] for r in block] == [["#1", "1111111"], ["#2", "2222222"], ["#3", "3333333"],
                                              ["#4", "4444444"]]
    assert "12 [11, 13] (95%, n=10)" in block[0] and "direction only v1" in block[0]
    assert not block[1].rstrip().endswith(("MOVED", "OPPOSED", "apart"))
    assert block[2].rstrip().endswith("OPPOSED apart"), block[2]
    assert block[3].rstrip().endswith("MOVED"), block[3]
    # under the runs, the row pooled across boots (harness.core.pooling)
    assert out.output.split(f"001-pool ({head}):")[1].splitlines()[5].startswith("  pooled")
    assert "000-sync-async (000-rps-01)" in out.output and "not measured in any run" in out.output
    assert f"{len(findings.LESSONS)} lessons over 4 runs; 2 verdict move(s)" in out.output
    both = CliRunner().invoke(cli.cli, ["history", "--lessons", "--changed", "--data-dir", str(tmp_path)])
    assert both.exit_code == 2 and "--lessons shows the lessons only" in both.output


def test_history_lessons_on_one_processor_pool_only_that_processors_runs(tmp_path):
    """`--processor TEXT` keeps the runs whose CPU model contains TEXT (any case): the runs listed,
    each lesson's runs and its pooled row are those of that kind of machine alone (002-cpu's size
    follows the processor: docs/RESULTS.md). No match is a one-line error naming the processors."""
    from harness.judging import findings

    head = next(lesson for lesson in findings.LESSONS if lesson.id == "001-pool").claims[0]
    plan = [("20261128T000000Z-full-0001", "boot-a", "AMD EPYC", 12.0),
            ("20261129T000000Z-full-0002", "boot-b", "Intel(R) Xeon(R) Processor", 20.0),
            ("20261130T000000Z-full-0003", "boot-c", "AMD EPYC", 12.5),
            ("20261201T000000Z-full-0004", "boot-d", "Intel(R) Xeon(R) Processor", 21.0)]
    for i, (rid, boot, cpu, est) in enumerate(plan):
        claim = _claim(head, "size not reproduced", n=10, value=est, ci_low=est * 0.95, ci_high=est * 1.05)
        _put(tmp_path, "history", rid, _manifest(rid, boot=boot, cpu=cpu, sha=str(i + 1) * 40),
             _summary_v1(rid, claims=[claim]))
    out = CliRunner().invoke(cli.cli, ["history", "--lessons", "--processor", "intel", "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("runs on a processor matching 'intel' (oldest first):")
    assert "full-0002" in out.output and "full-0004" in out.output
    assert "full-0001" not in out.output and "full-0003" not in out.output
    block = out.output.split(f"001-pool ({head}):")[1].splitlines()[1:]
    assert [r.split()[1] for r in block[:2]] == ["2222222", "4444444"]
    assert block[2].startswith("  pooled over 2 machines: 20.5 ["), block[2]
    # the kind as the README's table names it selects the same runs
    kind = CliRunner().invoke(cli.cli, ["history", "--lessons", "--processor", "Intel Xeon",
                                        "--data-dir", str(tmp_path)])
    assert kind.exit_code == 0 and kind.output.split("\n", 1)[1] == out.output.split("\n", 1)[1]
    everyone = CliRunner().invoke(cli.cli, ["history", "--lessons", "--data-dir", str(tmp_path)])
    assert everyone.output.split(f"001-pool ({head}):")[1].splitlines()[5].startswith("  pooled over 4 machines")
    none = harness("history", "--lessons", "--processor", "arm", env=dict(os.environ, STUDY_DATA_DIR=str(tmp_path)))
    assert none.returncode == 2 and len(none.stderr.strip().splitlines()) == 1
    assert "no committed run on a processor matching 'arm'" in none.stderr
    assert "AMD EPYC; Intel(R) Xeon(R) Processor" in none.stderr


def test_history_without_committed_runs_is_a_clear_error(tmp_path):
    out = harness("history", env=dict(os.environ, STUDY_DATA_DIR=str(tmp_path)))
    assert out.returncode == 2 and "no committed run" in out.stderr and len(out.stderr.strip().splitlines()) == 1


# -- harness compare: checked metadata and the machine ------------------------------------------------

def test_compare_lists_differing_metadata_and_says_what_is_incomparable(tmp_path):
    a_id, b_id = "20261130T000000Z-full-aaaa", "20261201T000000Z-full-bbbb"
    _put(tmp_path, "history", a_id, _manifest(a_id), _summary_v1(a_id))
    _put(tmp_path, "runs", b_id,
         _manifest(b_id, pymongo="4.18.2", mongodb=("MongoDB", "8.2.1"), version="v2", placement="split",
                   params={"pool_size": 20, "duration_s": 2.0}),
         _summary_v2(b_id, metrics=[dict(_metric(), estimate=1000.0),
                                    dict(_metric(experiment="pg_models", variant="x", metric="rps"), estimate=1.0)]))
    text = compare.compare_text(store.open_run(a_id, tmp_path), store.open_run(b_id, tmp_path))
    assert "[differs] driver pymongo: A 4.20.1 | B 4.18.2 -- shapes mongo_pool" in text
    assert "[INCOMPARABLE] server mongodb: A FerretDB v1.24.2 | B MongoDB 8.2.1" in text
    assert "[INCOMPARABLE] experiment mongo_pool" in text and "pool_size 10 vs 20" in text
    assert "[differs] placement: A shared | B split" in text
    assert "[differs] summary format: A version 1 | B version 2" in text
    assert "NOT COMPARABLE: mongo_pool" in text and "pg_models (" not in text.split("NOT COMPARABLE")[1].split("\n")[0]
    assert "[differs] driver psycopg" not in text   # equal metadata is not listed
    meta, bad = compare.checked_metadata(store.open_run(a_id, tmp_path).manifest,
                                         store.open_run(b_id, tmp_path).manifest)
    assert set(bad) == {"mongo_pool"}
    df = compare.compare(readout.summary_of(store.open_run(a_id, tmp_path)),
                         readout.summary_of(store.open_run(b_id, tmp_path)), bad)
    assert dict(zip(df["figure"], df["comparable"]))["mongo_pool.bare.throughput_qps"] == "NO"


def test_compare_flags_a_changed_experiment_version_with_the_same_parameters():
    ma, mb = _manifest("a"), _manifest("b", version="v2")
    meta, bad = compare.checked_metadata(ma, mb)
    assert bad == {"mongo_pool": "its code differs (version v1 vs v2, same parameters)"}
    meta, bad = compare.checked_metadata(ma, copy.deepcopy(ma))
    assert meta == [] and bad == {}


def test_a_shared_machine_id_never_makes_two_boots_the_same_machine():
    ma = _manifest("a", boot="boot-a", pgbench=73800.0, loops=11.4e6)
    mb = _manifest("b", boot="boot-b", pgbench=32500.0, loops=4.95e6)
    text = compare.machine_identity(ma, mb)
    assert text.startswith("different boots (boot-a vs boot-b), same CPU model (AMD EPYC), same CPU flags")
    assert "ceilings 2.3x apart" in text and "machine-id" in text and "does not tell" in text
    assert "same machine" not in text
    same = compare.machine_identity(ma, _manifest("c", boot="boot-a", pgbench=72000.0, loops=11.3e6))
    assert same.startswith("same boot (boot-a): one machine") and "ceilings within 2%" in same
    other_cpu = compare.machine_identity(ma, _manifest("d", boot="boot-c", flags="0" * 64, cpu="Intel Xeon"))
    assert "different CPU models (AMD EPYC vs Intel Xeon)" in other_cpu and "different CPU flags" in other_cpu
    old = copy.deepcopy(ma)
    del old["environment"]["machine"]["boot_id"]
    assert "boot not recorded for B" in compare.machine_identity(ma, old)


def test_compare_names_the_kernel_mitigations_that_differ():
    amd = {"spec_rstack_overflow": "Vulnerable: Safe RET, no microcode", "spectre_v2": "Mitigation: Retpolines",
           "meltdown": "Not affected"}
    intel = {**amd, "spec_rstack_overflow": "Not affected", "spectre_v2": "Mitigation: Enhanced / Automatic IBRS"}
    ma, mb = _manifest("a", boot="boot-a"), _manifest("b", boot="boot-b", cpu="Intel Xeon")
    ma["environment"]["machine"]["cpu_vulnerabilities"] = amd
    mb["environment"]["machine"]["cpu_vulnerabilities"] = intel
    text = compare.machine_identity(ma, mb)
    assert ("kernel mitigations differ in spec_rstack_overflow (Vulnerable: Safe RET, no microcode vs Not "
            "affected); spectre_v2 (Mitigation: Retpolines vs Mitigation: Enhanced / Automatic IBRS)") in text
    assert "meltdown" not in text
    mc = _manifest("c", boot="boot-c")
    mc["environment"]["machine"]["cpu_vulnerabilities"] = dict(amd)
    assert "same kernel mitigations" in compare.machine_identity(ma, mc)
    # a run from before they were recorded: nothing said either way
    assert "mitigations" not in compare.machine_identity(ma, _manifest("d", boot="boot-d"))


def test_cpu_identity_hashes_the_flags_whatever_their_order():
    info = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n"
            "stepping\t: 1\ncpu MHz\t\t: 2445.426\nflags\t\t: {}\n\nprocessor\t: 1\nflags\t\t: other\n")
    a = host.cpu_identity(info.format("sse avx fpu"))
    b = host.cpu_identity(info.format("fpu sse avx"))
    c = host.cpu_identity(info.format("fpu sse"))
    assert a["cpu_flags_sha256"] == b["cpu_flags_sha256"] != c["cpu_flags_sha256"]
    assert a["cpu_signature"] == "25/1/1" and a["cpu_mhz"] == pytest.approx(2445.426) and a["cpu_flags_count"] == 3
    m = environment.machine()
    assert {"machine_id", "boot_id", "cpu_model", "cpu_flags_sha256", "cpu_mhz", "cpu_vulnerabilities"} <= set(m)


def test_cpu_vulnerabilities_reads_each_file_of_the_kernels_directory(tmp_path):
    (tmp_path / "spectre_v2").write_text("Mitigation: Retpolines; STIBP: disabled\n")
    (tmp_path / "meltdown").write_text("Not affected\n")
    assert host.cpu_vulnerabilities(tmp_path) == {"meltdown": "Not affected",
                                                         "spectre_v2": "Mitigation: Retpolines; STIBP: disabled"}
    assert host.cpu_vulnerabilities(tmp_path / "absent") is None


def test_compare_reads_runs_without_raw_tables(tmp_path, monkeypatch):
    """A history run has no raw tables: compare must not try to re-judge it. Its verdicts and figures
    are the stored ones, even where today's rules would judge the stored numbers otherwise: A says
    `reproduced` for a figure of 0.5 [0.4, 0.6] against a seed's 2.0, B `not reproduced` for 2.1."""
    from harness.judging import claims, summary

    def rejudged(*_a, **_k):
        raise AssertionError("compare re-judged a stored run")

    for module, name in ((summary, "build"), (claims, "evaluate"), (claims, "judge"), (claims, "collect_frame")):
        monkeypatch.setattr(module, name, rejudged)
    a_id, b_id = "20261130T000000Z-full-aaaa", "20261201T000000Z-full-bbbb"
    wrong = _claim("001-pool-01", "reproduced", value=0.5, ci_low=0.4, ci_high=0.6)
    a_dir = _put(tmp_path, "history", a_id, _manifest(a_id),
                 _summary_v1(a_id, metrics=[_metric(median=1000.0, lo=950.0, hi=1050.0)],
                             claims=[wrong, _claim("001-pool-02", "inconclusive")]))
    _put(tmp_path, "history", b_id, _manifest(b_id, boot="boot-b"),
         _summary_v1(b_id, metrics=[_metric(median=1234.0, lo=1200.0, hi=1300.0)],
                     claims=[_claim("001-pool-01", "not reproduced"), _claim("001-pool-02", "inconclusive")]))
    stored = (a_dir / "summary.json").read_bytes()
    out = CliRunner().invoke(cli.cli, ["compare", "aaaa", "bbbb", "--data-dir", str(tmp_path)])
    assert out.exit_code == 1, out.output          # a verdict moved: the exit status says so
    assert "checked metadata: 1 difference(s)" in out.output and "[differs] machine" in out.output
    assert "1000 [950, 1050]" in out.output and "1234 [1200, 1300]" in out.output   # the stored figures
    assert "1 between holding and failing" in out.output
    sa, sb = (readout.summary_of(store.open_run(i, tmp_path)) for i in (a_id, b_id))
    verdicts, counts = compare.compare_verdicts(sa, sb)
    by_claim = verdicts.set_index("claim")
    assert (by_claim.at["001-pool-01", "A"], by_claim.at["001-pool-01", "B"]) == ("reproduced", "not reproduced")
    assert by_claim.at["001-pool-01", "change"] == "OPPOSED" and counts["OPPOSED"] == 1 and counts["same"] == 1
    figures = compare.compare(sa, sb)
    assert list(figures[["A", "B"]].iloc[0]) == ["1000 [950, 1050]", "1234 [1200, 1300]"]
    assert (a_dir / "summary.json").read_bytes() == stored, "compare rewrote a stored summary"


def test_summarise_rewrites_the_summary_of_a_run_with_raw_data(smoke_run, tmp_path):
    """On a copy of the session's smoke run (servers): the summary is re-judged from the raw tables,
    written atomically, and then read back like any other through load_summary and show."""
    import shutil

    copy_ = tmp_path / "runs" / smoke_run.path.name
    shutil.copytree(smoke_run.path, copy_)
    (copy_ / "summary.json").write_text("{broken")
    out = CliRunner().invoke(cli.cli, ["summarise", smoke_run.id, "--data-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "summary.json" in out.output and "claim rows" in out.output
    s = store.load_summary(copy_)
    assert s["metrics"] and s["run_id"] == smoke_run.id
    assert not list(copy_.glob("*.tmp*")), "no temporary file left beside summary.json"
    assert f"run {smoke_run.id}: complete" in show.show_text(store.open_run(smoke_run.id, tmp_path))
    assert all(e.get("version") for e in smoke_run.experiments.values()), "study.run records each version"


def test_compare_exits_0_on_a_run_against_itself_and_1_on_runs_whose_verdicts_differ():
    """The exit status is the answer (for scripts), and --json parses: the committed reference
    against itself, then against the committed run on another processor whose 002-cpu word differs."""
    ref = next(r for r in pooling.committed_runs(REPO_ROOT) if r.run_id.endswith("0dff"))
    other = "20261207T033449Z-full-5bb1"
    same = harness("compare", ref.run_id, ref.run_id, "--json")
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr
    got = json.loads(same.stdout)
    assert got["a"] == got["b"] == ref.run_id and got["moved"] == [] and got["incomparable"] == {}
    moved = harness("compare", ref.run_id, other, "--json")
    assert moved.returncode == 1, moved.stderr
    changed = json.loads(moved.stdout)["moved"]
    assert changed and all(c["A"] != c["B"] for c in changed)
    shown = harness("show", other, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == other
    assert {"claim_id", "verdict", "estimate"} <= set(json.loads(shown.stdout)["claims"][0])
