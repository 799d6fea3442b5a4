"""`harness history`: headline figures across the committed runs (data/reference, data/history), by
commit and machine, flagging a change larger than the runs' own spread (as asv shows commits); with
`lessons`, the findings table's lessons instead: each lesson's figure and verdict run by run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core import num, pooling, store, verdicts
from ..core.errors import HarnessError
from ..core.store import Run
from ..experiments.analysis import metric_name
from ..judging import findings
from . import readout


def intervals_apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether intervals `a` and `b` (low, high) do not overlap."""
    return b[0] > a[1] or b[1] < a[0]


def beyond_spread(a: dict[str, Any], b: dict[str, Any], key: str = "estimate") -> bool | None:
    """Whether figure row `b` differs from row `a` by more than the runs' own spread: their 95%
    intervals do not overlap AND the change exceeds the larger of the two CVs. None when either
    side lacks an interval or a CV (nothing to judge by). `key` is `estimate` or `normalised`
    (whose interval is the estimate's, scaled by normalised / estimate)."""
    def interval(r: dict[str, Any]) -> tuple[float, float, float] | None:
        est: Any = r.get("estimate")
        lo: Any = r.get("ci_low")
        hi: Any = r.get("ci_high")
        if not (num.known(est) and num.known(lo) and num.known(hi)) or not est:
            return None
        v: Any = r.get(key)
        if not num.known(v):
            return None
        scale = float(v) / float(est)
        return float(v), float(lo) * scale, float(hi) * scale
    ia, ib = interval(a), interval(b)
    cva: Any = a.get("cv")
    cvb: Any = b.get("cv")
    if ia is None or ib is None or not (num.known(cva) and num.known(cvb)) or not ia[0]:
        return None
    return bool(intervals_apart(ia[1:], ib[1:]) and abs(ib[0] / ia[0] - 1) > max(float(cva), float(cvb)))


def _run_record(run: Run, s: dict[str, Any], machines: dict[tuple, str]) -> dict[str, Any]:
    m = run.manifest
    mach = readout.machine_of(m)
    key = (mach.get("boot_id"), mach.get("cpu_model"), mach.get("cpu_flags_sha256"))
    label = machines.setdefault(key, f"M{len(machines) + 1}")
    return {"run": run, "summary": s, "machine": label, "machine_key": key,
            "commit": (readout.commit(m) or "—")[:7], "where": store.location_of(run.path),
            "started": m.get("started_at") or run.id}


def history_runs(data_dir: Any = None, include_new: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The committed runs (data/reference, data/history; with `include_new` also the complete runs of
    data/runs), oldest first, each with its summary; and one line per run left out, saying why."""
    places = store.COMMITTED + (("runs",) if include_new else ())
    seen: set[str] = set()
    records, skipped = [], []
    machines: dict[tuple, str] = {}
    for r in sorted(store.list_runs(data_dir, where=places), key=lambda r: r["run_id"] or ""):
        if r["run_id"] in seen or r["status"] != "complete":
            continue
        try:
            run = Run(Path(r["path"]))
            s = store.load_summary(run)
        except HarnessError as e:
            skipped.append(f"{r['run_id']} ({r['where']}): left out: {e}")
            continue
        seen.add(r["run_id"])
        records.append(_run_record(run, s, machines))
    records.sort(key=lambda x: x["started"])
    return records, skipped


def lessons_history_text(records: list[dict[str, Any]], pool_by: str = "version") -> str:
    """The README's findings across runs: per lesson, each run's figure for the lesson's first
    ledger row (a within-run ratio or bound, so runs of different machines compare without
    normalising) and its verdict. Against the previous run that measured it (`verdicts.move`, as
    `harness compare` classifies a move): `MOVED` marks a verdict of another class (holds / fails /
    open), `OPPOSED` one that went from holds to fails or back,
    `apart` intervals that do not overlap. A version-1 summary's verdict had no multiple-comparison
    correction: marked `v1`. Under each lesson, its row pooled across boots (`pooled_lines`): runs of
    the newest run's experiment versions and rules (`pool_by="version"`, the default), or of its
    rules only (`"rules"`: runs of other code versions too, which may not have measured the same thing)."""
    lines = ["lessons across runs: the figure of each lesson's first ledger row, and its verdict "
             "(as the README's findings table; v1: a summary before Holm's correction)"]
    per_run = [{r["lesson"]: r for r in findings.lesson_rows(rec["summary"])} for rec in records]
    frame = pooling.pooled_lessons([pooling.record(rec["summary"], rec["run"].manifest, rec["run"].id)
                                    for rec in records if "run" in rec],
                                   [lesson.claims[0] for lesson in findings.LESSONS], match=pool_by)
    pooled = {r["claim_id"]: r for r in frame.to_dict("records")}
    n_moved = 0
    for lesson in findings.LESSONS:
        lines.append(f"{lesson.id} ({lesson.claims[0]}): {readout.clip(lesson.words, 90)}")
        prev: dict[str, Any] | None = None
        for i, (rec, rows) in enumerate(zip(records, per_run), 1):
            r = rows[lesson.id]
            if r["verdict"] == verdicts.NOT_MEASURED:
                continue
            marks = []
            if prev is not None:
                moved = verdicts.move(prev["verdict"], r["verdict"])
                if moved in (verdicts.MOVED, verdicts.OPPOSED):
                    marks.append(moved.upper())
                ends = (prev["ci_low"], prev["ci_high"], r["ci_low"], r["ci_high"])
                if None not in ends and intervals_apart(ends[:2], ends[2:]):
                    marks.append("apart")
            n_moved += bool({"MOVED", "OPPOSED"} & set(marks))
            v1 = " v1" if rec["summary"].get("upgraded_from") == 1 else ""
            figure = readout.clip(r["figure_plain"], 44)
            lines.append(f"  {'#' + str(i):4} {rec['commit']:7} {rec['machine']:3} {figure:44} "
                         f"{r['verdict'] + v1:22} {' '.join(marks)}".rstrip())
            prev = r
        if prev is None:
            lines.append("  not measured in any run")
        else:
            lines.extend(pooled_lines(pooled.get(lesson.claims[0])))
    lines.append(f"{len(findings.LESSONS)} lessons over {len(records)} runs; {n_moved} verdict move(s) "
                 "from one run to the next")
    return "\n".join(lines)


def pooled_lines(p: Mapping[str, Any] | None) -> list[str]:
    """A lesson's row pooled across boots (harness.core.pooling: the runs of the newest run's
    experiment versions and rules, each boot once), in one or two lines under its runs."""
    if p is None or not p.get("k"):
        return [f"  pooled: {(p or {}).get('pi_reason') or 'no run gives an interval for this row'}"]
    if not p["pooled"]:
        return [f"  pooled: one run of these experiment versions and rules ({readout.clip(str(p['runs'][-1]), 40)}): "
                f"its own interval stands; a pooled estimate needs runs from 2 machines, a prediction interval 3"]
    head = (f"  pooled over {pooling.over(p['k'], p.get('n_runs'))}: {num.sig3(p['estimate'])} "
            f"[{num.sig3(p['ci_low'])}, {num.sig3(p['ci_high'])}] ({p['ci_level']:.0%}); ")
    i2 = f"I² {100 * (p['i2'] or 0):.0f}%"
    if p.get("verdict") == verdicts.TOO_FEW_BOOTS:   # two boots: an estimate, but no range for a new run
        head += (f"{i2}; a new run's range and a verdict across machines need {pooling.MIN_FOR_VERDICT} machines; "
                 f"{p['agree_text']}")
    else:
        head += (f"a new run: {num.sig3(p['pi_low'])} to {num.sig3(p['pi_high'])} (90% prediction interval); "
                 if num.finite(p.get("pi_low")) is not None else f"no prediction interval ({p['pi_reason']}); ")
        head += f"{i2}; {p['verdict']}, {p['agree_text']}"
    return [head] + ([f"    {p['disagreement']}"] if p.get("disagreement") else [])


def on_processor(records: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The runs whose machine's CPU model, or its kind, contains `text` (`pooling.of_processor`), so
    that a lesson whose size follows the processor (002-cpu: docs/RESULTS.md) pools over one kind of
    machine; a one-line HarnessError naming the runs' processors when none matches."""
    return pooling.of_processor(records, text, lambda rec: store.cpu_model(rec["run"].manifest))


def history_report(data_dir: Any = None, include_new: bool = False, figure: str | None = None,
                   changed_only: bool = False, lessons: bool = False, pool_by: str = "version",
                   processor: str | None = None) -> tuple[str, int]:
    """(text, figures changed). Headline figures across runs, by commit and machine, absolute and normalised with their
    intervals, as asv shows a benchmark across commits; a change larger than the runs' own spread
    (`beyond_spread`) against the previous run with the figure is flagged `CHANGED`, on the
    absolute figure between runs of one machine (same boot) and on the normalised one across
    machines (absolute figures of two machines differ by the machines' speed). `processor`: only
    the runs whose CPU model contains it (`on_processor`), the pooled lessons too."""
    records, skipped = history_runs(data_dir, include_new)
    if not records:
        places = ", ".join(str(store.location_dir(w, data_dir)) for w in store.COMMITTED)
        raise HarnessError(f"no committed run with a summary in {places}"
                           + ("" if include_new else " (--all adds the runs of data/runs)")
                           + (f"; {len(skipped)} left out: {skipped[0]}" if skipped else ""))
    if processor:
        records = on_processor(records, processor)
    lines = [f"runs on a processor matching {processor!r} (oldest first):" if processor else "runs (oldest first):"]
    for i, rec in enumerate(records, 1):
        run = rec["run"]
        mach = readout.machine_of(run.manifest)
        lines.append(f"  #{i} {run.id} [{rec['where']}] commit {rec['commit']} machine {rec['machine']} "
                     f"({mach.get('cpu_model') or '?'}, boot {readout.short(mach.get('boot_id'))}); ceilings: "
                     + readout.ceiling_text(readout.ceilings(rec["summary"], run.manifest)))
    lines += [f"  {x}" for x in skipped]
    if lessons:
        return "\n".join(lines + [lessons_history_text(records, pool_by)]), 0
    lines.append("figures: estimate [95% interval], CV/n, normalised [interval]; CHANGED: intervals apart and "
                 "the change beyond the larger CV (absolute within one machine, normalised across machines)")
    found = figure_histories(records, figure)
    shown = [f for f in found if f["changed"] or not changed_only]
    for f in shown:
        lines.append(f"{f['name']} ({f['unit']}, {f['better'] or '?'} is better)")
        lines += f["lines"]
    n_shown, n_changed = len(shown), sum(f["changed"] for f in found)
    lines.append(f"{n_shown} figure(s) shown; {n_changed} with a change beyond the runs' spread")
    return "\n".join(lines), n_changed

def figure_histories(records: list[dict[str, Any]], figure: str | None = None) -> list[dict[str, Any]]:
    """Each headline figure across `records` (`history_runs`), in name order: its name, unit, better
    direction, one line per run, and whether a change beyond the runs' own spread (`beyond_spread`)
    against the previous run with the figure was flagged (`changed`)."""
    figures: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    for i, rec in enumerate(records, 1):
        h = readout.headline(rec["summary"])
        for r in h.to_dict("records") if len(h) else []:
            figures.setdefault((r["experiment"], r["variant"], r["metric"]), []).append((i, r))
    out = []
    for key in sorted(figures):
        name = metric_name(*key)
        if figure and figure not in name:
            continue
        block, flagged = [], False
        prev: tuple[int, dict[str, Any]] | None = None
        for i, r in figures[key]:
            rec = records[i - 1]
            change = ""
            if prev is not None:
                j, p = prev
                same = records[j - 1]["machine_key"][0] and records[j - 1]["machine_key"] == rec["machine_key"]
                judged = "estimate" if same or not num.known(r.get("normalised")) else "normalised"
                a, b = p.get(judged), r.get(judged)
                if num.known(a) and num.known(b) and a:
                    change = f"{100 * (b / a - 1):+.1f}% {'abs' if judged == 'estimate' else 'norm'} vs #{j}"
                    if beyond_spread(p, r, judged):
                        change += " CHANGED"
                        flagged = True
                va = store.experiment_version(records[j - 1]["run"].manifest, key[0])
                vb = store.experiment_version(rec["run"].manifest, key[0])
                if va and vb and va != vb:
                    change += f" (experiment version {va} -> {vb})"
            norm = r.get("normalised")
            ntext = "—"
            if num.known(norm) and num.known(r.get("estimate")) and r.get("estimate"):
                k = norm / r["estimate"]
                ntext = readout.fig(norm, r.get("ci_low") and r["ci_low"] * k, r.get("ci_high") and r["ci_high"] * k)
            block.append(f"  {'#' + str(i):4} {rec['commit']:7} {rec['machine']:3} "
                         f"{readout.fig(r.get('estimate'), r.get('ci_low'), r.get('ci_high')):28} "
                         f"{readout.cvn(r.get('cv'), r.get('n_repeats'), r.get('unstable')):18} "
                         f"norm {ntext:30} {change}".rstrip())
            prev = (i, r)
        first = figures[key][0][1]
        out.append({"name": name, "unit": first.get("unit"), "better": first.get("better"), "lines": block,
                    "changed": flagged})
    return out


def history_json(data_dir: Any = None, include_new: bool = False, figure: str | None = None,
                 processor: str | None = None) -> dict[str, Any]:
    """The runs across history for scripts (`harness history --json`): each run's id, location,
    commit, machine and its measurement claims' verdicts and estimates, and the figures whose
    change went beyond the runs' own spread."""
    records, skipped = history_runs(data_dir, include_new)
    if not records:
        raise HarnessError("no committed run with a summary" + (f"; {len(skipped)} left out: {skipped[0]}"
                                                                if skipped else ""))
    if processor:
        records = on_processor(records, processor)
    runs = [{"run_id": rec["run"].id, "location": rec["where"], "commit": rec["commit"], "machine": rec["machine"],
             "claims": readout.claims_json(rec["summary"])} for rec in records]
    return {"runs": runs, "skipped": skipped,
            "changed": [f["name"] for f in figure_histories(records, figure) if f["changed"]]}
