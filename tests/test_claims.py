"""The claims ledger: its data, its expression language, and its evaluation on a real smoke run."""

from __future__ import annotations

import math
import re

import pytest

from harness import claims, registry

# Claims per seed as the ledger stands; a row lost by accident fails here.
MIN_CLAIMS = {"000": 16, "001": 46, "002": 51}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.fixture(scope="module")
def ledger():
    return claims.load()


@pytest.fixture(scope="module")
def run_metrics(smoke_run):
    metrics, errors = claims.collect_metrics(smoke_run)
    return metrics, errors


def test_ledger_is_complete_and_well_formed(ledger):
    counts = ledger.groupby("document").size().to_dict()
    for doc, n in MIN_CLAIMS.items():
        assert counts.get(doc, 0) >= n, f"seed {doc}: {counts.get(doc, 0)} claims, expected at least {n}"
    assert set(ledger["document"]) <= set(claims.DOCUMENTS)
    for row in ledger.itertuples():
        assert row.claim_id.startswith(f"{row.document}-"), row.claim_id
        assert row.sentence.strip(), row.claim_id
        if row.kind != "context":
            assert row.role in claims.ROLES, row.claim_id
            assert claims.refs(row.quantity), f"{row.claim_id}: its quantity reads no metric"


def test_seed_values_come_from_the_sentences(ledger):
    """The ledger holds the seeds' numbers only: each seed value is a number of its sentence (in the
    sentence's unit or converted s -> ms), or a ratio of numbers of the sentence, named in its unit."""
    for row in ledger.itertuples():
        if row.kind == "context" or math.isnan(row.seed_value):
            continue
        numbers = {float(n) for n in _NUMBER.findall(row.sentence.replace(",", ""))}
        derived = "/" in row.seed_unit
        in_sentence = row.seed_value in numbers or row.seed_value / 1000 in numbers
        assert in_sentence or derived, (f"{row.claim_id}: seed value {row.seed_value} is not a number of "
                                        f"its sentence {row.sentence!r}")


def test_expression_language_rejects_anything_but_arithmetic():
    for bad in ['__import__("os").system("true")', "{a.b}.real", "value ** 2", "unknown > 1",
                '"text" == 1', "[1][0]", "lambda: 1", "{not a name} > 1", "value if 1 else 2", ""]:
        with pytest.raises(claims.ExpressionError):
            claims.parse(bad)
    e = claims.parse("0.5 <= ratio <= 2 and {x.y.max_ms} > max(1, {param:x.n.min})")
    assert e.refs == ("x.y.max_ms", "param:x.n.min")


def test_criteria_logic_on_real_metrics(smoke_run, run_metrics):
    metrics, _ = run_metrics
    assert metrics, "the smoke run produced no metric at all"
    name, v = next((k, x) for k, x in sorted(metrics.items()) if x and not math.isnan(x))
    lookup = claims._lookup(smoke_run, metrics)
    ref = "{" + name + "}"
    assert claims.parse(f"{ref} == {ref}").evaluate(lookup) is True
    assert claims.parse(f"{ref} < {ref}").evaluate(lookup) is False
    assert claims.parse(f"{ref} / {ref}", ()).evaluate(lookup) == pytest.approx(1.0)
    band = claims.parse("0.5 <= ratio <= 2")
    assert band.evaluate(lookup, {"ratio": v / v}) is True
    assert band.evaluate(lookup, {"ratio": v / (10 * v)}) is False
    assert claims.parse(f"value > seed and {ref} > 0 or {ref} <= 0").evaluate(
        lookup, {"value": 2.0, "seed": 1.0}) is True
    with pytest.raises(claims.Missing):
        claims.parse("{no_such_experiment.variant.metric} > 1").evaluate(lookup)
    # a parameter the run really used
    exp, entry = next(iter(smoke_run.experiments.items()))
    field, val = next((k, x) for k, x in entry["params"].items()
                      if isinstance(x, (int, float)) and not isinstance(x, bool))
    assert claims.parse(f"{{param:{exp}.{field}}}", ()).evaluate(lookup) == pytest.approx(val)


def test_evaluate_every_claim_on_the_smoke_run(smoke_run, ledger):
    ev = claims.evaluate(smoke_run)
    assert not ev.attrs["metric_errors"], f"analysis modules failed: {ev.attrs['metric_errors']}"
    assert list(ev["claim_id"]) == list(ledger["claim_id"])
    for row in ev.itertuples():
        assert row.reproduced in (True, False, None), row.claim_id
        assert row.status in claims.STATUSES, row.claim_id
        if row.kind == "context":
            assert row.status == claims.CONTEXT and row.reproduced is None
            continue
        assert (row.reproduced is None) == (row.status not in (claims.REPRODUCED, claims.NOT_REPRODUCED))
        if row.status == claims.NOT_MEASURED:  # the value may be known, the criterion not
            assert row.missing, f"{row.claim_id}: not measured without saying why"
        else:
            assert row.value is not None and not math.isnan(row.value), row.claim_id
            if row.seed_value and not math.isnan(row.seed_value):
                assert row.ratio == pytest.approx(row.value / row.seed_value)
        if row.kind == "setup":
            assert row.reproduced is None
        # the server that produced the figure, by the run's own label (FerretDB is never "MongoDB")
        role = ledger.set_index("claim_id").at[row.claim_id, "role"]
        if role in smoke_run.manifest.get("servers", {}):
            assert row.server == smoke_run.server_label(role)
    assert claims.summary(ev)["claims"].sum() == len(ev)
    html = claims.style(ev).to_html()
    assert "claim_id" in html


def _shape(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def test_ledger_metric_names_match_the_analysis_modules(smoke_run, ledger, run_metrics):
    """Every metric the ledger reads has the shape of a metric an analysis module computes (sizes
    aside: the smoke run's `pool4` stands for the seed's `pool20`), for each experiment that ran."""
    metrics, _ = run_metrics
    shapes = {_shape(k) for k in metrics}
    ran = {n for n, e in smoke_run.experiments.items() if e.get("status") == "ok"}
    registered = set(registry.all_experiments())
    unknown, mismatched = set(), set()
    for row in ledger.itertuples():
        for ref in claims.refs(row.quantity) + claims.refs(row.criterion):
            name = ref.removeprefix("param:")
            exp = name.split(".", 1)[0]
            if exp not in registered:
                unknown.add(f"{row.claim_id}: {ref}")
            elif ref.startswith("param:"):
                field = name.split(".")[1]
                assert field in smoke_run.experiments.get(exp, {}).get("params", {field: None}), \
                    f"{row.claim_id}: {exp} has no parameter {field}"
            elif exp in ran and _shape(name) not in shapes:
                mismatched.add(f"{row.claim_id}: {ref}")
    assert not unknown, "ledger reads experiments that are not registered:\n" + "\n".join(sorted(unknown))
    assert not mismatched, ("ledger metrics no analysis module computes on the smoke run:\n"
                            + "\n".join(sorted(mismatched)))
