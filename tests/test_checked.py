"""The checked metadata is one table (core.checked.CHECKED), applied by one function: `harness
compare` shows the rows on which two runs differ, and the pooling across runs keeps apart the runs
that differ on a row that does not pool. Both are tested here on the reference's own manifest, with
one key changed at a time."""

from __future__ import annotations

import copy

import pytest

from harness.core import checked, pooling, store
from harness.core.config import REPO_ROOT
from harness.reading import compare


@pytest.fixture(scope="module")
def reference():
    (path,) = sorted((REPO_ROOT / "data" / "reference").iterdir())
    return store.load_manifest(path), store.load_summary(path)


def _row(summary, claim_id):
    return next(c for c in summary["claims"] if c["claim_id"] == claim_id)


def _changed(manifest, path, value):
    m = copy.deepcopy(manifest)
    target = m
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value
    return m


def test_every_key_is_read_from_a_manifest_and_one_run_differs_from_itself_in_nothing(reference):
    manifest, summary = reference
    assert list(checked.differences(manifest, manifest, ("pymongo",))) == []
    rows, incomparable = compare.checked_metadata(manifest, manifest, summary, summary)
    assert rows == [] and incomparable == {}
    assert {k.scope for k in checked.CHECKED} <= {"run", "experiment", "role", "driver", "level", "others"}
    assert [k.what for k in checked.CHECKED if not k.pools] == \
        ["parameters of {}", "experiment {}", "server product {}", "profile"]


@pytest.mark.parametrize(("path", "value", "what", "kept_apart"), [
    (("servers", "mongodb", "product"), "MongoDB", "server mongodb", True),
    (("experiments", "mongo_pool", "params", "tasks"), 7, "experiment mongo_pool", True),
    (("experiments", "mongo_pool", "version"), "0123456789ab", "experiment mongo_pool", True),
    (("experiments", "mongo_pool", "repeats_planned"), 99, "repeats of mongo_pool", False),
    (("environment", "lock_sha256"), "f" * 64, "lock hash (requirements.lock sha256)", False),
])
def test_compare_and_the_pooling_read_the_same_rows(reference, path, value, what, kept_apart):
    manifest, summary = reference
    other = _changed(manifest, path, value)
    rows, incomparable = compare.checked_metadata(manifest, other, summary, summary)
    shown = {r["what"]: r for r in rows}
    assert what in shown, sorted(shown)
    assert (shown[what]["effect"] == compare.INCOMPARABLE) is kept_apart
    assert ("mongo_pool" in incomparable) is kept_apart
    # the pooling: a MongoDB pool lesson's row is keyed apart exactly when compare says incomparable;
    # a PostgreSQL lesson's row, which reads no MongoDB experiment, is not
    a, b = pooling.record(summary, manifest), pooling.record(summary, other)
    pool_row, pg_row = _row(summary, "001-pool-01"), _row(summary, "002-slow20-01")
    assert (pooling._key(a, pool_row, "version") != pooling._key(b, pool_row, "version")) is kept_apart
    assert pooling._key(a, pg_row, "version") == pooling._key(b, pg_row, "version")
