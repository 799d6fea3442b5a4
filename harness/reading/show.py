"""`harness show`: one stored run, from its summary.json and manifest.json: what ran where, its
headline figures with their intervals, CV and stability warnings, the verdicts per seed, the
bottlenecks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from ..core import num, store
from ..core.errors import HarnessError
from ..core.store import Manifest, Run
from ..experiments.analysis import metric_name
from . import readout


def _servers_lines(m: Manifest) -> list[str]:
    out = []
    for role, ident in (m.get("servers") or {}).items():
        if isinstance(ident, dict):
            out.append(f"  {role}: {ident.get('label') or ident.get('product') or '?'}"
                       + (f" [{ident['source']}]" if ident.get("source") else ""))
    return out or ["  not recorded"]


def _machine_line(m: Manifest) -> str:
    mach = readout.machine_of(m)
    if not mach:
        return "not recorded"
    parts = [str(mach.get("cpu_model") or "CPU not recorded")]
    if mach.get("cpu_signature"):
        parts.append(f"family/model/stepping {mach['cpu_signature']}")
    if mach.get("cpu_flags_sha256"):
        parts.append(f"flags {readout.short(mach['cpu_flags_sha256'])} ({mach.get('cpu_flags_count')})")
    if mach.get("cpu_mhz"):
        parts.append(f"{mach['cpu_mhz']:.0f} MHz")
    parts.append(f"{mach.get('cpu_count_logical', '?')} logical CPUs")
    if mach.get("memory_total_bytes"):
        parts.append(f"{mach['memory_total_bytes'] / 2**30:.1f} GiB")
    if mach.get("kernel"):
        parts.append(str(mach["kernel"]))
    parts.append(f"boot {readout.short(mach.get('boot_id'))}")
    return ", ".join(parts)


def verdict_counts(summary: dict[str, Any]) -> dict[str, Counter]:
    """seed -> Counter of the measurement claims' verdicts (the adjusted verdict when there is one)."""
    out: dict[str, Counter] = {}
    for c in summary.get("claims", []):
        if c.get("kind") == "measurement" and c.get("verdict"):
            out.setdefault(str(c.get("seed") or c.get("document") or "?"), Counter())[c["verdict"]] += 1
    return dict(sorted(out.items()))


def _claim_rows(summary: dict[str, Any], seed: str) -> pd.DataFrame:
    rows = []
    for c in summary.get("claims", []):
        if c.get("kind") != "measurement" or str(c.get("seed") or c.get("document")) != seed:
            continue
        level = c.get("ci_level")
        verdict = str(c.get("verdict"))
        if c.get("verdict_raw") and c["verdict_raw"] != c.get("verdict"):
            verdict += f" (unadjusted: {c['verdict_raw']})"
        n_used, n_ran = c.get("n_used"), c.get("n_ran")
        rows.append({"claim": c.get("claim_id"), "verdict": verdict,
                     "estimate [interval]": readout.fig(c.get("estimate"), c.get("ci_low"), c.get("ci_high")),
                     "level": f"{100 * level:.0f}%" if num.known(level) else "—",
                     "seed value": f"{c['seed_value']:.4g}" if num.known(c.get("seed_value")) else "—",
                     "n used/ran": f"{n_used if num.known(n_used) else '—'}/{n_ran if num.known(n_ran) else '—'}",
                     "p adj": f"{c['p_adjusted']:.3g}" if num.known(c.get("p_adjusted")) else "—",
                     "why": readout.clip(c.get("reason") or (f"measured: {c['bottleneck_measured']}"
                                                     if c.get("bottleneck_measured") else ""))})
    return pd.DataFrame(rows)


def _headline_table(summary: dict[str, Any], experiment: str | None = None) -> pd.DataFrame:
    h = readout.headline(summary)
    if h.empty:
        return h
    if experiment:
        h = h[h["experiment"] == experiment]
    rows = []
    for r in h.to_dict("records"):
        est, med = r.get("estimate"), r.get("median")
        beside = f"{med:.4g}" if num.known(med) and num.known(est) and med != est else ""
        rows.append({"figure": metric_name(r["experiment"], r["variant"], r["metric"]),
                     "unit": r.get("unit"),
                     "estimate [95% interval]": readout.fig(est, r.get("ci_low"), r.get("ci_high")),
                     "median": beside or ("=" if num.known(med) else "—"),
                     "cv/n": readout.cvn(r.get("cv"), r.get("n_repeats"), r.get("unstable")),
                     "norm": f"{r['normalised']:.4g}" if num.known(r.get("normalised")) else "—",
                     "bottleneck": r.get("bottleneck") if isinstance(r.get("bottleneck"), str) else ""})
    return pd.DataFrame(rows)


def bottlenecks(summary: dict[str, Any], experiment: str | None = None) -> dict[str, dict[str, list[str]]]:
    """experiment -> bottleneck -> the variants measured with it (from every figure row)."""
    out: dict[str, dict[str, set[str]]] = {}
    for r in summary.get("metrics", []):
        b = r.get("bottleneck")
        if not isinstance(b, str) or not b or (experiment and r.get("experiment") != experiment):
            continue
        out.setdefault(str(r.get("experiment")), {}).setdefault(b, set()).add(str(r.get("variant")))
    return {e: {b: sorted(v) for b, v in sorted(d.items())} for e, d in sorted(out.items())}


def show_text(run: Run, experiment: str | None = None) -> str:
    """A stored run, from its summary.json and manifest.json: what ran where, its headline figures
    with their intervals, CV and stability warnings, the verdicts per seed, the bottlenecks."""
    s = readout.summary_of(run)
    m = run.manifest
    if experiment and experiment not in {r.get("experiment") for r in s.get("metrics", [])}:
        raise HarnessError(f"run {run.id} has no figure of experiment {experiment!r}")
    flag = " (with failures)" if m.get("has_failures") else ""
    lines = [f"run {run.id}: {m.get('status')}{flag}, profile {m.get('profile')}, in "
             f"{store.location_of(run.path)} ({run.path})",
             f"commit {readout.commit(m) or '—'}; started {m.get('started_at') or '—'}, finished "
             f"{m.get('finished_at') or '—'}"
             + (f", {m['wall_s'] / 3600:.1f} h" if num.known(m.get("wall_s")) else "")]
    if s.get("upgraded_from") == 1:
        lines.append(f"summary format version {s['upgraded_from']} (upgraded: estimates are the medians, "
                     "verdicts unadjusted, n used = n ran)")
    elif s.get("upgraded_from"):
        lines.append(f"summary format version {s['upgraded_from']} (upgraded: verdicts adjusted by Holm over "
                     "every judged row, not by lesson)")
    lines.append("machine: " + _machine_line(m))
    lines.append("ceilings: " + readout.ceiling_text(readout.ceilings(s, m)))
    lines.append(f"interpreter: {readout.interpreter(m) or '—'}; placement: {readout.placement(m) or '—'}")
    pk = readout.packages(m)
    lines.append("drivers: " + ", ".join(f"{n} {pk[n]}" for n in readout.drivers() if pk.get(n)))
    lines.append("servers:")
    lines += _servers_lines(m)
    lines.append("experiments: " + ", ".join(
        f"{n} {e.get('status')}" + (f" (version {e['version']})" if e.get("version") else "")
        for n, e in (m.get("experiments") or {}).items()))

    table = _headline_table(s, experiment)
    lines.append("")
    lines.append(f"headline figures ({len(table)}): estimate [95% interval]; median when it differs from the "
                 "estimate; CV over n repeats; norm = estimate / the matching in-run ceiling")
    lines.append(table.to_string(index=False) if len(table) else "  none")
    unstable = [r for r in s.get("metrics", []) if r.get("unstable") is True
                and (not experiment or r.get("experiment") == experiment)]
    for r in unstable:
        lines.append(f"WARNING unstable: {metric_name(r['experiment'], r['variant'], r['metric'])}: CV "
                     f"{100 * r['cv']:.1f}% over {r.get('n_repeats')} repeats (CV >= 10% with n >= 5)")

    if not experiment:
        lines.append("")
        lines.append("verdicts per seed (measurement claims):")
        counts = verdict_counts(s)
        for seed, c in counts.items():
            lines.append(f"  seed {seed}: " + ", ".join(f"{n} {v}" for v, n in c.most_common())
                         + f" ({sum(c.values())} rows)")
            rows = _claim_rows(s, seed)
            if len(rows):
                lines += ["    " + line for line in rows.to_string(index=False).splitlines()]
        if not counts:
            lines.append("  none")
        mc = s.get("multiple_comparisons")
        if isinstance(mc, dict) and mc:
            undone = mc.get("undone") or []
            lines.append(f"  multiple comparisons: {mc.get('method', '?')} at alpha {mc.get('alpha', '?')} over "
                         f"{mc.get('tested', '?')} tested rows" + (f"; undid {', '.join(map(str, undone))}"
                                                                   if undone else "")
                         + (f". {mc['guarantee']}" if mc.get("guarantee") else ""))
        elif s.get("upgraded_from") == 1:
            lines.append("  multiple comparisons: none (a version-1 summary: every verdict unadjusted)")
    lines.append("")
    lines.append("bottlenecks (as measured, per experiment; the variants measured with each):")
    found = bottlenecks(s, experiment)
    for exp, by in found.items():
        for b, variants in by.items():
            shown = ", ".join(variants[:6]) + (f", ... ({len(variants)} variants)" if len(variants) > 6 else "")
            lines.append(f"  {exp}: {b}: {shown}")
    if not found:
        lines.append("  none recorded")
    return "\n".join(lines)


def show_json(run: Run) -> dict[str, Any]:
    """A stored run for scripts (`harness show --json`): id, status, profile, where, its headline
    figures and each measurement claim's verdict and estimate."""
    s = readout.summary_of(run)
    m = run.manifest
    return {"run_id": run.id, "status": m.get("status"), "profile": m.get("profile"),
            "location": store.location_of(run.path), "commit": readout.commit(m),
            "headline": readout.headline_json(s), "claims": readout.claims_json(s)}
