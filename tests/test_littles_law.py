"""Little's law on the smoke run: every closed-loop experiment's throughput against its latency.

A closed loop of N clients keeps each client either in a request (latency R) or between two (Z: its
own code, the GIL, a core it waits for; pgbench's thread serving its other clients). Over a window
of T seconds N = X * (R + Z), X the throughput. The harness defines X once
(`measure.completions_in_window`: the successful requests that END inside the window, / T) and
takes R from the requests that STARTED inside it (no warm-up request); Z is measured here from the
same samples (a client's next start minus its previous end). The law then holds up to what
happens at the window's edges:

- each client has one request in flight when the window opens (counted in X when it ends inside)
  and one when it closes (not counted): the two cancel on average, and the spread of what is
  left is a fraction of one request per client, N * (R + Z) / T;
- the mongo families close their window only once every worker's last request has returned (no
  request starts after `duration_s`): during that drain fewer than N are in flight, which lowers
  X * (R + Z) by a fraction of the same amount.

Tolerance: |N - X * (R + Z)| <= half of one request per client over the window, N * (R + Z) / T / 2,
plus 5% of N for what the samples cannot see (a client starting late, a window opened between a
request's end and its record). The old count (requests that started AND ended inside the window)
loses the N requests in flight at the opening, a whole N * R / T: in the smoke run's slow pg_models
windows (R / T ~ 7-16% on this 2-core machine) that put 3 of 10 variants beyond the tolerance, and
`test_old_count_is_further_from_littles_law` shows on every run that the check sees the difference.
The law also found a bias of another kind: mongo_models' window held its database watch's reads,
so a 0.3 s window's throughput was 10-23% low (`mongo_workload._window` now keeps them outside).

The latency side, window by window (issue 32): the samples of a window are the requests that started
and ended inside it, which keeps a request of latency L with probability (T - L) / T, so the plain
mean of a heavy-tailed closed loop is low (asyncpg's unfair pool: Little's law ratio 0.88-0.94 in
the reference run 1f2a). `analysis.postgres.models_table` weights each sample by T / (T - L) and flags
every window whose ratio lies outside 0.03 + 1.96 standard errors of its mean
(`littles_law_outside`). The last two tests read the committed reference run's raw tables (a real
measured run, no new measurement): at least 95% of its pg_models windows pass, every variant's median
lies within 0.97-1.03, and the plain mean fails the check.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.core import config, store
from harness.core.measure import window_completed
from harness.experiments.postgres import analysis as postgres
from harness.judging import findings

# experiment -> the windows column that holds its N (clients, tasks or threads)
CLOSED_LOOPS = {"pg_models": "clients", "pg_ceiling": "clients", "mongo_pool": "workers",
                "mongo_models": "workers", "departures": "workers"}
EDGE_SHARE = 0.5        # of one request per client over the window (see the module docstring)
UNSEEN = 0.05           # of N
WINDOWS_WITHIN = 0.95   # the share of a run's closed-loop windows that must pass (issue 32)
MEDIAN_BAND = (0.97, 1.03)   # every variant's median window


def between_requests_s(samples: pd.DataFrame) -> float:
    """Z: the mean time a client spent between the end of one request and the start of its next."""
    ordered = samples.sort_values(["task", "start_s"])
    same_task = ordered["task"].eq(ordered["task"].shift(-1))
    gaps = ordered["start_s"].shift(-1) - (ordered["start_s"] + ordered["latency_s"])
    return float(gaps[same_task].clip(lower=0).mean()) if same_task.any() else 0.0


def little(run, experiment: str, count=window_completed) -> pd.DataFrame:
    """One row per window: N, X (from `count`), R (mean latency of its ok samples), Z, the
    tolerance, and how far from N X * (R + Z) is, relative to N (`shortfall`)."""
    windows, samples = run.table(experiment, "windows"), run.table(experiment, "samples")
    rows = []
    for _, w in windows.iterrows():
        mine = samples[(samples["repeat"] == w["repeat"]) & (samples["variant"] == w["variant"])]
        ok = mine[mine["ok"].astype(bool)]
        if ok.empty:
            continue
        n, wall = float(w[CLOSED_LOOPS[experiment]]), float(w["wall_s"])
        x = count(w)[0] / wall
        r, z = float(ok["latency_s"].mean()), between_requests_s(mine)
        rows.append({"variant": w["variant"], "n": n, "x": x, "r_s": r, "z_s": z, "cycle_over_t": (r + z) / wall,
                     "shortfall": (n - x * (r + z)) / n,
                     "tolerance": EDGE_SHARE * (r + z) / wall + UNSEEN})
    return pd.DataFrame(rows)


def old_count(w: pd.Series) -> tuple[int, str]:
    return int(w["ops"]), "started and ended in window"


@pytest.mark.parametrize("experiment", list(CLOSED_LOOPS))
def test_throughput_obeys_littles_law(smoke_run, experiment):
    """Judged on the experiment's median window: on a shared 2-core machine one window can hold a
    stall of a few hundred ms at an edge (seen: every client of one pg_models variant in flight for
    the window's last 0.28 s), which no edge allowance short of the stall itself covers."""
    table = little(smoke_run, experiment)
    assert len(table), f"{experiment}: no window with ok samples in the smoke run"
    excess = table["shortfall"].abs() - table["tolerance"]
    assert excess.median() <= 0, f"{experiment}: N != X * (R + Z) beyond the tolerance:\n{table.to_string()}"


@pytest.mark.parametrize("experiment", ["pg_models", "pg_ceiling", "departures"])
def test_old_count_is_further_from_littles_law(smoke_run, experiment):
    """The check can fail: the old count (started and ended inside the window) misses the requests
    in flight at the opening, one per client, so its X * (R + Z) falls short of N by about one
    request per client over the window more than the new count's: on average over the windows at
    least the tolerance's whole edge share (half a request per client)."""
    new, old = little(smoke_run, experiment), little(smoke_run, experiment, old_count)
    if experiment == "departures":  # its mongo windows drain inside the window: both counts agree
        pg = new["variant"].str.startswith("pg_")
        new, old = new[pg], old[pg]
    extra = float((old["shortfall"] - new["shortfall"]).mean())
    assert extra >= EDGE_SHARE * float(new["cycle_over_t"].mean()), (extra, new.to_string())


@pytest.fixture(scope="module")
def reference_models() -> tuple[store.Run, pd.DataFrame]:
    """The committed reference run (data/reference/<id>) and its pg_models window table."""
    ref = findings.reference_summary(config.REPO_ROOT / "data")
    if ref is None:
        pytest.skip("no reference run (data/reference/<id>/summary.json)")
    run = store.open_run(ref.parent)
    if "pg_models" not in run.experiments or not run.repeat_dirs("pg_models"):
        pytest.skip(f"the reference run {run.id} has no pg_models raw tables")
    return run, postgres.models_table(run)


def test_every_reference_window_obeys_littles_law(reference_models):
    """Each pg_models window carries its ratio, tolerance and flag; at least 95% pass and every
    variant's median ratio lies within 0.97-1.03 (1f2a: 96% of 200 windows, medians 0.987-1.005)."""
    run, t = reference_models
    assert {"littles_law_ratio", "littles_law_tolerance", "littles_law_outside"} <= set(t.columns)
    assert (~((t["littles_law_ratio"] - 1).abs() <= t["littles_law_tolerance"])).equals(t["littles_law_outside"])
    within = 1 - t["littles_law_outside"].mean()
    outside = t.loc[t["littles_law_outside"], ["variant", "repeat", "littles_law_ratio", "littles_law_tolerance"]]
    assert within >= WINDOWS_WITHIN, (run.id, outside.to_string())
    medians = t.groupby("variant")["littles_law_ratio"].median()
    low, high = MEDIAN_BAND
    assert medians.between(low, high).all(), (run.id, medians[~medians.between(low, high)])


def test_the_edge_selected_mean_fails_littles_law_on_the_reference(reference_models):
    """The check can fail: the plain mean of the same samples (the old estimator), judged with the
    same tolerance built from its own standard error, fails it (1f2a: 63% of windows pass, asyncpg's
    medians 0.88-0.94; 4aa6: 96% of windows pass, but six asyncpg variants' medians lie at
    0.948-0.958), and where a median misses the band it is low: the long requests the edges drop."""
    run, t = reference_models
    samples = run.table("pg_models", "samples")
    plain = (samples[samples["ok"].astype(bool)].groupby(["repeat", "variant"])["latency_s"]
             .agg(["mean", "std", "count"]).reset_index())
    t = t.merge(plain, on=["repeat", "variant"], validate="one_to_one")
    ratio = 1000.0 * t["mean"] / t["littles_law_ms"]
    tolerance = postgres.LITTLE_BAND + postgres.LITTLE_Z * t["std"] / t["count"].map(math.sqrt) / t["mean"]
    windows_pass = ((ratio - 1).abs() <= tolerance).mean() >= WINDOWS_WITHIN
    medians = ratio.groupby(t["variant"]).median()
    outside = medians[~medians.between(*MEDIAN_BAND)]
    assert not (windows_pass and outside.empty), (run.id, medians.to_string())
    assert (outside < MEDIAN_BAND[0]).all(), (run.id, outside.to_string())
