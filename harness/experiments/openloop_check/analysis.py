"""openloop_check: harness.core.openloop against Vegeta, per rate: figures, and a verdict with its reason.

Per tool window (`window_figures`), from the `samples` table (all requests, failed ones too, as both
tools report them) and the `runs` table:
    throughput_rps   successful responses / (last response's end - first request's intended time)
    sent, scheduled  requests sent, and rate x duration_s (what an open-loop schedule holds)
    p50/p95/p99_ms   the tool's headline latency: harness.core.openloop's *corrected* latency (from each
                     request's intended send time, unsent ones censored at its window's end);
                     Vegeta's own `latency` (from each hit's actual start)
    naive_p*_ms      harness.core.openloop only: from the actual send
    corrected_p*_ms  from the intended time; for Vegeta from its schedule reconstructed from seq and
                     rate (what a user could compute from its output; hits never sent are absent)
    lag_p99_ms       actual - intended send time, p99 (Vegeta: reconstructed)
    failure_rate     failed / scheduled-and-recorded requests; generator_cpu_s from the windows
Percentiles by `harness.core.stats.percentiles` (numpy's linear method) for both tools alike.

`verdict(openloop, vegeta)` compares one Vegeta window with the openloop window at the same rate:
they agree when each of these holds (tolerances fixed before the first run, not tuned to it):
    sent         within SENT_TOL (5%) of each other
    throughput   within THROUGHPUT_TOL (5%)
    p50/p95/p99  Vegeta's within LATENCY_REL_TOL (25%) of openloop's corrected one, or within
                 LATENCY_ABS_MS (2 ms) when that is larger (a few milliseconds of loopback latency
                 on a shared machine move by more than 25% between two windows)
otherwise they differ, and `reason` says why from the measurements (queueing inside the
generator that Vegeta does not time, hits never sent, a generator behind its schedule, or, with
both on schedule, the server's response time between two windows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ...core import stats
from ...core.store import Run
from ...core.verdicts import AGREE, DIFFER

EXPERIMENT = "openloop_check"
THROUGHPUT_TOL = 0.05
SENT_TOL = 0.05
LATENCY_REL_TOL = 0.25
LATENCY_ABS_MS = 2.0
QUANTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0}


def _pcts(values_s: Any, prefix: str = "") -> dict[str, float]:
    ms = np.asarray(values_s, dtype=float) * 1000.0
    ms = ms[~np.isnan(ms)]
    return {f"{prefix}{k}_ms": float(v) for k, v in zip(QUANTILES, stats.percentiles(ms, QUANTILES.values()))}


def window_figures(samples: pd.DataFrame, runs: pd.DataFrame, windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (repeat, variant) tool window: the figures of the module docstring."""
    if samples.empty:
        return pd.DataFrame()
    samples = samples if "repeat" in samples.columns else samples.assign(repeat=0)
    runs = runs if runs.empty or "repeat" in runs.columns else runs.assign(repeat=0)
    if windows is not None and not windows.empty and "repeat" not in windows.columns:
        windows = windows.assign(repeat=0)
    out = []
    for (rep, variant), g in samples.groupby(["repeat", "variant"], sort=False):
        first = g.iloc[0]
        sent = g[g["sent"]]
        ends = sent["start_s"] + sent["latency_s"]
        span = float(ends.max() - g["intended_s"].min()) if len(sent) else float("nan")
        ok = int(g["ok"].sum())
        row: dict[str, Any] = {"repeat": int(rep), "variant": variant, "tool": first["tool"], "bound": first["bound"],
                               "load": float(first["load"]), "rate": float(first["rate"]),
                               "requests": len(g), "sent": len(sent), "ok": ok, "failed": len(g) - ok,
                               "failure_rate": (len(g) - ok) / len(g),
                               "throughput_rps": stats.throughput(ok, span) if span > 0 else float("nan")}
        r = runs[(runs["repeat"] == rep) & (runs["variant"] == variant)] if not runs.empty else runs
        row["scheduled"] = int(r["scheduled"].iloc[0]) if len(r) else len(g)
        row["duration_s"] = float(r["duration_s"].iloc[0]) if len(r) else float("nan")
        row["sent_fraction"] = len(sent) / row["scheduled"]
        row.update(_pcts(g["corrected_s"] if first["tool"] == "openloop" else g["latency_s"]))
        # from the actual send: openloop's naive latency; Vegeta's own latency is p*_ms (with
        # -max-connections it includes the wait for a connection, so it is no "naive" figure)
        row.update(_pcts(sent["latency_s"] if first["tool"] == "openloop" else [], "naive_"))
        row.update(_pcts(g["corrected_s"], "corrected_"))
        lag = (sent["start_s"] - sent["intended_s"]).to_numpy(float) * 1000.0
        row["lag_p99_ms"] = float(stats.percentiles(lag, [99])[0])
        if windows is not None and not windows.empty and "generator_cpu_s" in windows.columns:
            w = windows[(windows["repeat"] == rep) & (windows["variant"] == variant)]
            if len(w):
                for c in ("generator_cpu_s", "server_cpu_s", "db_cpu_s", "machine_cpu_s", "wall_s"):
                    row[c] = float(w[c].iloc[0]) if c in w.columns else float("nan")
        out.append(row)
    return pd.DataFrame(out)


def _close(a: float, b: float, rel: float, abs_ms: float) -> bool:
    """|a - b| within rel x b, or abs_ms when that is larger (b the reference)."""
    return abs(a - b) <= max(rel * abs(b), abs_ms)


def verdict(o: Mapping[str, Any], v: Mapping[str, Any], *, throughput_tol: float = THROUGHPUT_TOL,
            sent_tol: float = SENT_TOL, rel_tol: float = LATENCY_REL_TOL,
            abs_ms: float = LATENCY_ABS_MS) -> dict[str, Any]:
    """Compare a Vegeta window `v` with the openloop window `o` at the same rate (rows of
    `window_figures`): {"verdict": AGREE | DIFFER (harness.core.verdicts), "differs": [figure, ...], "reason": str}."""
    differs = []
    if abs(v["sent"] - o["sent"]) > sent_tol * o["sent"]:
        differs.append("sent")
    if not (o["throughput_rps"] > 0 and abs(v["throughput_rps"] / o["throughput_rps"] - 1) <= throughput_tol):
        differs.append("throughput")
    for q in QUANTILES:
        if not _close(v[f"{q}_ms"], o[f"{q}_ms"], rel_tol, abs_ms):
            differs.append(q)
    if not differs:
        return {"verdict": AGREE, "differs": [], "reason":
                f"sent {v['sent']} vs {o['sent']}, throughput {v['throughput_rps']:.1f} vs {o['throughput_rps']:.1f} "
                f"req/s, p99 {v['p99_ms']:.1f} vs {o['p99_ms']:.1f} ms (Vegeta vs harness.core.openloop corrected)"}
    reasons = []
    half_gap_ms = 0.5 / o["rate"] * 1000.0
    latency = [q for q in QUANTILES if q in differs]
    workers = v.get("bound") == "workers"
    if "sent" in differs and v["sent"] < o["sent"]:
        how = ("with -max-workers its pacer waits while every worker waits for a response, then stops at "
               "-duration: hits it could not start are never sent, and their wait is timed nowhere"
               if workers else "it stopped at -duration before starting them all")
        reasons.append(f"Vegeta sent {v['sent']} of {v['scheduled']} scheduled hits, harness.core.openloop "
                       f"{o['sent']} of {o['scheduled']}: {how}")
    if latency:
        figs = ", ".join(f"{q} {v[f'{q}_ms']:.1f} vs {o[f'{q}_ms']:.1f} ms" for q in latency)
        matches_naive = all(_close(v[f"{q}_ms"], o[f"naive_{q}_ms"], rel_tol, abs_ms) for q in latency)
        queued = not all(_close(o[f"naive_{q}_ms"], o[f"{q}_ms"], rel_tol, abs_ms) for q in latency)
        # on a log scale, is Vegeta's figure nearer openloop's naive (from the actual send) or corrected one?
        nearer_naive = all(abs(math.log(v[f"{q}_ms"] / o[f"naive_{q}_ms"])) < abs(math.log(v[f"{q}_ms"] / o[f"{q}_ms"]))
                           for q in latency if min(v[f"{q}_ms"], o[f"naive_{q}_ms"], o[f"{q}_ms"]) > 0)
        if not queued:
            reasons.append(f"no request queued in harness.core.openloop (its naive and corrected latencies agree), "
                           f"so the "
                           f"difference ({figs}, Vegeta vs openloop) is in the time to a response as each tool saw "
                           f"it: the app's response time in two windows run one after the other, plus each "
                           f"generator's own delay in noticing a response (Python asyncio, Go)")
        elif nearer_naive:
            reasons.append(
                f"Vegeta's latency is of harness.core.openloop's naive kind, from the actual send "
                f"(p99 {v['p99_ms']:.1f} "
                f"ms against naive {o['naive_p99_ms']:.1f} ms and corrected {o['p99_ms']:.1f} ms from the intended "
                "send time): Vegeta starts the clock when a worker picks the hit up (lib/attack.go hit(), "
                "Result.Timestamp)" + (", and with -max-workers a hit that finds every worker busy waits untimed "
                                       "in the pacer" if workers else "")
                + ("" if matches_naive else "; what remains between it and the naive figures is in the responses"))
        elif not workers:
            reasons.append(f"both count the wait for a free connection (Vegeta inside client.Do, after "
                           f"Result.Timestamp), so the difference ({figs}, Vegeta vs openloop corrected) is in "
                           f"the waits themselves, not in what is timed")
        else:
            reasons.append(f"Vegeta's figures match neither of harness.core.openloop's views ({figs} against the "
                           f"corrected ones; naive p99 {o['naive_p99_ms']:.1f} ms)")
    if "throughput" in differs and "sent" not in differs:
        reasons.append(f"throughput {v['throughput_rps']:.1f} vs {o['throughput_rps']:.1f} req/s"
                       + (" (above saturation: the app's capacity during each window)" if o["load"] > 1 else ""))
    if o.get("lag_p99_ms", 0.0) > half_gap_ms:
        waited = not all(_close(o[f"naive_{q}_ms"], o[f"{q}_ms"], rel_tol, abs_ms) for q in QUANTILES)
        reasons.append(f"harness.core.openloop's send lag p99 {o['lag_p99_ms']:.1f} ms exceeds half the interval "
                       f"({half_gap_ms:.1f} ms), so its own validity rule (openloop.assess) marks this rate invalid"
                       + (": requests waited for one of its connections, and its corrected latency counts that wait"
                          if waited else ""))
    if v.get("lag_p99_ms", 0.0) > half_gap_ms:
        reasons.append(f"Vegeta started hits late against its schedule (reconstructed start lag p99 "
                       f"{v['lag_p99_ms']:.1f} ms"
                       + (", waiting for a free worker: not in its latency)" if workers else
                          ": its pacer or goroutines behind; not in its latency)"))
    gen_o, gen_v = float(o.get("generator_cpu_s", float("nan"))), float(v.get("generator_cpu_s", float("nan")))
    if latency and not (math.isnan(gen_o) or math.isnan(gen_v)):
        reasons.append(f"generator CPU {gen_o:.2f} s (openloop) vs {gen_v:.2f} s (Vegeta), on the cores the app "
                       f"and the database use")
    return {"verdict": DIFFER, "differs": differs, "reason": "; ".join(reasons)}


def _frames(run: Run, ok_only: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return (run.table(EXPERIMENT, "samples", ok_only=ok_only), run.table(EXPERIMENT, "runs", ok_only=ok_only),
            run.table(EXPERIMENT, "windows", ok_only=ok_only))


def figures(run: Run, ok_only: bool = True) -> pd.DataFrame:
    """`window_figures` of a stored run."""
    return window_figures(*_frames(run, ok_only))


def verdicts(figs: pd.DataFrame) -> pd.DataFrame:
    """One row per (repeat, rate, Vegeta window): the openloop and Vegeta figures side by side,
    the verdict and its reason."""
    rows = []
    if figs.empty:
        return pd.DataFrame()
    for (rep, rate), g in figs.groupby(["repeat", "rate"], sort=True):
        o = g[g["tool"] == "openloop"]
        if o.empty:
            continue
        orow = o.iloc[0].to_dict()
        for _, vrow in g[g["tool"] == "vegeta"].iterrows():
            v = vrow.to_dict()
            res = verdict(orow, v)
            rows.append({"repeat": rep, "load": orow["load"], "rate": rate, "vegeta": v["variant"],
                         "bound": v["bound"], "level": "above saturation" if orow["load"] > 1 else
                         ("below saturation" if orow["load"] <= 1 else "fixed rate"),
                         "openloop_throughput_rps": orow["throughput_rps"],
                         "vegeta_throughput_rps": v["throughput_rps"],
                         "openloop_sent": orow["sent"], "vegeta_sent": v["sent"],
                         "scheduled": orow["scheduled"],
                         **{f"openloop_{q}_ms": orow[f"{q}_ms"] for q in QUANTILES},
                         **{f"openloop_naive_{q}_ms": orow[f"naive_{q}_ms"] for q in QUANTILES},
                         **{f"vegeta_{q}_ms": v[f"{q}_ms"] for q in QUANTILES},
                         "vegeta_corrected_p99_ms": v["corrected_p99_ms"],
                         "openloop_failed": orow["failed"], "vegeta_failed": v["failed"],
                         "verdict": res["verdict"], "differs": ",".join(res["differs"]), "reason": res["reason"]})
    return pd.DataFrame(rows)
