"""`harness compare` flags two runs on different drivers (issue 25 point 4): every driver under test
is among the checked metadata, read from the manifest's environment packages (over the `--python`
venv's), and the departures driver factor's levels as they resolved. Manifests only, no servers."""

from __future__ import annotations

import copy

import pytest

from harness.core import interpreters
from harness.reading import compare, readout

LOCKED = {"pymongo": "4.20.1", "motor": "3.7.1", "psycopg": "3.3.9", "psycopg-binary": "3.3.9",
          "psycopg-pool": "3.3.3", "asyncpg": "0.32.0", "uvloop": "0.23.0", "numpy": "2.4.6"}
SEEDS = {"pymongo": "4.18.2", "motor": "3.6.0", "psycopg": "3.3.6", "psycopg-binary": "3.3.6",
         "psycopg-pool": "3.2.6", "asyncpg": "0.31.0", "uvloop": "0.22.1"}


def _manifest(packages: dict | None = None, venv_packages: dict | None = None, prepared: dict | None = None) -> dict:
    m = {"profile": "full",
         "experiments": {e: {"params": {"x": 1}, "version": "v1", "needs": ["mongodb", "postgres"],
                             "repeats_planned": 3}
                         for e in ("mongo_models", "pg_models", "fastapi_locust", "departures")},
         "environment": {"packages": dict(LOCKED if packages is None else packages),
                         "machine": {"boot_id": "b", "cpu_model": "AMD EPYC"}, "git": {"sha": "a" * 40}}}
    if venv_packages is not None:
        m["interpreter"] = {"interpreter": {"version": "3.12.1", "implementation": "cpython", "build": "gil"},
                            "packages": venv_packages}
    if prepared is not None:
        m["prepared"] = {"departures": prepared}
    return m


def _drivers(rows: list[dict]) -> dict[str, dict]:
    return {r["what"]: r for r in rows if r["what"].startswith("driver")}


def test_every_driver_under_test_is_checked():
    assert set(interpreters.DRIVERS) <= set(readout.drivers())
    for name in ("pymongo", "motor", "psycopg", "psycopg-pool", "asyncpg", "uvloop"):
        assert name in readout.drivers()


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_a_different_driver_version_is_flagged_with_the_experiments_it_shapes(name):
    other = dict(LOCKED, **{name: SEEDS[name]})
    rows, bad = compare.checked_metadata(_manifest(), _manifest(other))
    flagged = _drivers(rows)
    assert list(flagged) == [f"driver {name}"]
    r = flagged[f"driver {name}"]
    assert (r["A"], r["B"], r["effect"]) == (LOCKED[name], SEEDS[name], compare.NOTE)
    users = [e for e in sorted(("mongo_models", "pg_models", "fastapi_locust", "departures"))
             if e in readout.drivers()[name]]
    assert users and r["why"] == "shapes " + ", ".join(users)
    assert bad == {}   # a factor that changed, not a different measurement


def test_all_drivers_at_once_and_none():
    rows, _ = compare.checked_metadata(_manifest(), _manifest(dict(LOCKED, **SEEDS)))
    assert set(_drivers(rows)) == {f"driver {n}" for n in SEEDS}
    rows, _ = compare.checked_metadata(_manifest(), _manifest())
    assert rows == []
    # a driver missing from one run is a difference too
    rows, _ = compare.checked_metadata(_manifest(), _manifest({k: v for k, v in LOCKED.items() if k != "uvloop"}))
    assert _drivers(rows)["driver uvloop"]["B"] == "—"


def test_the_workers_venv_drivers_count_over_the_study_environments():
    """`--python 3.12`: the workers ran the venv's drivers, whatever the study's own environment had."""
    a = _manifest(venv_packages=dict(LOCKED))
    b = _manifest(venv_packages=dict(LOCKED, pymongo="4.18.2"))
    assert set(_drivers(compare.checked_metadata(a, b)[0])) == {"driver pymongo"}
    same = _manifest(packages=dict(LOCKED, pymongo="4.15.0"), venv_packages=dict(LOCKED))
    assert _drivers(compare.checked_metadata(a, same)[0]) == {}


def test_the_departures_driver_levels_as_they_resolved():
    def level(version: str | None) -> dict:
        if version is None:
            return {"pins": {"pymongo": "4.15.*"}, "skipped": "pymongo==4.15.* cannot be installed"}
        return {"pins": {"pymongo": "4.15.*"}, "mode": "client", "packages": dict(LOCKED, pymongo=version)}

    base = {"3.11": {"packages": LOCKED}, "3.11 pymongo-4.15.*": level("4.15.5")}
    rows, _ = compare.checked_metadata(_manifest(prepared=base), _manifest(prepared=copy.deepcopy(base)))
    assert rows == []
    later = dict(base, **{"3.11 pymongo-4.15.*": level("4.15.6")})
    r = _drivers(compare.checked_metadata(_manifest(prepared=base), _manifest(prepared=later))[0])
    assert r["driver level 3.11 pymongo-4.15.* (departures)"]["A"] == "pymongo 4.15.5"
    assert r["driver level 3.11 pymongo-4.15.* (departures)"]["B"] == "pymongo 4.15.6"
    skipped = dict(base, **{"3.11 pymongo-4.15.*": level(None)})
    r = _drivers(compare.checked_metadata(_manifest(prepared=base), _manifest(prepared=skipped))[0])
    assert r["driver level 3.11 pymongo-4.15.* (departures)"]["B"].startswith("skipped")
    r = _drivers(compare.checked_metadata(_manifest(prepared={"3.11": {}}), _manifest(prepared=base))[0])
    assert r["driver level 3.11 pymongo-4.15.* (departures)"]["A"] == "not run"


def test_compare_text_lists_the_driver_difference(tmp_path):
    """Through `compare_text`, as `harness compare` prints it."""
    import json

    from harness.core import store

    def put(run_id: str, manifest: dict) -> store.Run:
        d = tmp_path / "runs" / run_id
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({**manifest, "run_id": run_id, "status": "complete",
                                                     "format_version": store.FORMAT_VERSION}))
        store.summary_path(d).write_text(json.dumps({
            "format_version": store.SUMMARY_VERSION, "run_id": run_id,
            "metrics": [{"experiment": "mongo_models", "variant": "v", "metric": "throughput_qps",
                         "unit": "queries/s", "estimate": 100.0, "ci_low": 90.0, "ci_high": 110.0, "cv": 0.05,
                         "n_repeats": 3, "headline": True}], "claims": []}))
        return store.Run(d)

    a = put("20261201T000000Z-full-aaaa", _manifest())
    b = put("20261202T000000Z-full-bbbb", _manifest(dict(LOCKED, pymongo="4.18.2")))
    text = compare.compare_text(a, b)
    assert "[differs] driver pymongo: A 4.20.1 | B 4.18.2 -- shapes departures, mongo_models" in text
