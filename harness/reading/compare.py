"""`harness compare`: two stored runs side by side.

Their headline figures (absolute and normalised by each run's in-run ceiling), their verdicts, and
-- as pyperf's checked metadata -- every piece of metadata on which they differ, saying plainly which
experiments' figures that makes incomparable. Works from each run's manifest.json and summary.json
alone, read through `readout` (shared with `show` and `history`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ..core import checked, num, stats, store, verdicts
from ..core.errors import HarnessError
from ..core.store import Manifest, Run
from ..experiments.analysis import metric_name
from . import readout

# The compare functions take two runs' summaries (`readout.summary_of(run)`), so `compare_text` reads
# each run's summary once.


def compare(sa: dict[str, Any], sb: dict[str, Any], incomparable: dict[str, str] | None = None) -> pd.DataFrame:
    """Headline figures of two runs side by side: absolute (estimate [95% interval]) and normalised,
    with each side's CV and n, and the ratio B / A of both. `incomparable` (experiment -> why, from
    `checked_metadata`) marks the figures of experiments that did not measure the same thing."""
    ha, hb = readout.headline(sa), readout.headline(sb)
    if ha.empty and hb.empty:
        raise HarnessError(f"neither {sa.get('run_id')} nor {sb.get('run_id')} has a throughput figure "
                           "to compare")
    incomparable = incomparable or {}
    key = ["experiment", "variant", "metric"]
    both = ha.merge(hb, on=key, how="outer", suffixes=("_a", "_b"))
    rows = []
    for r in both.to_dict("records"):
        def g(k, side, r=r):
            v = r.get(f"{k}_{side}")
            return v if num.known(v) else None
        ratio = (g("estimate", "b") / g("estimate", "a")) if g("estimate", "a") and g("estimate", "b") else None
        nratio = ((g("normalised", "b") / g("normalised", "a")) if g("normalised", "a") and g("normalised", "b")
                  else None)
        row = {"figure": metric_name(r["experiment"], r["variant"], r["metric"]),
               "unit": g("unit", "a") or g("unit", "b"),
               "A": readout.fig(g("estimate", "a"), g("ci_low", "a"), g("ci_high", "a")),
               "A cv/n": readout.cvn(g("cv", "a"), g("n_repeats", "a"), g("unstable", "a")),
               "B": readout.fig(g("estimate", "b"), g("ci_low", "b"), g("ci_high", "b")),
               "B cv/n": readout.cvn(g("cv", "b"), g("n_repeats", "b"), g("unstable", "b")),
               "B/A": f"{ratio:.3f}" if ratio else "—",
               "A norm": f"{g('normalised', 'a'):.4g}" if g("normalised", "a") else "—",
               "B norm": f"{g('normalised', 'b'):.4g}" if g("normalised", "b") else "—",
               "B/A norm": f"{nratio:.3f}" if nratio else "—",
               "by": g("normalised_by", "a") or g("normalised_by", "b") or ""}
        if incomparable:
            row["comparable"] = "NO" if r["experiment"] in incomparable else ""
        rows.append(row)
    return pd.DataFrame(rows)


def compare_agreement(sa: dict[str, Any], sb: dict[str, Any], exclude: Any = ()) -> dict[str, float]:
    """How closely two runs' headline throughputs agree, absolute and normalised by each run's own
    ceiling, over the figures that have a normalised value in both runs (leaving out the experiments
    in `exclude`, those that are not comparable): `n`, and the median |B/A - 1| of each (`absolute`,
    `normalised`). Which of the two agrees better is the evidence for the README's advice on
    comparing runs across machines."""
    key = ["experiment", "variant", "metric"]
    ha, hb = readout.headline(sa), readout.headline(sb)
    if ha.empty or hb.empty or "normalised" not in ha.columns or "normalised" not in hb.columns:
        return {"n": 0, "absolute": math.nan, "normalised": math.nan}
    both = ha.merge(hb, on=key, suffixes=("_a", "_b")).dropna(subset=["normalised_a", "normalised_b"])
    both = both[(both["estimate_a"] > 0) & (both["normalised_a"] > 0) & ~both["experiment"].isin(list(exclude))]
    return {"n": len(both),
            "absolute": stats.median_relative_change(both["estimate_b"] / both["estimate_a"]),
            "normalised": stats.median_relative_change(both["normalised_b"] / both["normalised_a"])}


ONLY_IN_ONE = "only in one run"


def compare_verdicts(sa: dict[str, Any], sb: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every measurement claim judged in either run: its verdict in A and B, and whether it moved
    (`verdicts.move`: `same`, `same class`, `moved`, or `OPPOSED` for holds <-> fails, as
    `history --lessons` marks them; `only in one run`); with the counts of each."""
    def judged(s: dict[str, Any]) -> dict[tuple[str, str], str]:
        return {(c["claim_id"], c.get("interpreter") or ""): c["verdict"] for c in s.get("claims", [])
                if c.get("kind") == "measurement" and c.get("verdict")
                and not str(c["verdict"]).startswith("not measured")}
    va, vb = judged(sa), judged(sb)
    rows = []
    for key in sorted(set(va) | set(vb)):
        a, b = va.get(key, "—"), vb.get(key, "—")
        change = ONLY_IN_ONE if "—" in (a, b) else verdicts.move(a, b)
        rows.append({"claim": key[0], "interpreter": key[1], "A": a, "B": b, "change": change})
    df = pd.DataFrame(rows, columns=["claim", "interpreter", "A", "B", "change"])
    counts = {k: int((df["change"] == k).sum()) for k in (*verdicts.MOVES, ONLY_IN_ONE)}
    return df, counts


# -- the machine: never the machine-id alone ----------------------------------------------------------

def machine_identity(ma: Manifest, mb: Manifest, sa: dict[str, Any] | None = None,
                     sb: dict[str, Any] | None = None) -> str:
    """How two runs' machines relate, from the boot ids, the CPUs (model, flags, MHz) and the in-run
    ceilings; e.g. "different boots, same CPU model (AMD EPYC), CPU flags not recorded, ceilings
    2.3x apart (...)". The machine-id is never taken as evidence: machines of this kind share it."""
    a, b = readout.machine_of(ma), readout.machine_of(mb)
    parts = []
    ba, bb = a.get("boot_id"), b.get("boot_id")
    if ba and bb:
        parts.append(f"same boot ({readout.short(ba)}): one machine" if ba == bb
                     else f"different boots ({readout.short(ba)} vs {readout.short(bb)})")
    else:
        parts.append("boot not recorded for " + " and ".join(x for x, v in (("A", ba), ("B", bb)) if not v))
    ca, cb = a.get("cpu_model"), b.get("cpu_model")
    if ca and cb:
        parts.append(f"same CPU model ({ca})" if ca == cb else f"different CPU models ({ca} vs {cb})")
    else:
        parts.append("CPU model not recorded")
    fa, fb = a.get("cpu_flags_sha256"), b.get("cpu_flags_sha256")
    if fa and fb:
        parts.append("same CPU flags" if fa == fb
                     else f"different CPU flags ({readout.short(fa)} vs {readout.short(fb)})")
    elif ca and cb:
        parts.append("CPU flags not recorded" + ("" if not (fa or fb) else f" for {'B' if fa else 'A'}"))
    mhz_a, mhz_b = a.get("cpu_mhz"), b.get("cpu_mhz")
    if mhz_a and mhz_b and abs(mhz_a / mhz_b - 1) > 0.01:
        parts.append(f"{mhz_a:.0f} vs {mhz_b:.0f} MHz")
    mitigations = _mitigations_apart(a.get("cpu_vulnerabilities"), b.get("cpu_vulnerabilities"))
    if mitigations:
        parts.append(mitigations)
    parts.append(_ceilings_apart(readout.ceilings(sa, ma), readout.ceilings(sb, mb)))
    text = ", ".join(parts)
    if a.get("machine_id") and a.get("machine_id") == b.get("machine_id") and not (ba and ba == bb):
        text += " (both record machine-id " + readout.short(a["machine_id"]) + ", which every machine of this kind " \
                "shares: it does not tell one machine from another)"
    return text


def _mitigations_apart(va: dict[str, str] | None, vb: dict[str, str] | None) -> str:
    """The two runs' kernel mitigations: "" when either run does not record them (runs before they
    were recorded), "same kernel mitigations", or the first three entries that differ, e.g. "kernel
    mitigations differ in spectre_v2 (Retpolines ... vs Enhanced IBRS ...)"."""
    if not va or not vb:
        return ""
    differ = [k for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)]
    if not differ:
        return "same kernel mitigations"
    shown = "; ".join(f"{k} ({va.get(k, 'not listed')} vs {vb.get(k, 'not listed')})" for k in differ[:3])
    more = f"; {len(differ) - 3} more" if len(differ) > 3 else ""
    return f"kernel mitigations differ in {shown}{more}"


def _ceilings_apart(ca: dict[str, dict[str, Any]], cb: dict[str, dict[str, Any]]) -> str:
    common = [w for w in ca if w in cb]
    if not common:
        return "no ceiling recorded in both runs"
    ratios = {w: max(ca[w]["value"], cb[w]["value"]) / min(ca[w]["value"], cb[w]["value"]) for w in common}
    detail = "; ".join(f"{w} {num.sig3(ca[w]['value'])} vs {num.sig3(cb[w]['value'])} "
                       f"{readout.CEILING_UNITS.get(w, '')}" for w in common)
    worst = max(ratios.values())
    if worst < 1.005:
        return f"ceilings equal ({detail})"
    if worst < 1.1:
        return f"ceilings within {100 * (worst - 1):.0f}% ({detail})"
    return f"ceilings {worst:.1f}x apart ({detail})"


# -- checked metadata: the table is core.checked's, shared with the pooling ---------------------------

INCOMPARABLE, MAYBE, NOTE = checked.INCOMPARABLE, checked.MAYBE, checked.DIFFERS


def _param_diff(pa: dict[str, Any], pb: dict[str, Any]) -> list[str]:
    keys = sorted(set(pa) | set(pb))
    return [f"{k} {pa.get(k, '—')} vs {pb.get(k, '—')}" for k in keys if pa.get(k) != pb.get(k)]


def _text(value: Any) -> str | None:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else None
    return None if value in (None, "") else str(value)


def checked_metadata(ma: Manifest, mb: Manifest, sa: dict[str, Any] | None = None,
                     sb: dict[str, Any] | None = None) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Every row of the checked metadata (`core.checked.CHECKED`, applied by
    `checked.differences`) on which two runs' manifests differ: rows of `what, A, B, effect, why`;
    and the experiments whose figures that makes incomparable (experiment -> why): other parameters,
    another version of its code, or another server product under it. `effect` is INCOMPARABLE,
    `may be incomparable` (a run before experiment versions, on another commit) or `differs` (a
    factor that changed; the figures still measure the same thing)."""
    rows: list[dict[str, str]] = []
    reasons: dict[str, list[str]] = {}
    ea, eb = ma.get("experiments") or {}, mb.get("experiments") or {}
    common = sorted(set(ea) & set(eb))
    shaped = readout.drivers()

    def row(what: str, a: Any, b: Any, effect: str, why: str) -> None:
        rows.append({"what": what, "A": "—" if a in (None, "") else str(a), "B": "—" if b in (None, "") else str(b),
                     "effect": effect, "why": why})

    def users(role: str) -> list[str]:
        return [e for e in common if role in (*checked.needs(ma, e), *checked.needs(mb, e))]

    other_params, other_product = set(), set()
    for k, what, a, b, subject in checked.differences(ma, mb, tuple(shaped)):
        if k.what == "parameters of {}":
            changed = _param_diff(a, b)
            why = "parameters differ: " + "; ".join(changed[:4]) + (" ..." if len(changed) > 4 else "")
            other_params.add(subject)
            reasons.setdefault(subject, []).append(why)
            row(f"experiment {subject}", store.experiment_version(ma, subject) or "version not recorded",
                store.experiment_version(mb, subject) or "version not recorded", INCOMPARABLE, why)
        elif k.what == "experiment {}":
            if subject in other_params or not (a and b):
                continue   # the parameters' row says it; a run without versions is read below
            why = f"its code differs (version {a} vs {b}, same parameters)"
            reasons.setdefault(subject, []).append(why)
            row(what, a, b, INCOMPARABLE, why)
        elif k.what == "server product {}":
            if not (a and b):
                continue   # a server in one run only: the label's row says it
            other_product.add(subject)
            for e in users(subject):
                reasons.setdefault(e, []).append(f"{subject} server is {a} in A, {b} in B")
            row(f"server {subject}", checked.server_label(ma, subject), checked.server_label(mb, subject),
                INCOMPARABLE, "a different server product: " + (", ".join(users(subject)) or "no common experiment")
                + " not comparable")
        elif k.what == "server {}":
            if subject not in other_product:
                row(what, a, b, NOTE, f"{k.why}; used by " + (", ".join(users(subject)) or "no common experiment"))
        elif k.scope == "driver":
            row(what, a, b, NOTE, "shapes " + (", ".join(e for e in common if e in shaped[subject])
                                               or "no experiment of both runs"))
        elif k.what == "lock hash (requirements.lock sha256)":
            row(what, readout.short(a, 12), readout.short(b, 12), NOTE, k.why)
        elif k.what == "other packages":
            row(what, ", ".join(f"{n} {v or '—'}" for n, v in a.items()),
                ", ".join(f"{n} {v or '—'}" for n, v in b.items()), NOTE, k.why)
        elif k.what == "postgres settings":
            if a and b:
                diff = [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
                row(what, ", ".join(f"{n}={a.get(n)}" for n in diff), ", ".join(f"{n}={b.get(n)}" for n in diff),
                    NOTE, k.why)
        elif k.what == "machine":
            row(what, _machine_label(readout.machine_of(ma)), _machine_label(readout.machine_of(mb)), NOTE,
                machine_identity(ma, mb, sa, sb) + "; absolute figures compare across machines only through "
                "the normalised ones")
        else:
            row(what, _text(a), _text(b), k.effect, k.why)
    ca, cb = checked.commit(ma), checked.commit(mb)
    unversioned = [e for e in common if e not in other_params and ca != cb
                   and not (store.experiment_version(ma, e) and store.experiment_version(mb, e))]
    if unversioned:
        row("experiment versions", "not recorded" if not all(ea[e].get("version") for e in unversioned) else "",
            "not recorded" if not all(eb[e].get("version") for e in unversioned) else "", MAYBE,
            f"runs before experiment versions on different commits ({ca} vs {cb}): the code of "
            + ", ".join(unversioned) + " may differ; parameters are the same")
    for e in sorted(set(ea) ^ set(eb)):
        row(f"experiment {e}", "ran" if e in ea else "not run", "ran" if e in eb else "not run", NOTE,
            "in one run only")
    va_s, vb_s = (sa or {}).get("upgraded_from"), (sb or {}).get("upgraded_from")
    if va_s != vb_s:
        row("summary format", f"version {va_s or store.SUMMARY_VERSION}", f"version {vb_s or store.SUMMARY_VERSION}",
            NOTE, "verdict rules differ: version 1 unadjusted, with medians as estimates; version 2 Holm "
                  "over every row; version 3 Holm over the lessons' rows and Benjamini-Hochberg over the rest; "
                  "version 4 bands that check size")
    return rows, {e: "; ".join(why) for e, why in sorted(reasons.items())}


def metadata_lines(meta: list[dict[str, str]]) -> list[str]:
    return [f"  [{r['effect']}] {r['what']}: A {r['A']} | B {r['B']} -- {r['why']}" for r in meta]


def _machine_label(m: dict[str, Any]) -> str:
    if not m:
        return "not recorded"
    return f"{m.get('cpu_model') or '?'}, boot {readout.short(m.get('boot_id'))}"


def compare_text(run_a: Run, run_b: Run) -> str:
    return compare_report(run_a, run_b)[0]


def compare_report(run_a: Run, run_b: Run) -> tuple[str, dict[str, Any]]:
    """The comparison as text, and as `compare_json` gives it (read once)."""
    sa, sb = readout.summary_of(run_a), readout.summary_of(run_b)
    ma, mb = run_a.manifest, run_b.manifest
    meta, bad = checked_metadata(ma, mb, sa, sb)
    df = compare(sa, sb, bad)
    lines = [f"A = {run_a.id} ({store.location_of(run_a.path)})", f"B = {run_b.id} ({store.location_of(run_b.path)})"]
    for label, s, m in (("A", sa, ma), ("B", sb, mb)):
        lines.append(f"{label} ceilings: " + readout.ceiling_text(readout.ceilings(s, m)))
    lines.append("machines: " + machine_identity(ma, mb, sa, sb))
    lines.append("")
    if meta:
        lines.append(f"checked metadata: {len(meta)} difference(s)")
        lines += metadata_lines(meta)
    else:
        lines.append("checked metadata: no difference (interpreter, lock hash, drivers, servers, experiment "
                     "versions, machine, placement)")
    if bad:
        lines.append("NOT COMPARABLE: " + "; ".join(f"{e} ({why})" for e, why in sorted(bad.items()))
                     + ". Their figures are marked in the table and left out of the agreement.")
    lines.append("")
    lines.append("figures: estimate [95% interval]; norm = estimate / the run's matching ceiling "
                 "(pgbench tps for PostgreSQL, Mloops/s of pure Python for MongoDB and FastAPI)")
    lines.append(df.to_string(index=False))
    agree = compare_agreement(sa, sb, exclude=bad)
    if agree["n"]:
        lines.append(f"agreement over {agree['n']} headline throughputs with a ceiling in both runs: "
                     f"median |B/A - 1| {100 * agree['absolute']:.1f}% absolute, "
                     f"{100 * agree['normalised']:.1f}% normalised")
    moves, counts = compare_verdicts(sa, sb)
    if len(moves):
        lines.append("")
        lines.append(f"verdicts of {len(moves)} measurement claims: {counts['same']} the same, "
                     f"{counts['same class']} another word of the same class (holds / fails / open), "
                     f"{counts['moved']} moved between classes (into or out of open), "
                     f"{counts['OPPOSED']} between holding and failing, "
                     f"{counts['only in one run']} judged in one run only")
        changed = moves[moves["change"] != "same"]
        if len(changed):
            lines.append(changed.to_string(index=False))
    return "\n".join(lines), _outcome(run_a, run_b, bad, moves, counts)


def _outcome(run_a: Run, run_b: Run, bad: dict[str, str], moves: pd.DataFrame,
             counts: dict[str, int]) -> dict[str, Any]:
    claims = moves.to_dict("records")
    return {"a": run_a.id, "b": run_b.id, "incomparable": dict(sorted(bad.items())), "counts": counts,
            "claims": claims, "moved": [c for c in claims if c["change"] != verdicts.SAME]}


def compare_json(run_a: Run, run_b: Run) -> dict[str, Any]:
    """Two runs for scripts (`harness compare --json`): their ids, the experiments they cannot be
    compared on (and why), every measurement claim's verdict in each, and those that moved."""
    sa, sb = readout.summary_of(run_a), readout.summary_of(run_b)
    _meta, bad = checked_metadata(run_a.manifest, run_b.manifest, sa, sb)
    moves, counts = compare_verdicts(sa, sb)
    return _outcome(run_a, run_b, bad, moves, counts)


def differ(outcome: dict[str, Any]) -> bool:
    """Whether two runs' comparison found anything: a verdict that moved, or an experiment they
    cannot be compared on (`harness compare` then exits 1)."""
    return bool(outcome["moved"] or outcome["incomparable"])
