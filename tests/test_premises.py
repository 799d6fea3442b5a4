"""Bottleneck labels read against capacity, and premises that do not read the figure they gate
(issue 32, item 3)."""

from __future__ import annotations

import math

from harness.core import ledger
from harness.experiments.postgres import analysis as postgres


def test_connections_the_client_keeps_are_no_pool_limit():
    """Clients always waiting on a pool keep every connection assigned (asyncpg's hand-over counts
    as held: 1.000 in every repeat of the reference run), whatever limits. Below the pool bound at
    the server, that names no resource; at the bound, the seed's rule names the pool."""
    limit, reason = postgres.limiting_resource("uvloop_asyncpg", rps=900.0, pool_bound_rps=1800.0, cpu_pct=60.0,
                                               server_cpu_pct=50.0, machine_cpu_pct=120.0, n_cores=2,
                                               wait_pct=10.0, pool_busy_frac=1.0, held_over_db_time=2.0)
    assert limit == "not identified", (limit, reason)
    assert "50% of the pool bound" in reason and "do not tell which" in reason and "2.00x" in reason, reason
    limit, _ = postgres.limiting_resource("uvloop_asyncpg", rps=1700.0, pool_bound_rps=1800.0, cpu_pct=60.0,
                                          server_cpu_pct=50.0, machine_cpu_pct=120.0, n_cores=2,
                                          wait_pct=10.0, pool_busy_frac=1.0, held_over_db_time=1.05)
    assert limit == "pool"
    limit, _ = postgres.limiting_resource("asyncio_psycopg", rps=900.0, pool_bound_rps=1800.0, cpu_pct=95.0,
                                          server_cpu_pct=50.0, machine_cpu_pct=150.0, n_cores=2,
                                          wait_pct=math.nan, pool_busy_frac=1.0, held_over_db_time=2.0)
    assert limit == "client CPU"


def test_no_premise_gates_a_figure_its_label_reads():
    """A row judged only in the repeats where a bottleneck label holds must not test a figure that
    label is computed from: it would keep the repeats by the value it then judges (002-fast20-05
    tested the loop's CPU above 90% under the label 'client CPU', itself CPU + wait >= 90%)."""
    rows = ledger.load()
    circular = []
    for _, r in rows[rows["premise"].fillna("") != ""].iterrows():
        premise = ledger.parse_premise(r["premise"])
        if premise is None or premise.negate:
            continue   # a negated label: see METHODS, "Premises"
        tested = {name.rsplit(".", 1)[-1] for col in ("a", "b") for name in ledger.refs(str(r[col] or ""))}
        read = {q for label in premise.labels for q in postgres.LABEL_READS.get(label, ())}
        if tested & read:
            circular.append((r["claim_id"], sorted(tested & read)))
    assert not circular, circular

