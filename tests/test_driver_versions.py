"""The departures experiment's driver factor (issue 25) against the real servers: two PyMongo
versions at smoke size (the lock's, in the study's own environment, and 4.18.2 in a venv made from
the lock with only that pin overridden), each child reading its own version back; a version the
package index does not serve is a recorded skip with its reason, not a failed run. Plus the
`drivers` syntax and its one-line errors (no servers).

The run goes through `study.run`, as `harness run departures --set departures.drivers=...` does:
the study's `prepare` builds the pinned venv (once: `.venvs/py3.11-pymongo-4.18.2`) before any
server starts; the repeat only looks it up.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from harness.core import interpreters, store
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.experiments.departures import analysis, experiment
from harness.judging import claims
from harness.running import study

CURRENT = ".".join(platform.python_version().split(".")[:2])
LOCKED = interpreters.base_pins(interpreters.resolve(CURRENT))["pymongo"]
OTHER = "4.18.2" if LOCKED != "4.18.2" else "4.18.1"   # seed 001's PyMongo
MISSING = "0.0.1"                                        # a version PyPI never served


@pytest.fixture(scope="module")
def driver_run(stack_env, tmp_path_factory) -> store.Run:
    """One repeat of the mongo cells on the study's interpreter, shared placement, no added round
    trip: three driver levels, `lock`, pymongo=OTHER and pymongo=MISSING."""
    overrides = {"departures.families": "mongo", "departures.pythons": CURRENT,
                 "departures.placements": "shared", "departures.rtts_ms": "0",
                 "departures.free_threaded": "off", "departures.drivers": f"pymongo={OTHER},{MISSING}"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in stack_env.items():
            mp.setenv(k, v)
        path = study.run(["departures"], "smoke", 1, overrides, tmp_path_factory.mktemp("drivers-data"))
    return store.Run(path)


def test_each_level_runs_and_reads_back_its_own_pymongo(driver_run):
    assert driver_run.manifest["status"] == "complete"
    assert driver_run.manifest["experiments"]["departures"]["status"] == "ok"
    w = analysis.windows(driver_run)
    assert set(w["driver"]) == {"lock", f"pymongo-{OTHER}"}
    lock, other = w[w["driver"] == "lock"], w[w["driver"] == f"pymongo-{OTHER}"]
    assert set(lock["pymongo_version"]) == {LOCKED}
    assert set(other["pymongo_version"]) == {OTHER}
    # each level on its own environment: the lock's is the study's own, the other a venv of its own
    assert set(lock["python_executable"]) == {sys.executable}
    (exe,) = set(other["python_executable"])
    assert Path(exe).parent.parent.name == f"py{CURRENT}-pymongo-{OTHER}"
    assert set(other["venv_mode"]) == {"client"}
    # both models in each level, and the rest of the drivers are the lock's in both
    assert set(zip(w["driver"], w["model"])) == {(d, m) for d in ("lock", f"pymongo-{OTHER}")
                                                 for m in ("threads", "async")}
    assert lock["motor_version"].nunique() == 1 and set(lock["motor_version"]) == set(other["motor_version"])
    assert (w["ops"] > 0).all() and (w["cpu_s"] > 0).all()
    s = driver_run.table("departures", "samples")
    assert set(s["driver"]) == {"lock", f"pymongo-{OTHER}"}
    prepared = driver_run.manifest["prepared"]["departures"]
    assert prepared[f"{CURRENT} pymongo-{OTHER}"]["packages"]["pymongo"] == OTHER


def test_a_version_the_index_does_not_serve_is_a_recorded_skip(driver_run):
    cells = driver_run.cells("departures")
    missing = cells[cells["variant"].str.contains(f"driver=pymongo-{MISSING}", regex=False)]
    assert len(missing) == 2 and (missing["status"] == "skipped").all()   # threads and async
    for reason in missing["reason"]:
        assert "\n" not in reason and f"pymongo=={MISSING}" in reason and "package index" in reason
    assert (cells.loc[~cells.index.isin(missing.index), "status"] == "ok").all()
    notes = driver_run.result("departures", 0)["notes"]["drivers"]
    assert notes[f"pymongo-{MISSING}"]["skipped"] == missing["reason"].iloc[0]
    assert "venv" in notes[f"pymongo-{OTHER}"]
    assert driver_run.manifest["prepared"]["departures"][f"{CURRENT} pymongo-{MISSING}"]["skipped"]


def test_the_driver_factor_is_judged_by_the_same_rule(driver_run):
    e = analysis.effects(driver_run)
    d = e[e["factor"] == "driver"]
    assert list(d["level"]) == [f"pymongo-{OTHER}"] and list(d["baseline"]) == ["lock"]
    assert list(d["level_read_back"]) == [f"pymongo {OTHER}"]
    assert d["seed_ratio"].iloc[0] == pytest.approx(analysis.seed_ratios()[("mongo", "async")]["ratio"])
    assert d["verdict"].iloc[0].startswith("not shown")   # one repeat: no interval, no verdict
    m = claims.run_metrics(driver_run)
    v = f"mongo_async[factor=driver,level=pymongo-{OTHER}]"
    assert set(m.loc[m["variant"] == v, "metric"]) == {"ratio_change", "threads_cpu_change", "async_cpu_change"}
    c = analysis.cell_table(driver_run)
    assert set(c["drivers_read_back"]) == {f"pymongo {LOCKED}", f"pymongo {OTHER}"}
    # the summary written with the run holds the driver level's figures
    assert any(f["variant"] == v for f in store.load_summary(driver_run)["metrics"])


def test_notebook_05_shows_the_driver_levels(driver_run, tmp_path):
    from harness.writing import notebook, report

    out = tmp_path / "05.ipynb"
    failure = report.execute(report.NOTEBOOKS_DIR / "05_departures.ipynb", out, driver_run, tmp_path / "figs",
                             "png")
    assert failure is None, failure
    shown = notebook.shown(out)
    versions = shown["driver_versions"].set_index("driver")
    assert versions.loc["lock", "pymongo_version"] == LOCKED
    assert versions.loc[f"pymongo-{OTHER}", "pymongo_version"] == OTHER
    assert shown["skipped_cells"]["variant"].str.contains(f"pymongo-{MISSING}", regex=False).all()
    assert "driver" in set(shown["mongo_effects"]["factor"])


# -- the `drivers` parameter: syntax and errors (no servers) ----------------------------------------

def test_the_set_syntax_gives_one_level_per_entry():
    p = registry.get("departures").params(
        "smoke", {"drivers": "pymongo=4.15.*,4.18.2,4.20.1,psycopg=3.3.6+asyncpg==0.31.0", "pythons": CURRENT})
    assert p.drivers == ("pymongo=4.15.*", "pymongo=4.18.2", "pymongo=4.20.1", "psycopg=3.3.6+asyncpg=0.31.0")
    levels = {lv.label: lv for lv in p.driver_levels()}
    assert list(levels) == ["pymongo-4.15.*", "pymongo-4.18.2", "pymongo-4.20.1", "psycopg-3.3.6+asyncpg-0.31.0"]
    assert levels["pymongo-4.18.2"].family == "mongo"
    # psycopg[binary]: the binary package follows psycopg's pin
    assert levels["psycopg-3.3.6+asyncpg-0.31.0"].pin_dict() == {"psycopg": "3.3.6", "asyncpg": "0.31.0",
                                                                  "psycopg-binary": "3.3.6"}
    # the seeds' versions in full (and seed); none in quick and smoke
    exp = registry.get("departures")
    assert exp.params("full").drivers == experiment.SEED_DRIVERS
    assert exp.params("smoke").drivers == () and exp.params("quick").drivers == ()
    # a level of a family not measured is not run
    assert [lv.family for lv in exp.params("smoke", {"families": "pg", "drivers": "pymongo=4.18.2",
                                                     "pythons": CURRENT}).driver_levels()] == []


def test_the_lock_level_reuses_the_interpreters_own_venv():
    interp = interpreters.resolve(CURRENT)
    assert interpreters.is_locked(interp, {"pymongo": LOCKED})
    assert not interpreters.is_locked(interp, {"pymongo": OTHER})
    venv = interpreters.ensure_pinned_venv(interp, {"pymongo": LOCKED}, build=False)
    assert venv.python == sys.executable and venv.mode == "study"


def test_a_pinned_venv_never_built_is_not_built_inside_a_measurement(tmp_path):
    with pytest.raises(HarnessError, match=r"no ready virtual environment .* pymongo==4\.17\.0"):
        interpreters.ensure_pinned_venv(interpreters.resolve(CURRENT), {"pymongo": "4.17.0"}, tmp_path,
                                        build=False)
    assert not (tmp_path / f"py{CURRENT}-pymongo-4.17.0").exists()


@pytest.mark.parametrize("entry, words", [
    ("4.18.2", ["'4.18.2'", "names no package"]),
    ("pymongo=", ["'pymongo='", "NAME=VERSION"]),
    ("pymango=4.18.2", ["'pymango=4.18.2'", "pymango is not a driver"]),
    ("pymongo=latest", ["'pymongo=latest'", "expected a version"]),
    ("pymongo=4.18.2+asyncpg=0.31.0", ["'pymongo=4.18.2+asyncpg=0.31.0'", "both families"]),
    ("psycopg=3.3.6+asyncpg=0.31.0,0.32.0", ["'0.32.0'", "names no package"]),
    ("pymongo=4.18.2+pymongo=4.15.0", ["pins a package twice"]),
    ("pymongo=4.18.2,4.18.2", ["drivers", "more than once"]),
])
def test_a_malformed_entry_is_one_line_naming_it(entry, words):
    with pytest.raises(HarnessError) as e:
        study.plan(["departures"], "smoke", {"departures.drivers": entry, "departures.pythons": CURRENT})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("departures: parameter drivers")
    for w in words:
        assert w in msg


def test_driver_python_must_be_one_of_the_interpreters():
    other = "3.12" if CURRENT != "3.12" else "3.11"
    try:
        interpreters.resolve(other)
    except HarnessError:
        pytest.skip(f"Python {other} is not installed here")
    with pytest.raises(HarnessError, match="driver_python"):
        registry.get("departures").params("smoke", {"pythons": CURRENT, "driver_python": other,
                                                    "drivers": "pymongo=4.18.2"})
