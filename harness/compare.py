"""Reading stored runs: `harness compare`, `harness show` and `harness history`.

Everything here works from a run's manifest.json and summary.json alone (a run under data/history
keeps nothing else); summaries are read only through `store.load_summary` (every older format
upgraded to the current one by `store.upgrade_summary`). A run that has raw data but no summary
(runs made before summaries existed) has one computed, and upgraded the same way.

- `compare`: two runs' headline figures side by side (absolute and normalised by each run's
  in-run ceiling), their verdicts, and -- as pyperf's checked metadata -- every piece of metadata on
  which they differ, saying plainly which experiments' figures that makes incomparable;
- `show`: one run: headline figures, verdicts per seed, bottlenecks, the machine and servers;
- `history`: headline figures across the committed runs (data/reference, data/history), by commit
  and machine, flagging a change larger than the runs' own spread (as asv shows commits); with
  `lessons`, the findings table's lessons instead: each lesson's figure and verdict run by run.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from . import calibration, findings, registry, stats, store, verdicts
from .analysis import metric_name
from .errors import HarnessError
from .store import Run
from .summary import THROUGHPUT_UNITS


def summary_of(run: Run) -> dict[str, Any]:
    """The run's summary in the current format: its summary.json through `store.load_summary`; for a
    run with raw data and no summary.json, computed now. A one-line HarnessError otherwise."""
    if store.summary_path(run).exists() or not run.has_raw_data():
        return store.load_summary(run)
    from . import summary

    return store.upgrade_summary(summary.build(run), f"{run.path} (computed from its raw data)")


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def headline(summary: dict[str, Any]) -> pd.DataFrame:
    """The figures experiments declare as headlines (throughputs also normalised); every
    throughput when the summary predates the headline flag. `estimate` is the figure's point estimate
    (the one its interval belongs to; the median for a version-1 summary)."""
    m = pd.DataFrame(summary.get("metrics", []))
    if m.empty:
        return m
    if "estimate" not in m.columns:
        m["estimate"] = m["median"] if "median" in m.columns else math.nan
    m["estimate"] = m["estimate"].where(m["estimate"].notna(), m.get("median"))
    if "headline" in m.columns and m["headline"].fillna(False).astype(bool).any():
        return m[m["headline"].fillna(False).astype(bool)]
    return m[m["unit"].isin(THROUGHPUT_UNITS)]


def _fig(median, lo, hi, digits=4) -> str:
    if not _known(median):
        return "—"
    if not (_known(lo) and _known(hi)):
        return f"{median:.{digits}g} (no interval)"
    return f"{median:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


# The compare functions take two runs' summaries (`summary_of(run)`), so `compare_text` reads each
# run's summary once.


def compare(sa: dict[str, Any], sb: dict[str, Any], incomparable: dict[str, str] | None = None) -> pd.DataFrame:
    """Headline figures of two runs side by side: absolute (estimate [95% interval]) and normalised,
    with each side's CV and n, and the ratio B / A of both. `incomparable` (experiment -> why, from
    `checked_metadata`) marks the figures of experiments that did not measure the same thing."""
    ha, hb = headline(sa), headline(sb)
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
            return v if _known(v) else None
        ratio = (g("estimate", "b") / g("estimate", "a")) if g("estimate", "a") and g("estimate", "b") else None
        nratio = ((g("normalised", "b") / g("normalised", "a")) if g("normalised", "a") and g("normalised", "b")
                  else None)
        row = {"figure": metric_name(r["experiment"], r["variant"], r["metric"]),
               "unit": g("unit", "a") or g("unit", "b"),
               "A": _fig(g("estimate", "a"), g("ci_low", "a"), g("ci_high", "a")),
               "A cv/n": _cvn(g("cv", "a"), g("n_repeats", "a"), g("unstable", "a")),
               "B": _fig(g("estimate", "b"), g("ci_low", "b"), g("ci_high", "b")),
               "B cv/n": _cvn(g("cv", "b"), g("n_repeats", "b"), g("unstable", "b")),
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
    ha, hb = headline(sa), headline(sb)
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


def _cvn(cv, n, unstable) -> str:
    if not _known(n):
        return "—"
    text = f"{100 * cv:.1f}%/{int(n)}" if _known(cv) else f"—/{int(n)}"
    return text + (" UNSTABLE" if unstable is True else "")


# -- the machine: never the machine-id alone (issue 22 point 10) -------------------------------------

CEILING_UNITS = {"pgbench": "tps", "python_cpu": "M loops/s"}


def machine_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return dict((manifest.get("environment") or {}).get("machine") or {})


def ceilings(summary: dict[str, Any] | None, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The run's in-run ceilings (calibration before and after): which -> {value, cv, n}, value as
    `calibration.ceiling_for` gives it (pgbench in tps, python_cpu in millions of loops/s)."""
    cal = (summary or {}).get("calibration") or manifest.get("calibration") or {}
    out: dict[str, dict[str, Any]] = {}
    for which in calibration.CEILINGS:
        value, _ = calibration.ceiling_for(which, cal)
        if value:
            values = [v for when in ("before", "after") for v in
                      (((cal.get(when) or {}).get(which) or {}).get("values") or []) if v and v > 0]
            s = stats.summarise(values)
            out[which] = {"value": value, "cv": s["cv"] if _known(s["cv"]) else None, "n": len(values)}
    return out


def _ceiling_text(c: dict[str, dict[str, Any]]) -> str:
    parts = []
    for which, v in c.items():
        spread = f", cv {100 * v['cv']:.1f}% over {v['n']}" if v.get("cv") is not None else f", n={v['n']}"
        parts.append(f"{which} {_num(v['value'])} {CEILING_UNITS.get(which, '')}{spread}")
    return "; ".join(parts) or "none recorded"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _short(v: Any, n: int = 8) -> str:
    return str(v)[:n] if v else "—"


def machine_identity(ma: dict[str, Any], mb: dict[str, Any], sa: dict[str, Any] | None = None,
                     sb: dict[str, Any] | None = None) -> str:
    """How two runs' machines relate, from the boot ids, the CPUs (model, flags, MHz) and the in-run
    ceilings; e.g. "different boots, same CPU model (AMD EPYC), CPU flags not recorded, ceilings
    2.3x apart (...)". The machine-id is never taken as evidence: machines of this kind share it."""
    a, b = machine_of(ma), machine_of(mb)
    parts = []
    ba, bb = a.get("boot_id"), b.get("boot_id")
    if ba and bb:
        parts.append(f"same boot ({_short(ba)}): one machine" if ba == bb
                     else f"different boots ({_short(ba)} vs {_short(bb)})")
    else:
        parts.append("boot not recorded for " + " and ".join(x for x, v in (("A", ba), ("B", bb)) if not v))
    ca, cb = a.get("cpu_model"), b.get("cpu_model")
    if ca and cb:
        parts.append(f"same CPU model ({ca})" if ca == cb else f"different CPU models ({ca} vs {cb})")
    else:
        parts.append("CPU model not recorded")
    fa, fb = a.get("cpu_flags_sha256"), b.get("cpu_flags_sha256")
    if fa and fb:
        parts.append("same CPU flags" if fa == fb else f"different CPU flags ({_short(fa)} vs {_short(fb)})")
    elif ca and cb:
        parts.append("CPU flags not recorded" + ("" if not (fa or fb) else f" for {'B' if fa else 'A'}"))
    mhz_a, mhz_b = a.get("cpu_mhz"), b.get("cpu_mhz")
    if mhz_a and mhz_b and abs(mhz_a / mhz_b - 1) > 0.01:
        parts.append(f"{mhz_a:.0f} vs {mhz_b:.0f} MHz")
    parts.append(_ceilings_apart(ceilings(sa, ma), ceilings(sb, mb)))
    text = ", ".join(parts)
    if a.get("machine_id") and a.get("machine_id") == b.get("machine_id") and not (ba and ba == bb):
        text += " (both record machine-id " + _short(a["machine_id"]) + ", which every machine of this kind " \
                "shares: it does not tell one machine from another)"
    return text


def _ceilings_apart(ca: dict[str, dict[str, Any]], cb: dict[str, dict[str, Any]]) -> str:
    common = [w for w in ca if w in cb]
    if not common:
        return "no ceiling recorded in both runs"
    ratios = {w: max(ca[w]["value"], cb[w]["value"]) / min(ca[w]["value"], cb[w]["value"]) for w in common}
    detail = "; ".join(f"{w} {_num(ca[w]['value'])} vs {_num(cb[w]['value'])} {CEILING_UNITS.get(w, '')}"
                       for w in common)
    worst = max(ratios.values())
    if worst < 1.005:
        return f"ceilings equal ({detail})"
    if worst < 1.1:
        return f"ceilings within {100 * (worst - 1):.0f}% ({detail})"
    return f"ceilings {worst:.1f}x apart ({detail})"


# -- checked metadata (issue 22 point 12; issue 25 point 4) -------------------------------------------

def drivers() -> dict[str, tuple[str, ...]]:
    """The packages whose versions are the drivers and frameworks under test -> the experiments
    whose figures they shape, as each experiment declares them (`Experiment.drivers`)."""
    return registry.drivers()


INCOMPARABLE, MAYBE, NOTE = "INCOMPARABLE", "may be incomparable", "differs"


def _interpreter(m: dict[str, Any]) -> str | None:
    rec = (m.get("interpreter") or {}).get("interpreter") or {}
    if rec.get("version"):
        build = rec.get("build") or ("free-threaded" if rec.get("gil_disabled") else "")
        return f"{rec.get('implementation', 'python')} {rec['version']}" + (f" ({build})" if build else "")
    py = (m.get("environment") or {}).get("python") or {}
    if py.get("version"):
        return f"{str(py.get('implementation', 'python')).lower()} {py['version']}" + \
            ("" if py.get("gil_enabled", True) else " (free-threaded)")
    return None


def _packages(m: dict[str, Any]) -> dict[str, Any]:
    """Package versions the run's workers ran (the interpreter's venv), over the study's own."""
    study = (m.get("environment") or {}).get("packages") or {}
    return {**study, **((m.get("interpreter") or {}).get("packages") or {})}


def _driver_levels(m: dict[str, Any]) -> dict[str, str]:
    """The departures experiment's driver levels (issue 25), as `prepare()` recorded them in the
    manifest: `<python> <level>` -> the versions installed for its pins (`pymongo 4.15.5`), `skipped`
    or `the lock's`. A level such as `pymongo=4.15.*` may resolve to another release in another run."""
    prepared = ((m.get("prepared") or {}).get("departures") or {})
    out = {}
    for key, rec in prepared.items():
        if not isinstance(rec, dict) or not rec.get("pins"):
            continue
        if rec.get("skipped"):
            out[key] = "skipped (did not install)"
        elif rec.get("same_as"):
            out[key] = f"the {rec['same_as']}'s versions"
        else:
            packages = rec.get("packages") or {}
            out[key] = ", ".join(f"{n} {packages.get(n) or '?'}" for n in sorted(rec["pins"]))
    return out


def _server(m: dict[str, Any], role: str) -> tuple[str | None, str | None]:
    ident = (m.get("servers") or {}).get(role) or {}
    product = ident.get("product")
    version = ident.get("version")
    backend = (ident.get("backend_server") or {}).get("version")
    if backend:
        version = f"{version} on PostgreSQL {str(backend).split()[0]}"
    return product, (f"{product} {version}" if product else None)


def _placement(m: dict[str, Any]) -> str | None:
    p = m.get("placement")
    if not p:
        return None
    if isinstance(p, str):
        return p
    cpus = (f" (servers {p['server_cpus']}, client {p.get('client_cpus')})"
            if p.get("placement") != "shared" and p.get("server_cpus") else "")
    return f"{p.get('placement')}{cpus}"


def _commit(m: dict[str, Any]) -> str | None:
    g = (m.get("environment") or {}).get("git") or {}
    if not g.get("sha"):
        return None
    return str(g["sha"])[:10] + (" (dirty)" if g.get("dirty") else "")


def _param_diff(pa: dict[str, Any], pb: dict[str, Any]) -> list[str]:
    keys = sorted(set(pa) | set(pb))
    return [f"{k} {pa.get(k, '—')} vs {pb.get(k, '—')}" for k in keys if pa.get(k) != pb.get(k)]


def checked_metadata(ma: dict[str, Any], mb: dict[str, Any], sa: dict[str, Any] | None = None,
                     sb: dict[str, Any] | None = None) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Every piece of checked metadata on which two runs' manifests differ (as pyperf's checked
    metadata): rows of `what, A, B, effect`; and the experiments whose figures that makes
    incomparable (experiment -> why): a different experiment version (code or parameters) or a
    different server product under it. `effect` is INCOMPARABLE, `may be incomparable` (a run
    before experiment versions, on another commit) or `differs` (a factor that changed; the figures
    still measure the same thing)."""
    rows: list[dict[str, str]] = []
    reasons: dict[str, list[str]] = {}
    ea, eb = ma.get("experiments") or {}, mb.get("experiments") or {}
    common = sorted(set(ea) & set(eb))

    def row(what: str, a: Any, b: Any, effect: str, why: str) -> None:
        rows.append({"what": what, "A": "—" if a in (None, "") else str(a), "B": "—" if b in (None, "") else str(b),
                     "effect": effect, "why": why})

    ia, ib = _interpreter(ma), _interpreter(mb)
    if ia != ib:
        row("interpreter", ia, ib, NOTE, "the figures are of different interpreters: a factor, not a repeat")
    la, lb = (ma.get("environment") or {}).get("lock_sha256"), (mb.get("environment") or {}).get("lock_sha256")
    if la != lb:
        row("lock hash (requirements.lock sha256)", _short(la, 12), _short(lb, 12), NOTE,
            "the pinned environment differs: see the package versions")
    pa, pb = _packages(ma), _packages(mb)
    shaped = drivers()
    for name, users_of in shaped.items():
        if pa.get(name) != pb.get(name):
            users = [e for e in common if e in users_of]
            row(f"driver {name}", pa.get(name), pb.get(name), NOTE,
                "shapes " + (", ".join(users) if users else "no experiment of both runs"))
    da, db = _driver_levels(ma), _driver_levels(mb)
    for key in sorted(set(da) | set(db)):
        if da.get(key) != db.get(key):
            row(f"driver level {key} (departures)", da.get(key) or "not run", db.get(key) or "not run", NOTE,
                "the departures driver factor's level ran other versions (or only in one run)")
    others = sorted(n for n in set(pa) | set(pb) if n not in shaped and pa.get(n) != pb.get(n))
    if others:
        row("other packages", ", ".join(f"{n} {pa.get(n) or '—'}" for n in others),
            ", ".join(f"{n} {pb.get(n) or '—'}" for n in others), NOTE, "not drivers under test")
    for role in ("mongodb", "postgres", "toxiproxy"):
        (prod_a, label_a), (prod_b, label_b) = _server(ma, role), _server(mb, role)
        if label_a == label_b:
            continue
        users = [e for e in common if role in ((ea[e].get("needs") or []) + (eb[e].get("needs") or []))]
        if prod_a and prod_b and prod_a != prod_b:
            for e in users:
                reasons.setdefault(e, []).append(f"{role} server is {prod_a} in A, {prod_b} in B")
            row(f"server {role}", label_a, label_b, INCOMPARABLE,
                "a different server product: " + (", ".join(users) or "no common experiment") + " not comparable")
        else:
            row(f"server {role}", label_a, label_b, NOTE, "server version (or presence) differs; used by "
                + (", ".join(users) or "no common experiment"))
    set_a = ((ma.get("servers") or {}).get("postgres") or {}).get("settings")
    set_b = ((mb.get("servers") or {}).get("postgres") or {}).get("settings")
    if set_a and set_b and set_a != set_b:
        diff = [k for k in sorted(set(set_a) | set(set_b)) if set_a.get(k) != set_b.get(k)]
        row("postgres settings", ", ".join(f"{k}={set_a.get(k)}" for k in diff),
            ", ".join(f"{k}={set_b.get(k)}" for k in diff), NOTE, "server tuning differs")
    ca, cb = _commit(ma), _commit(mb)
    unversioned = []
    for e in common:
        va, vb = ea[e].get("version"), eb[e].get("version")
        changed = _param_diff(ea[e].get("params") or {}, eb[e].get("params") or {})
        if changed:
            why = "parameters differ: " + "; ".join(changed[:4]) + (" ..." if len(changed) > 4 else "")
            reasons.setdefault(e, []).append(why)
            row(f"experiment {e}", va or "version not recorded", vb or "version not recorded", INCOMPARABLE, why)
        elif va and vb and va != vb:
            why = f"its code differs (version {va} vs {vb}, same parameters)"
            reasons.setdefault(e, []).append(why)
            row(f"experiment {e}", va, vb, INCOMPARABLE, why)
        elif not (va and vb) and ca != cb:
            unversioned.append(e)
        if ea[e].get("repeats_planned") != eb[e].get("repeats_planned"):
            row(f"repeats of {e}", ea[e].get("repeats_planned"), eb[e].get("repeats_planned"), NOTE,
                "different numbers of repeats: intervals of different widths")
    if unversioned:
        row("experiment versions", "not recorded" if not all(ea[e].get("version") for e in unversioned) else "",
            "not recorded" if not all(eb[e].get("version") for e in unversioned) else "", MAYBE,
            f"runs before experiment versions on different commits ({ca} vs {cb}): the code of "
            + ", ".join(unversioned) + " may differ; parameters are the same")
    for e in sorted(set(ea) ^ set(eb)):
        row(f"experiment {e}", "ran" if e in ea else "not run", "ran" if e in eb else "not run", NOTE,
            "in one run only")
    if ca != cb:
        row("commit", ca, cb, NOTE, "see the experiment versions for what it changed")
    mach_a, mach_b = machine_of(ma), machine_of(mb)
    if not (mach_a.get("boot_id") and mach_a.get("boot_id") == mach_b.get("boot_id")):
        row("machine", _machine_label(mach_a), _machine_label(mach_b), NOTE,
            machine_identity(ma, mb, sa, sb) + "; absolute figures compare across machines only through "
            "the normalised ones")
    for key in ("kernel", "cpu_count_logical"):
        if mach_a.get(key) != mach_b.get(key):
            row(key.replace("_", " "), mach_a.get(key), mach_b.get(key), NOTE, "machine")
    pla, plb = _placement(ma), _placement(mb)
    if pla != plb:
        row("placement", pla, plb, NOTE, "client and servers placed differently on the cores")
    if ma.get("profile") != mb.get("profile"):
        row("profile", ma.get("profile"), mb.get("profile"), NOTE, "sizes and repeats differ")
    va_s, vb_s = (sa or {}).get("upgraded_from"), (sb or {}).get("upgraded_from")
    if va_s != vb_s:
        row("summary format", f"version {va_s or store.SUMMARY_VERSION}", f"version {vb_s or store.SUMMARY_VERSION}",
            NOTE, "a version-1 summary gives medians as estimates and unadjusted verdicts")
    return rows, {e: "; ".join(why) for e, why in sorted(reasons.items())}


def metadata_lines(meta: list[dict[str, str]]) -> list[str]:
    return [f"  [{r['effect']}] {r['what']}: A {r['A']} | B {r['B']} -- {r['why']}" for r in meta]


def _machine_label(m: dict[str, Any]) -> str:
    if not m:
        return "not recorded"
    return f"{m.get('cpu_model') or '?'}, boot {_short(m.get('boot_id'))}"


def compare_text(run_a: Run, run_b: Run) -> str:
    sa, sb = summary_of(run_a), summary_of(run_b)
    ma, mb = run_a.manifest, run_b.manifest
    meta, bad = checked_metadata(ma, mb, sa, sb)
    df = compare(sa, sb, bad)
    lines = [f"A = {run_a.id} ({store.location_of(run_a.path)})", f"B = {run_b.id} ({store.location_of(run_b.path)})"]
    for label, s, m in (("A", sa, ma), ("B", sb, mb)):
        lines.append(f"{label} ceilings: " + _ceiling_text(ceilings(s, m)))
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
    return "\n".join(lines)


# -- harness show (issue 23 point 4) ------------------------------------------------------------------

def _servers_lines(m: dict[str, Any]) -> list[str]:
    out = []
    for role, ident in (m.get("servers") or {}).items():
        if isinstance(ident, dict):
            out.append(f"  {role}: {ident.get('label') or ident.get('product') or '?'}"
                       + (f" [{ident['source']}]" if ident.get("source") else ""))
    return out or ["  not recorded"]


def _machine_line(m: dict[str, Any]) -> str:
    mach = machine_of(m)
    if not mach:
        return "not recorded"
    parts = [str(mach.get("cpu_model") or "CPU not recorded")]
    if mach.get("cpu_signature"):
        parts.append(f"family/model/stepping {mach['cpu_signature']}")
    if mach.get("cpu_flags_sha256"):
        parts.append(f"flags {_short(mach['cpu_flags_sha256'])} ({mach.get('cpu_flags_count')})")
    if mach.get("cpu_mhz"):
        parts.append(f"{mach['cpu_mhz']:.0f} MHz")
    parts.append(f"{mach.get('cpu_count_logical', '?')} logical CPUs")
    if mach.get("memory_total_bytes"):
        parts.append(f"{mach['memory_total_bytes'] / 2**30:.1f} GiB")
    if mach.get("kernel"):
        parts.append(str(mach["kernel"]))
    parts.append(f"boot {_short(mach.get('boot_id'))}")
    return ", ".join(parts)


def verdict_counts(summary: dict[str, Any]) -> dict[str, Counter]:
    """seed -> Counter of the measurement claims' verdicts (the adjusted verdict when there is one)."""
    out: dict[str, Counter] = {}
    for c in summary.get("claims", []):
        if c.get("kind") == "measurement" and c.get("verdict"):
            out.setdefault(str(c.get("seed") or c.get("document") or "?"), Counter())[c["verdict"]] += 1
    return dict(sorted(out.items()))


def _clip(text: Any, n: int = 70) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= n else t[:n - 1] + "…"


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
                     "estimate [interval]": _fig(c.get("estimate"), c.get("ci_low"), c.get("ci_high")),
                     "level": f"{100 * level:.0f}%" if _known(level) else "—",
                     "seed value": f"{c['seed_value']:.4g}" if _known(c.get("seed_value")) else "—",
                     "n used/ran": f"{n_used if _known(n_used) else '—'}/{n_ran if _known(n_ran) else '—'}",
                     "p adj": f"{c['p_adjusted']:.3g}" if _known(c.get("p_adjusted")) else "—",
                     "why": _clip(c.get("reason") or (f"measured: {c['bottleneck_measured']}"
                                                     if c.get("bottleneck_measured") else ""))})
    return pd.DataFrame(rows)


def _headline_table(summary: dict[str, Any], experiment: str | None = None) -> pd.DataFrame:
    h = headline(summary)
    if h.empty:
        return h
    if experiment:
        h = h[h["experiment"] == experiment]
    rows = []
    for r in h.to_dict("records"):
        est, med = r.get("estimate"), r.get("median")
        beside = f"{med:.4g}" if _known(med) and _known(est) and med != est else ""
        rows.append({"figure": metric_name(r["experiment"], r["variant"], r["metric"]),
                     "unit": r.get("unit"),
                     "estimate [95% interval]": _fig(est, r.get("ci_low"), r.get("ci_high")),
                     "median": beside or ("=" if _known(med) else "—"),
                     "cv/n": _cvn(r.get("cv"), r.get("n_repeats"), r.get("unstable")),
                     "norm": f"{r['normalised']:.4g}" if _known(r.get("normalised")) else "—",
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
    s = summary_of(run)
    m = run.manifest
    if experiment and experiment not in {r.get("experiment") for r in s.get("metrics", [])}:
        raise HarnessError(f"run {run.id} has no figure of experiment {experiment!r}")
    flag = " (with failures)" if m.get("has_failures") else ""
    lines = [f"run {run.id}: {m.get('status')}{flag}, profile {m.get('profile')}, in "
             f"{store.location_of(run.path)} ({run.path})",
             f"commit {_commit(m) or '—'}; started {m.get('started_at') or '—'}, finished "
             f"{m.get('finished_at') or '—'}"
             + (f", {m['wall_s'] / 3600:.1f} h" if _known(m.get("wall_s")) else "")]
    if s.get("upgraded_from"):
        lines.append(f"summary format version {s['upgraded_from']} (upgraded: estimates are the medians, "
                     "verdicts unadjusted, n used = n ran)")
    lines.append("machine: " + _machine_line(m))
    lines.append("ceilings: " + _ceiling_text(ceilings(s, m)))
    lines.append(f"interpreter: {_interpreter(m) or '—'}; placement: {_placement(m) or '—'}")
    pk = _packages(m)
    lines.append("drivers: " + ", ".join(f"{n} {pk[n]}" for n in drivers() if pk.get(n)))
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
        elif s.get("upgraded_from"):
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


# -- harness history (issue 23 point 4) ---------------------------------------------------------------

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
        if not (_known(est) and _known(lo) and _known(hi)) or not est:
            return None
        v: Any = r.get(key)
        if not _known(v):
            return None
        scale = float(v) / float(est)
        return float(v), float(lo) * scale, float(hi) * scale
    ia, ib = interval(a), interval(b)
    cva: Any = a.get("cv")
    cvb: Any = b.get("cv")
    if ia is None or ib is None or not (_known(cva) and _known(cvb)) or not ia[0]:
        return None
    return bool(intervals_apart(ia[1:], ib[1:]) and abs(ib[0] / ia[0] - 1) > max(float(cva), float(cvb)))


def _run_record(run: Run, s: dict[str, Any], machines: dict[tuple, str]) -> dict[str, Any]:
    m = run.manifest
    mach = machine_of(m)
    key = (mach.get("boot_id"), mach.get("cpu_model"), mach.get("cpu_flags_sha256"))
    label = machines.setdefault(key, f"M{len(machines) + 1}")
    return {"run": run, "summary": s, "machine": label, "machine_key": key,
            "commit": (_commit(m) or "—")[:7], "where": store.location_of(run.path),
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


def lessons_history_text(records: list[dict[str, Any]]) -> str:
    """The README's findings across runs: per lesson, each run's figure for the lesson's first
    ledger row (a within-run ratio or bound, so runs of different machines compare without
    normalising) and its verdict. Against the previous run that measured it (`verdicts.move`, as
    `harness compare` classifies a move): `MOVED` marks a verdict of another class (holds / fails /
    open), `OPPOSED` one that went from holds to fails or back,
    `apart` intervals that do not overlap. A version-1 summary's verdict had no multiple-comparison
    correction: marked `v1`."""
    lines = ["lessons across runs: the figure of each lesson's first ledger row, and its verdict "
             "(as the README's findings table; v1: a summary before Holm's correction)"]
    per_run = [{r["lesson"]: r for r in findings.lesson_rows(rec["summary"])} for rec in records]
    n_moved = 0
    for lesson in findings.LESSONS:
        lines.append(f"{lesson.id} ({lesson.claims[0]}): {_clip(lesson.words, 90)}")
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
            lines.append(f"  {'#' + str(i):4} {rec['commit']:7} {rec['machine']:3} {_clip(r['figure'], 44):44} "
                         f"{r['verdict'] + v1:22} {' '.join(marks)}".rstrip())
            prev = r
        if prev is None:
            lines.append("  not measured in any run")
    lines.append(f"{len(findings.LESSONS)} lessons over {len(records)} runs; {n_moved} verdict move(s) "
                 "from one run to the next")
    return "\n".join(lines)


def history_text(data_dir: Any = None, include_new: bool = False, figure: str | None = None,
                 changed_only: bool = False, lessons: bool = False) -> str:
    """Headline figures across runs, by commit and machine, absolute and normalised with their
    intervals, as asv shows a benchmark across commits; a change larger than the runs' own spread
    (`beyond_spread`) against the previous run with the figure is flagged `CHANGED`, on the
    absolute figure between runs of one machine (same boot) and on the normalised one across
    machines (absolute figures of two machines differ by the machines' speed)."""
    records, skipped = history_runs(data_dir, include_new)
    if not records:
        places = ", ".join(str(store.location_dir(w, data_dir)) for w in store.COMMITTED)
        raise HarnessError(f"no committed run with a summary in {places}"
                           + ("" if include_new else " (--all adds the runs of data/runs)")
                           + (f"; {len(skipped)} left out: {skipped[0]}" if skipped else ""))
    lines = ["runs (oldest first):"]
    for i, rec in enumerate(records, 1):
        run = rec["run"]
        mach = machine_of(run.manifest)
        lines.append(f"  #{i} {run.id} [{rec['where']}] commit {rec['commit']} machine {rec['machine']} "
                     f"({mach.get('cpu_model') or '?'}, boot {_short(mach.get('boot_id'))}); ceilings: "
                     + _ceiling_text(ceilings(rec["summary"], run.manifest)))
    lines += [f"  {x}" for x in skipped]
    if lessons:
        return "\n".join(lines + [lessons_history_text(records)])
    lines.append("figures: estimate [95% interval], CV/n, normalised [interval]; CHANGED: intervals apart and "
                 "the change beyond the larger CV (absolute within one machine, normalised across machines)")
    figures: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    for i, rec in enumerate(records, 1):
        h = headline(rec["summary"])
        for r in h.to_dict("records") if len(h) else []:
            figures.setdefault((r["experiment"], r["variant"], r["metric"]), []).append((i, r))
    n_changed, n_shown = 0, 0
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
                judged = "estimate" if same or not _known(r.get("normalised")) else "normalised"
                a, b = p.get(judged), r.get(judged)
                if _known(a) and _known(b) and a:
                    change = f"{100 * (b / a - 1):+.1f}% {'abs' if judged == 'estimate' else 'norm'} vs #{j}"
                    if beyond_spread(p, r, judged):
                        change += " CHANGED"
                        flagged = True
                va = ((records[j - 1]["run"].manifest.get("experiments") or {}).get(key[0]) or {}).get("version")
                vb = ((rec["run"].manifest.get("experiments") or {}).get(key[0]) or {}).get("version")
                if va and vb and va != vb:
                    change += f" (experiment version {va} -> {vb})"
            norm = r.get("normalised")
            ntext = "—"
            if _known(norm) and _known(r.get("estimate")) and r.get("estimate"):
                k = norm / r["estimate"]
                ntext = _fig(norm, r.get("ci_low") and r["ci_low"] * k, r.get("ci_high") and r["ci_high"] * k)
            block.append(f"  {'#' + str(i):4} {rec['commit']:7} {rec['machine']:3} "
                         f"{_fig(r.get('estimate'), r.get('ci_low'), r.get('ci_high')):28} "
                         f"{_cvn(r.get('cv'), r.get('n_repeats'), r.get('unstable')):18} norm {ntext:30} {change}"
                         .rstrip())
            prev = (i, r)
        n_changed += flagged
        if changed_only and not flagged:
            continue
        n_shown += 1
        first = figures[key][0][1]
        lines.append(f"{name} ({first.get('unit')}, {first.get('better') or '?'} is better)")
        lines += block
    lines.append(f"{n_shown} figure(s) shown; {n_changed} with a change beyond the runs' spread")
    return "\n".join(lines)
