"""Verdict words and their classes, in one place: every module that names or groups a verdict
imports it from here.

Five vocabularies, each decided by the module named (whose docstring gives its rule):
- the claims ledger's (`harness.judging.claims`): `VERDICTS`, plus the statuses of rows that are not
  judged (`SETUP_SAME`, `SETUP_DIFFERS`, `CONTEXT`);
- verify's checks on a user's workload (`harness.experiments.verify.analysis`): `CHECKS`, pass / fail /
  inconclusive;
- openloop_check's comparison with Vegeta (`harness.experiments.openloop_check.analysis`): `AGREEMENT`;
- departures' effect of a factor level on a seed's ratio (`harness.experiments.departures.analysis`): `EFFECTS`;
- a lesson pooled across boots (`harness.core.pooling`): the ledger's verdicts, or `TOO_FEW_BOOTS`.

Every word has exactly one class (`CLASSES`), which says what it means for the sentence tested:
    holds   the seed's side is significant: reproduced, equivalent, size not reproduced (the
            direction holds, the size lies outside the band: shown as a departure), direction, no
            seed figure (the direction holds; no seed number to compare a size with), direction
            only (the two together, in summaries of version 3 and earlier), pass; agree; explains,
            explains part
    fails   the opposite side is significant: not reproduced, fail; differ; moves away
    open    nothing decided: inconclusive, premise not met, not comparable, not measured in this
            run, the statuses of setup and context rows; not shown, changes the ratio; too few
            boots for a verdict across them
`verdict_class` applies it; an unknown word (a summary written by another version) is `open`.

A move between two runs (`move`; `harness compare` and `harness history --lessons` both use it):
    same         the same word
    same class   another word of the same class (reproduced -> size not reproduced)
    moved        another class, not between holds and fails (inconclusive -> reproduced)
    OPPOSED      holds <-> fails: the seed's side significant in one run, the opposite in the other
So `size not reproduced` -> `not reproduced` is OPPOSED: both are decisive, on opposite sides.
"""

from __future__ import annotations

# -- the claims ledger's verdicts (harness.judging.claims) -------------------------------------------------
NOT_COMPARABLE = "not comparable"
PREMISE_NOT_MET = "premise not met"
EQUIVALENT = "equivalent"
NOT_REPRODUCED = "not reproduced"
REPRODUCED = "reproduced"
SIZE_NOT_REPRODUCED = "size not reproduced"
DIRECTION_NO_FIGURE = "direction, no seed figure"
DIRECTION_ONLY = "direction only"   # both of the above, in summaries of version 3 and earlier: read, never written
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured in this run"
# statuses of the rows that are not judged
SETUP_SAME = "setup: same as the seed"
SETUP_DIFFERS = "setup: differs from the seed"
CONTEXT = "not a measurement"

VERDICTS = (NOT_COMPARABLE, EQUIVALENT, NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, SIZE_NOT_REPRODUCED,
            DIRECTION_NO_FIGURE, DIRECTION_ONLY, PREMISE_NOT_MET, NOT_MEASURED)
JUDGED = (EQUIVALENT, NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, SIZE_NOT_REPRODUCED, DIRECTION_NO_FIGURE,
          DIRECTION_ONLY)
STATUSES = VERDICTS + (SETUP_SAME, SETUP_DIFFERS, CONTEXT)

# -- verify's checks (harness.experiments.verify.analysis) -----------------------------------------------------
PASS = "pass"
FAIL = "fail"
CHECKS = (PASS, FAIL, INCONCLUSIVE)

# -- openloop_check: harness.core.openloop against Vegeta at one rate (harness.experiments.openloop_check.analysis) ---
AGREE = "agree"
DIFFER = "differ"
AGREEMENT = (AGREE, DIFFER)

# -- departures: what one factor level does to the seed's ratio (harness.experiments.departures.analysis) --------
EXPLAINS = "explains"
EXPLAINS_PART = "explains part"
MOVES_AWAY = "moves away"
NOT_SHOWN = "not shown"
NOT_SHOWN_FEW = "not shown (too few repeats for an interval)"
CHANGES_RATIO = "changes the ratio (no seed ratio to compare)"
EFFECTS = (EXPLAINS, EXPLAINS_PART, MOVES_AWAY, NOT_SHOWN, NOT_SHOWN_FEW, CHANGES_RATIO)

# -- a lesson pooled across boots (harness.core.pooling) ----------------------------------------------
TOO_FEW_BOOTS = "too few boots for a verdict"

# -- classes ---------------------------------------------------------------------------------------
HOLDS, FAILS, OPEN = "holds", "fails", "open"
CLASSES: dict[str, tuple[str, ...]] = {
    HOLDS: (REPRODUCED, EQUIVALENT, SIZE_NOT_REPRODUCED, DIRECTION_NO_FIGURE, DIRECTION_ONLY, PASS, AGREE,
            EXPLAINS, EXPLAINS_PART),
    FAILS: (NOT_REPRODUCED, FAIL, DIFFER, MOVES_AWAY),
    OPEN: (INCONCLUSIVE, PREMISE_NOT_MET, NOT_COMPARABLE, NOT_MEASURED, SETUP_SAME, SETUP_DIFFERS, CONTEXT,
           NOT_SHOWN, NOT_SHOWN_FEW, CHANGES_RATIO, TOO_FEW_BOOTS),
}
# decisive: a verdict that rests on a significant test (Holm's adjustment may undo it)
DECISIVE = (EQUIVALENT, NOT_REPRODUCED, REPRODUCED, SIZE_NOT_REPRODUCED, DIRECTION_NO_FIGURE, DIRECTION_ONLY)
CHECKS_DECISIVE = (PASS, FAIL)

# The order in which verdicts are listed (counts, legends): holding first, then failing, then open.
ORDER = CLASSES[HOLDS] + CLASSES[FAILS] + CLASSES[OPEN]

# Colours: `COLOURS` strong (badges and bars, white text on them), `BACKGROUNDS` pale (table cells).
COLOURS = {REPRODUCED: "#2e7d32", EQUIVALENT: "#66bb6a", DIRECTION_ONLY: "#9e9d24", PASS: "#2e7d32",
           SIZE_NOT_REPRODUCED: "#e65100", DIRECTION_NO_FIGURE: "#9e9d24",
           NOT_REPRODUCED: "#c62828", FAIL: "#c62828",
           INCONCLUSIVE: "#f9a825", PREMISE_NOT_MET: "#6d4c41", NOT_COMPARABLE: "#1565c0",
           NOT_MEASURED: "#9e9e9e", SETUP_SAME: "#1565c0", SETUP_DIFFERS: "#f9a825", CONTEXT: "#9e9e9e"}
BACKGROUNDS = {REPRODUCED: "#d7f0dd", EQUIVALENT: "#d7f0dd", DIRECTION_ONLY: "#eef6d0", PASS: "#d7f0dd",
               SIZE_NOT_REPRODUCED: "#ffe0c2", DIRECTION_NO_FIGURE: "#eef6d0",
               NOT_REPRODUCED: "#f8d7da", FAIL: "#f8d7da",
               INCONCLUSIVE: "#fdf1d6", PREMISE_NOT_MET: "#ece3f6", NOT_COMPARABLE: "#e3ecfa",
               NOT_MEASURED: "#eeeeee", SETUP_SAME: "#e3ecfa", SETUP_DIFFERS: "#fdf1d6", CONTEXT: "#ffffff"}
# a word without its own colour takes its class's
CLASS_COLOURS = {HOLDS: "#2e7d32", FAILS: "#c62828", OPEN: "#9e9e9e"}
CLASS_BACKGROUNDS = {HOLDS: "#d7f0dd", FAILS: "#f8d7da", OPEN: "#ffffff"}

_CLASS_OF = {word: cls for cls, words in CLASSES.items() for word in words}


def verdict_class(verdict: str) -> str:
    """`holds`, `fails` or `open` (the module docstring); an unknown word is `open`."""
    return _CLASS_OF.get(verdict, OPEN)


def colour(verdict: str, *, background: bool = False) -> str:
    """The word's colour (`COLOURS`, or `BACKGROUNDS` for a table cell), else its class's."""
    own, by_class = (BACKGROUNDS, CLASS_BACKGROUNDS) if background else (COLOURS, CLASS_COLOURS)
    return own.get(verdict) or by_class[verdict_class(verdict)]


SAME, SAME_CLASS, MOVED, OPPOSED = "same", "same class", "moved", "OPPOSED"
MOVES = (SAME, SAME_CLASS, MOVED, OPPOSED)


def move(a: str, b: str) -> str:
    """How a verdict moved from `a` (one run) to `b` (another): one of `MOVES` (the module docstring)."""
    if a == b:
        return SAME
    ca, cb = verdict_class(a), verdict_class(b)
    if ca == cb:
        return SAME_CLASS
    return OPPOSED if {ca, cb} == {HOLDS, FAILS} else MOVED
