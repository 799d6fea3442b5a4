"""Verdict words and their classes (harness.core.verdicts): every word a module can emit has exactly one
class, and `harness compare` and `harness history --lessons` classify a verdict move the same way."""

from __future__ import annotations

import itertools

import pytest

from harness.core import verdicts
from harness.experiments.verify import analysis as verify
from harness.judging import claims, findings
from harness.reading import compare, history

EMITTED = {
    "claims": claims.STATUSES,
    "verify": verify.VERDICTS,
    "openloop_check": verdicts.AGREEMENT,
    "departures": verdicts.EFFECTS,
    "pooling": (verdicts.TOO_FEW_BOOTS,),    # with the ledger's words, for a lesson across boots
}


@pytest.mark.parametrize("module", sorted(EMITTED))
def test_every_emitted_word_has_exactly_one_class(module):
    for word in EMITTED[module]:
        homes = [cls for cls, words in verdicts.CLASSES.items() if word in words]
        assert len(homes) == 1, f"{module}'s {word!r} is in {homes or 'no class'}"
        assert verdicts.colour(word).startswith("#") and verdicts.colour(word, background=True).startswith("#")
    if module in ("claims", "verify"):   # the words shown in tables and badges: each its own colour
        assert set(EMITTED[module]) <= set(verdicts.COLOURS) & set(verdicts.BACKGROUNDS)


def test_the_classes_hold_no_word_twice_and_no_stranger():
    every = [w for words in verdicts.CLASSES.values() for w in words]
    assert len(every) == len(set(every))
    assert set(every) == set().union(*map(set, EMITTED.values()))
    assert set(verdicts.ORDER) == set(every)
    assert set(verdicts.DECISIVE) == set(claims.JUDGED) - {verdicts.INCONCLUSIVE}


def test_an_unknown_word_is_open_and_verify_s_words_class_as_the_ledger_s():
    assert verdicts.verdict_class("a verdict of a later version") == verdicts.OPEN
    assert [verdicts.verdict_class(v) for v in verify.VERDICTS] == [verdicts.HOLDS, verdicts.FAILS, verdicts.OPEN]


def _lesson_marks(head: str, a: str, b: str) -> set[str]:
    records = [{"summary": {"claims": [{"claim_id": head, "kind": "measurement", "verdict": v, "n_ran": 3}]},
                "commit": f"{i}" * 7, "machine": "M1"} for i, v in enumerate((a, b), 1)]
    text = history.lessons_history_text(records)
    row = text.split(f"({head}):")[1].splitlines()[2]
    return {m for m in ("MOVED", "OPPOSED") if row.rstrip().endswith(m)}


def test_compare_and_history_classify_every_move_alike():
    """Every pair of judged verdicts: compare's `change` and history --lessons' mark agree
    (`direction only` -> `not reproduced` is OPPOSED in both)."""
    head = next(lesson for lesson in findings.LESSONS if lesson.id == "001-pool").claims[0]
    words = [v for v in claims.VERDICTS if v != verdicts.NOT_MEASURED]
    for a, b in itertools.product(words, words):
        summaries = [{"claims": [{"claim_id": head, "kind": "measurement", "verdict": v}]} for v in (a, b)]
        df, _ = compare.compare_verdicts(*summaries)
        change = df["change"].iloc[0]
        assert change == verdicts.move(a, b)
        expected = {change.upper()} if change in (verdicts.MOVED, verdicts.OPPOSED) else set()
        assert _lesson_marks(head, a, b) == expected, (a, b, change)
    assert verdicts.move(verdicts.DIRECTION_ONLY, verdicts.NOT_REPRODUCED) == verdicts.OPPOSED
    assert verdicts.move(verdicts.SIZE_NOT_REPRODUCED, verdicts.NOT_REPRODUCED) == verdicts.OPPOSED
    assert verdicts.move(verdicts.REPRODUCED, verdicts.SIZE_NOT_REPRODUCED) == verdicts.SAME_CLASS
