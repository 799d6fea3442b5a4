"""The answer (harness.judging.answer) and the generated blocks of README.md and docs/RESULTS.md
(harness.writing.generated): the README answers in its first screen, every figure in it and in RESULTS sits
in a block its generator gives today, and the words across machines say what the runs say. No
server is started here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import harness
from test_findings import SYNTHETIC

from harness.core import pooling, store, verdicts
from harness.core.errors import HarnessError
from harness.core.workload_file import CAPS
from harness.judging import answer, findings
from harness.writing import generated

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "docs" / "RESULTS.md"
RUN_ID = re.compile(r"\b\d{8}T\d{6}Z-\w+-([0-9a-f]{4})\b")


@pytest.fixture(scope="module")
def made() -> dict[Path, dict[str, str]]:
    return generated.blocks(REPO_ROOT)


def test_every_generated_block_is_what_its_generator_gives_today(made):
    """No figure typed by hand: README's and RESULTS' blocks regenerate byte for byte from the
    committed runs (`harness docs --write` when a run is kept or promoted)."""
    for path, blocks in made.items():
        text = path.read_text(encoding="utf-8")
        stale = generated.differing(text, blocks, path.name)
        assert not stale, f"{path.name}: {stale} differ from the committed runs: run `harness docs --write`"


def test_a_changed_figure_in_a_block_is_found_and_written_back(made, tmp_path):
    text = README.read_text(encoding="utf-8")
    blocks = made[README]
    one_figure_more = blocks["semaphore"].replace("FIFO semaphore | ", "FIFO semaphore | 1", 1)
    changed = text.replace(blocks["semaphore"], one_figure_more)
    assert changed != text and generated.differing(changed, blocks) == ["semaphore"]
    assert generated.write_blocks(changed, blocks) == text
    with pytest.raises(HarnessError, match="has no `<!-- lessons:start -->`"):
        generated.read_block("no markers\n", "lessons")


def test_the_command_checks_the_blocks_and_its_exit_status_says_so():
    out = harness("docs", timeout=120)
    assert out.returncode == 0 and "every generated block matches" in out.stdout, out.stdout + out.stderr


def test_the_readme_answers_first_in_at_most_120_lines():
    """The first instruction within 40 lines, at most two distinct run ids, no table cell over 160
    characters, and no figure outside a generated block but a date or a design parameter."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 120, len(lines)
    first_row = next(i for i, line in enumerate(lines) if line.startswith("| 000: "))
    assert first_row < 40, first_row
    short_ids = {pooling.short_id(r.run_id) for r in pooling.committed_runs(REPO_ROOT)}
    named = {m.group(1) for m in RUN_ID.finditer(text)} | {w for w in re.findall(r"\b[0-9a-f]{4}\b", text)
                                                           if w in short_ids}
    assert len(named) <= 2, named
    cells = [c.strip() for line in lines if line.startswith("|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    assert cells and max(map(len, cells)) <= generated.CELL_MAX, max(cells, key=len)
    outside = re.sub(r"<!-- (\w+):start -->.*?<!-- \1:end -->", "", text, flags=re.S)
    typed = re.findall(r"\b\d+(?:[.,]\d+)*\s*(?:ms|µs|req/s|%|min|×)", outside)
    assert not typed, f"figures typed outside the generated blocks: {typed}"


def test_the_answer_blocks_hold_the_semaphores_cost_and_verifys_caps(made):
    readme = made[README]
    assert "| bare pool |" in readme["semaphore"] and "| FIFO semaphore |" in readme["semaphore"]
    for column in ("queries/s", "median ms", "p99 ms"):
        assert column in readme["semaphore"]
    for cap in (f"{CAPS['clients']:,} clients", f"a pool of {CAPS['pool']:,}", f"{CAPS['repeats']} repeats"):
        assert cap in readme["verify"], cap
    assert readme["lessons"].count("\n| 00") == len(findings.LESSONS)


def test_the_answer_table_has_one_row_per_lesson_with_short_cells():
    summary = store.upgrade_summary(SYNTHETIC)
    rows = answer.rows(summary, {})
    assert [r["id"] for r in rows] == [lesson.id for lesson in findings.LESSONS]
    block = generated.lessons_block(summary, {}, {})
    lines = [x for x in block.splitlines() if x.startswith("| ")]
    assert len(lines) == 1 + len(findings.LESSONS)
    assert all(len(re.findall(r"(?<!\\)\|", x)) == 5 for x in lines), "a cell broke the table"
    by_id = {r["id"]: r for r in rows}
    pool = next(lx for lx in findings.LESSONS if lx.id == "001-pool")
    # no pool across machines: the row stands on this run's word, and its instruction is that class's
    assert by_id["001-pool"]["here"] == "**reproduced** ×104 [80.5, 131]; seed ×1"
    assert by_id["001-pool"]["do"] == (pool.do or {})["holds"]
    assert by_id["001-cursor"]["here"] == "**inconclusive** 9.5 ms [7, 13]; seed 1 ms"
    assert by_id["000-mixed"]["here"] == "not measured"
    for lesson in findings.LESSONS:
        assert lesson.name and all(len(t) <= findings.DO_MAX for t in (lesson.do or {}).values()), lesson.id


def _pooled(verdict: str, words: list[str], k: int = 4) -> dict:
    return {"k": k, "pooled": True, "verdict": verdict, "n_runs": len(words), "pi_low": 1.2, "pi_high": 3.4,
            "verdicts": {f"20990101T0000{i:02d}Z-full-{i:04x}": w for i, w in enumerate(words)}}


def test_across_machines_a_word_the_runs_contradict_as_often_as_they_agree_reads_mixed():
    assert answer.across_text(_pooled("reproduced", ["reproduced"] * 2 + ["size not reproduced"] * 8)) == \
        "**mixed** over 4 machines: 8 size not reproduced, 2 reproduced; a new run: 1.2–3.4"
    assert answer.across_text(_pooled("size not reproduced", ["size not reproduced"] * 19 + ["reproduced"] * 7)) == \
        "**size not reproduced** over 4 machines: 19 of 26 runs agree, 7 reproduced; a new run: 1.2–3.4"
    # undecided runs are counted apart, and do not contradict
    assert answer.across_text(_pooled("not reproduced", ["not reproduced"] + ["inconclusive"] * 25)) == \
        "**not reproduced** over 4 machines: 1 of 26 runs agree, 25 undecided; a new run: 1.2–3.4"
    few = {**_pooled(verdicts.TOO_FEW_BOOTS, ["reproduced"] * 3, k=2)}
    assert answer.across_text(few) == "2 machines (3 runs): too few for a word across machines"
    assert answer.across_text({"k": 1, "pooled": False, "n_runs": 1}) == "one machine so far (1 run)"


def test_where_the_kinds_of_processor_read_different_words_each_is_shown():
    claim = "001-bulk-01"
    kinds = {"Intel Xeon": {claim: _pooled("reproduced", ["reproduced"] * 3 + ["size not reproduced"] * 4, k=3)},
             "AMD EPYC": {claim: _pooled("size not reproduced", ["size not reproduced"] * 15 + ["reproduced"] * 4)}}
    assert answer.split_by_kind(claim, kinds) == ("by processor: **size not reproduced** on AMD EPYC (15 of 19 runs "
                                                  "agree); **reproduced** on Intel Xeon (3 of 7 runs agree)")
    kinds["Intel Xeon"][claim] = _pooled("size not reproduced", ["size not reproduced"] * 7, k=3)
    assert answer.split_by_kind(claim, kinds) == ""


def test_results_has_a_section_and_a_block_for_every_lesson(made):
    text = RESULTS.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 500
    for lesson in findings.LESSONS:
        assert f"## {lesson.id}: " in text and f"<!-- lesson-{lesson.id}:start -->" in text, lesson.id
    assert made[RESULTS]["runs"].count("\n| ") == len(pooling.committed_runs(REPO_ROOT))
