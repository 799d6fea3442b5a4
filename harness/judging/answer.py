"""The answer to an engineer, lesson by lesson: what to do, this study's figure beside the seed's,
and how sure the study is across machines. One row per seed lesson (`findings.LESSONS`), read by
the README's generated table (`harness.writing.generated`) and the report's first table (`harness.writing.report`).

Across machines, in plain words (`across_text`): the pooled word of a lesson's primary row over the
committed runs of the reference's experiment versions (`findings.committed_pooled`), with how many
runs alone read the same word, how many read another decisive word (for a band, a size outside it
contradicts `reproduced`), and how many decided nothing. Where the contradicting runs are at least
as many as the agreeing ones, the cell says *mixed* instead of a pooled word. The instruction is the
lesson's own for the class of the word shown (`Lesson.do`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import num, pooling
from ..core.verdicts import DECISIVE, TOO_FEW_BOOTS, verdict_class
from . import findings

LEGEND = (
    "Words: **reproduced** the seed's figure holds here (its direction, and a size inside a band around "
    "it); **size not reproduced** the direction holds, the size lies outside the band; **direction** the "
    "seed gave no figure, its direction holds; **equivalent** the two options differ by less than the "
    "seed's margin; **not reproduced** the opposite holds; **inconclusive** the repeats cannot tell. "
    "Figures are ratios of the two options the seed compares (×) or a time; [brackets]: the 90% interval "
    "over repeats. A *machine* is one boot of a 2-core virtual machine; *a new run* is where one more run "
    "should land, 90% of the time."
)
SHORT_WORD = {"direction, no seed figure": "direction"}


def short_word(verdict: str) -> str:
    return SHORT_WORD.get(verdict, verdict)


def _seed_text(claim: Mapping[str, Any]) -> str:
    seed = num.finite(claim.get("seed_value"))
    if seed is None:
        return "seed: direction only"
    unit = str(claim.get("seed_unit") or "")
    return f"seed ×{num.sig3(seed)}" if unit.startswith("x") else f"seed {num.sig3(seed)} {unit}"


def here_text(claim: Mapping[str, Any] | None) -> str:
    """The reference run's word and figure [90% interval], beside the seed's figure."""
    if claim is None:
        return "not measured"
    word = f"**{short_word(str(claim.get('verdict')))}**"
    est = num.finite(claim.get("estimate"))
    if est is None:
        return f"{word}, no figure; {_seed_text(claim)}"
    unit = str(claim.get("seed_unit") or "")
    ratio = unit.startswith("x") or claim.get("comparison") == "equivalence" or not unit
    figure = f"×{num.sig3(est)}" if ratio else f"{num.sig3(est)} {unit}"
    lo, hi = num.finite(claim.get("ci_low")), num.finite(claim.get("ci_high"))
    if lo is not None and hi is not None:
        figure += f" [{num.sig3(lo)}, {num.sig3(hi)}]"
    return f"{word} {figure}; {_seed_text(claim)}"


def counts(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(agree, contradict, undecided) among a pooled lesson's runs: the same word as the pooled
    verdict, another decisive word, no decisive word."""
    verdict = str(p.get("verdict") or "")
    agree = contradict = undecided = 0
    for word in (p.get("verdicts") or {}).values():
        if pooling.says_the_same(word, verdict):
            agree += 1
        elif word in DECISIVE:
            contradict += 1
        else:
            undecided += 1
    return agree, contradict, undecided


def across_text(p: Mapping[str, Any] | None) -> str:
    """How sure the study is across machines, in plain words (the module docstring)."""
    if p is None or not p.get("k"):
        return "no committed run of these versions gives a figure"
    n = int(p.get("n_runs") or 0)
    if not p.get("pooled"):
        return f"one machine so far ({n} run{'s' if n != 1 else ''})"
    if p.get("verdict") == TOO_FEW_BOOTS:
        return f"2 machines ({n} runs): too few for a word across machines"
    agree, contradict, undecided = counts(p)
    said = Counter(short_word(w) for w in (p.get("verdicts") or {}).values() if w in DECISIVE)
    if contradict >= agree and contradict:
        text = f"**mixed** over {p['k']} machines: " + ", ".join(f"{c} {w}" for w, c in said.most_common())
    else:
        word = short_word(str(p["verdict"]))
        text = f"**{word}** over {p['k']} machines: {agree} of {n} runs agree"
        if contradict:
            others = {short_word(w) for w in (p.get("verdicts") or {}).values()
                      if w in DECISIVE and not pooling.says_the_same(w, str(p["verdict"]))}
            text += f", {contradict} {' or '.join(sorted(others))}"
    if undecided:
        text += f", {undecided} undecided"
    if p.get("pi_low") is not None:
        text += f"; a new run: {num.sig3(p['pi_low'])}–{num.sig3(p['pi_high'])}"
    return text


def kinds_pooled(runs: Sequence[pooling.RunRecord]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Each kind of processor's own pool of every lesson (the reference's experiment versions, as
    `findings.committed_pooled`): kind -> claim id -> pooled row."""
    claims = [lesson.claims[0] for lesson in findings.LESSONS]
    return {kind: {str(r["claim_id"]): r for r in pooling.pooled_lessons(group, claims).to_dict("records")}
            for kind, group in pooling.by_processor_kind(runs).items()}


def split_by_kind(claim_id: str, kinds: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Where two kinds of processor each give a word across machines and the words differ, each
    kind's word with its runs that agree ("" otherwise): the pool over both then has no word."""
    words = {}
    for kind, pooled in kinds.items():
        p = pooled.get(claim_id)
        if p and p.get("pooled") and p.get("verdict") in DECISIVE:
            words[kind] = (str(p["verdict"]), counts(p)[0], int(p.get("n_runs") or 0))
    if len(words) < 2 or len({w for w, _, _ in words.values()}) < 2:
        return ""
    return "by processor: " + "; ".join(f"**{short_word(w)}** on {kind} ({a} of {n} runs agree)"
                                        for kind, (w, a, n) in sorted(words.items()))


def rows(summary: Mapping[str, Any], pooled: Mapping[str, Mapping[str, Any]],
         kinds: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> list[dict[str, str]]:
    """One dict per lesson: `lesson` (seed: short name), `do`, `here`, `across` (`across_text`, or
    each kind's word where the kinds of processor disagree: `split_by_kind`), and `word` (the word
    the row stands on: the pooled one where there is one, else the reference run's)."""
    by_id = findings.claims_by_id(summary)
    out = []
    for lesson in findings.LESSONS:
        claim = by_id.get(lesson.claims[0])
        p = pooled.get(lesson.claims[0])
        if p and p.get("pooled") and p.get("verdict") != TOO_FEW_BOOTS:
            word = str(p.get("verdict"))
        else:
            word = str((claim or {}).get("verdict") or "")
        split = split_by_kind(lesson.claims[0], kinds or {})
        out.append({"id": lesson.id, "lesson": f"{lesson.seed}: {lesson.name}",
                    "do": (lesson.do or {}).get(verdict_class(word), ""), "here": here_text(claim),
                    "across": split or across_text(p), "word": word,
                    "here_word": str((claim or {}).get("verdict") or "")})
    return out
