"""The manifest has one reader (`store.load_manifest`) and one upgrade (`store.upgrade_manifest`):
every committed manifest, and a hand-made old one, read to the current format's shape; a new run
writes that shape itself (format 3), and docs/FORMAT.md lists every key."""

from __future__ import annotations

import copy
import gzip
import json
import types
import typing
from typing import Any

import pytest

from harness.core import config, store
from harness.reading import readout, show

KEYS = typing.get_type_hints(store.Manifest)
# what format 3 writes from the start of a run: present in every manifest a reader sees
ALWAYS = ("format_version", "run_id", "experiments", "environment", "servers", "interpreter", "placement",
          "prepared", "server_resets", "server_restarts")


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type a `store.Manifest` key declares (containers by their kind)."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint) or hint
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, origin)


def _shape(m: dict[str, Any]) -> None:
    assert set(ALWAYS) <= set(m), set(ALWAYS) - set(m)
    unknown = set(m) - set(KEYS)
    assert not unknown, f"keys store.Manifest does not declare: {unknown}"
    wrong = {k: type(v).__name__ for k, v in m.items() if not _fits(v, KEYS[k])}
    assert not wrong, f"keys of another type than store.Manifest declares: {wrong}"
    assert m["format_version"] == store.FORMAT_VERSION


# every committed run: the reference's manifest.json, each history run's manifest.json.gz
COMMITTED = sorted(d for w in store.COMMITTED for d in (config.REPO_ROOT / "data" / w).glob("*")
                   if store.run_file(d, "manifest.json") is not None)


@pytest.mark.parametrize("run_dir", COMMITTED, ids=[d.name for d in COMMITTED])
def test_every_committed_manifest_reads_to_the_current_shape(run_dir):
    f = store.run_file(run_dir, "manifest.json")
    assert f is not None
    raw = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == store.GZ else f.read_bytes())
    m = store.load_manifest(run_dir)
    _shape(m)
    # a manifest of an older format says which; one of the current format needs no upgrade
    assert m.get("upgraded_from") == (raw["format_version"] if raw["format_version"] != store.FORMAT_VERSION else None)
    assert store.Run(run_dir).manifest == m
    assert store.upgrade_manifest(m) == m   # upgrading is done once: a second time changes nothing
    # nothing the run recorded is lost or changed on the way
    assert {k: v for k, v in m.items() if k in raw and k != "format_version"} == \
        {k: v for k, v in raw.items() if k != "format_version"}


def test_the_committed_manifests_are_there_to_test():
    """Every committed run directory is read above, the gzipped history included."""
    dirs = [d for w in store.COMMITTED for d in (config.REPO_ROOT / "data" / w).glob("*") if d.is_dir()]
    assert len(COMMITTED) == len(dirs) >= 2 and any("reference" in str(d) for d in COMMITTED)
    assert any(store.run_file(d, "manifest.json").suffix == store.GZ for d in COMMITTED)


def _old(version: int) -> dict[str, Any]:
    """A manifest as formats 1 and 2 wrote it before `interpreter`, `prepared` and `placement`
    (a bare placement name here, as an early format-2 run kept it)."""
    return {"format_version": version, "run_id": "20261101T000000Z-full-0ld0", "status": "complete",
            "profile": "full", "experiments": {"mongo_pool": {"status": "ok", "params": {}, "needs": ["mongodb"]}},
            "environment": {"python": {"version": "3.13.1", "implementation": "CPython", "gil_enabled": False},
                            "packages": {"pymongo": "4.10.0"}, "machine": {"boot_id": "b"}},
            "servers": {"mongodb": {"product": "MongoDB", "version": "8.2.1", "label": "MongoDB 8.2.1"}},
            "placement": "split", "timing": {}, "server_resets": [{"when": "after loading datasets", "seconds": 0.1}]}


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_manifest_upgrades_to_the_current_shape(version, tmp_path):
    old = _old(version)
    before = copy.deepcopy(old)
    m = store.upgrade_manifest(old, "hand-made")
    assert old == before, "the upgrade changed its input"
    _shape(m)
    assert m["upgraded_from"] == version
    assert m["interpreter"]["interpreter"] == {"implementation": "cpython", "version": "3.13.1", "gil_disabled": True,
                                               "build": "free-threaded"}
    assert m["placement"] == {"placement": "split"}
    assert m["prepared"] == {} and m["server_restarts"] == []
    assert m["server_resets"] == old["server_resets"]
    assert store.upgrade_manifest(m) == m
    # the readers see one shape: the interpreter and placement as an old run's own record said
    assert readout.interpreter(m) == "cpython 3.13.1 (free-threaded)" and readout.placement(m) == "split"
    d = tmp_path / old["run_id"]
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(old))
    (d / "summary.json").write_text(json.dumps({"summary_version": 2, "run_id": old["run_id"], "metrics": [],
                                                "claims": []}))
    assert "interpreter: cpython 3.13.1 (free-threaded); placement: split" in show.show_text(store.Run(d))


def test_a_manifest_of_no_readable_format_is_one_line_naming_it(tmp_path):
    for bad, words in (({"run_id": "x"}, "run format None"), ({**_old(2), "format_version": 9}, "run format 9"),
                       ([1, 2], "not a JSON object")):
        with pytest.raises(store.HarnessError, match=words) as e:
            store.upgrade_manifest(bad, "somewhere")
        assert "\n" not in str(e.value) and str(e.value).startswith("somewhere")
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "manifest.json").write_text(json.dumps({**_old(2), "format_version": 9}))
    assert [r["status"] for r in store.list_runs(tmp_path)] == ["unreadable"]


def test_a_run_writer_writes_the_current_format(tmp_path):
    w = store.RunWriter(tmp_path, "20261201T000000Z-smoke-0000", {"profile": "smoke"})
    assert json.loads((w.path / "manifest.json").read_text())["format_version"] == store.FORMAT_VERSION == 3


def test_a_new_run_writes_format_3_in_the_current_shape(smoke_run):
    """`study.run` writes every key format 3 promises: the upgrade has nothing to fill in."""
    raw = json.loads((smoke_run.path / "manifest.json").read_text())
    assert raw["format_version"] == 3
    _shape(raw)
    assert store.upgrade_manifest(raw) == raw


def test_format_md_lists_every_manifest_key():
    text = (config.REPO_ROOT / "docs" / "FORMAT.md").read_text()
    section = text.split("## manifest.json", 1)[1].split("\n## ", 1)[0]
    missing = [k for k in KEYS if f"`{k}`" not in section and f"`{k}." not in section]
    assert not missing, f"docs/FORMAT.md's manifest section does not name {missing}"


NOT_YET: tuple[str, ...] = ()   # every reader goes through store.load_manifest


def test_nothing_in_the_harness_reads_a_manifest_but_the_store():
    """`json.loads` of a manifest.json only in store.py (figures' own manifest.json is another file)."""
    offenders = []
    for f in sorted((config.REPO_ROOT / "harness").rglob("*.py")):
        if f.name in ("store.py", "figures.py") or f.name in NOT_YET:
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if '"manifest.json"' in line and ("read_text" in line or "json.load" in line or "open(" in line):
                offenders.append(f"{f.relative_to(config.REPO_ROOT)}:{i}")
    assert not offenders, offenders
